//! The cloud autoscaling-group driver: the read replicas are the instances of an AWS Auto
//! Scaling group (the one the deployment's Terraform creates), scaled through the Query API
//! (`SetDesiredCapacity`; `TerminateInstanceInAutoScalingGroup` to stop a drained replica,
//! which registers under its instance id), SigV4-signed with credentials from the
//! environment.
//!
//! Requests and answers are pure functions below, always compiled and tested against
//! recorded answers; [`AsgDriver`], which sends them, needs the `aws-asg` feature.

use crate::driver::DriverError;
use crate::driver::sigv4::{self, Credentials, Scope};

/// The Query API's version.
const API_VERSION: &str = "2011-01-01";
const API: &str = "autoscaling";

/// Where the group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsgConfig {
    /// e.g. `eu-west-1`.
    pub region: String,
    pub group_name: String,
    /// The API's base URL; `https://autoscaling.<region>.amazonaws.com` when `None`.
    pub endpoint: Option<String>,
}

impl AsgConfig {
    /// The API's base URL, without a trailing slash.
    pub fn endpoint(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| format!("https://autoscaling.{}.amazonaws.com", self.region))
            .trim_end_matches('/')
            .to_owned()
    }
}

/// One Query API call, ready to send: `POST <url>` with these headers and form body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRequest {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut pairs: Vec<(&str, &str)> = pairs.to_vec();
    pairs.push(("Version", API_VERSION));
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", sigv4::encode(name), sigv4::encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `SetDesiredCapacity` to `capacity`, without waiting for the group's cooldown.
pub fn set_desired_capacity(group: &str, capacity: u32) -> String {
    form(&[
        ("Action", "SetDesiredCapacity"),
        ("AutoScalingGroupName", group),
        ("DesiredCapacity", &capacity.to_string()),
        ("HonorCooldown", "false"),
    ])
}

/// `DescribeAutoScalingGroups` of one group.
pub fn describe_group(group: &str) -> String {
    form(&[
        ("Action", "DescribeAutoScalingGroups"),
        ("AutoScalingGroupNames.member.1", group),
    ])
}

/// `TerminateInstanceInAutoScalingGroup`, lowering the desired capacity by one.
pub fn terminate_instance(instance_id: &str) -> String {
    form(&[
        ("Action", "TerminateInstanceInAutoScalingGroup"),
        ("InstanceId", instance_id),
        ("ShouldDecrementDesiredCapacity", "true"),
    ])
}

/// Signs a form body for the group's region at `unix_seconds`.
pub fn sign(
    config: &AsgConfig,
    credentials: &Credentials,
    body: String,
    unix_seconds: u64,
) -> Result<SignedRequest, DriverError> {
    let endpoint = config.endpoint();
    let host = endpoint
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or(&endpoint)
        .split('/')
        .next()
        .filter(|host| !host.is_empty())
        .ok_or_else(|| DriverError::Misconfigured(format!("no host in `{endpoint}`")))?
        .to_owned();
    let amz_date = sigv4::amz_date(unix_seconds);
    let mut headers = vec![
        (
            "content-type".to_owned(),
            "application/x-www-form-urlencoded; charset=utf-8".to_owned(),
        ),
        ("host".to_owned(), host),
        ("x-amz-date".to_owned(), amz_date.clone()),
    ];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token".to_owned(), token.clone()));
    }
    let request = sigv4::Request {
        method: "POST",
        path: "/",
        query: "",
        headers: &headers,
        payload: body.as_bytes(),
    };
    let scope = Scope {
        region: &config.region,
        service: API,
        amz_date: &amz_date,
    };
    let authorization = sigv4::authorization(&request, credentials, &scope);
    headers.push(("authorization".to_owned(), authorization));
    Ok(SignedRequest {
        url: format!("{endpoint}/"),
        headers,
        body,
    })
}

/// The text of the first `<tag>…</tag>` in `xml`.
fn element<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].trim())
}

/// Checks an answer's status: an error answer becomes [`DriverError::Refused`] with its
/// `<Code>` and `<Message>`.
pub fn check(status: u16, xml: &str) -> Result<(), DriverError> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    Err(DriverError::Refused {
        api: API,
        status,
        code: element(xml, "Code").unwrap_or("unknown").to_owned(),
        message: element(xml, "Message").unwrap_or(xml).to_owned(),
    })
}

/// The group's desired capacity from a `DescribeAutoScalingGroups` answer.
pub fn desired_capacity(status: u16, xml: &str, group: &str) -> Result<u32, DriverError> {
    check(status, xml)?;
    let members = if xml.contains("<AutoScalingGroups/>") {
        ""
    } else {
        element(xml, "AutoScalingGroups").ok_or_else(|| DriverError::Unexpected {
            api: API,
            detail: "no AutoScalingGroups in the answer".to_owned(),
        })?
    };
    if !members.contains("<member>") {
        return Err(DriverError::Misconfigured(format!(
            "no autoscaling group named `{group}`"
        )));
    }
    let text = element(members, "DesiredCapacity").unwrap_or("");
    text.parse().map_err(|_| DriverError::Unexpected {
        api: API,
        detail: format!("DesiredCapacity `{text}` is not a count"),
    })
}

#[cfg(feature = "aws-asg")]
pub use client::AsgDriver;

#[cfg(feature = "aws-asg")]
mod client {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::driver::ReplicaDriver;

    /// Scales an autoscaling group; see the module documentation.
    #[derive(Debug)]
    pub struct AsgDriver {
        config: AsgConfig,
        http: reqwest::Client,
        /// The capacity last set or read.
        desired: Option<u32>,
    }

    impl AsgDriver {
        pub fn new(config: AsgConfig) -> Result<AsgDriver, DriverError> {
            if rustls::crypto::CryptoProvider::get_default().is_none() {
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            let http = reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .map_err(|e| DriverError::Misconfigured(e.to_string()))?;
            Ok(AsgDriver {
                config,
                http,
                desired: None,
            })
        }

        async fn call(&self, body: String) -> Result<String, DriverError> {
            let credentials = Credentials::from_lookup(|name| std::env::var(name).ok())
                .ok_or_else(|| {
                    DriverError::Misconfigured(
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set".to_owned(),
                    )
                })?;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs());
            let signed = sign(&self.config, &credentials, body, now)?;
            let mut request = self.http.post(&signed.url).body(signed.body);
            for (name, value) in &signed.headers {
                if name != "host" {
                    request = request.header(name.as_str(), value.as_str());
                }
            }
            let unreachable = |e: reqwest::Error| DriverError::Unreachable {
                api: API,
                detail: e.to_string(),
            };
            let response = request.send().await.map_err(unreachable)?;
            let status = response.status().as_u16();
            let text = response.text().await.map_err(unreachable)?;
            check(status, &text)?;
            Ok(text)
        }

        async fn capacity(&mut self) -> Result<u32, DriverError> {
            let group = self.config.group_name.clone();
            let answer = self.call(describe_group(&group)).await?;
            let capacity = desired_capacity(200, &answer, &group)?;
            self.desired = Some(capacity);
            Ok(capacity)
        }
    }

    impl ReplicaDriver for AsgDriver {
        async fn starting(&mut self, registered: &[String]) -> Result<u32, DriverError> {
            let desired = self.capacity().await?;
            let registered = u32::try_from(registered.len()).unwrap_or(u32::MAX);
            Ok(desired.saturating_sub(registered))
        }

        async fn start(&mut self, count: u32) -> Result<(), DriverError> {
            let current = match self.desired {
                Some(desired) => desired,
                None => self.capacity().await?,
            };
            let target = current.saturating_add(count);
            self.call(set_desired_capacity(&self.config.group_name, target))
                .await?;
            self.desired = Some(target);
            Ok(())
        }

        async fn stop(&mut self, replica_ids: &[String]) -> Result<(), DriverError> {
            for id in replica_ids {
                self.call(terminate_instance(id)).await?;
                self.desired = self.desired.map(|d| d.saturating_sub(1));
            }
            Ok(())
        }

        async fn shutdown(&mut self) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AsgConfig {
        AsgConfig {
            region: "eu-west-1".to_owned(),
            group_name: "floe-read-replicas".to_owned(),
            endpoint: None,
        }
    }

    #[test]
    fn bodies_are_sorted_encoded_forms() {
        assert_eq!(
            set_desired_capacity("floe read/replicas", 3),
            "Action=SetDesiredCapacity&AutoScalingGroupName=floe%20read%2Freplicas&\
             DesiredCapacity=3&HonorCooldown=false&Version=2011-01-01"
        );
        assert_eq!(
            terminate_instance("i-0123456789abcdef0"),
            "Action=TerminateInstanceInAutoScalingGroup&InstanceId=i-0123456789abcdef0&\
             ShouldDecrementDesiredCapacity=true&Version=2011-01-01"
        );
        assert_eq!(
            describe_group("g"),
            "Action=DescribeAutoScalingGroups&AutoScalingGroupNames.member.1=g&Version=2011-01-01"
        );
    }

    #[test]
    fn a_request_is_signed_for_the_groups_region() {
        let credentials = Credentials {
            access_key_id: "AKIDEXAMPLE".to_owned(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned(),
            session_token: Some("token".to_owned()),
        };
        let body = set_desired_capacity("floe-read-replicas", 2);
        let signed = sign(&config(), &credentials, body.clone(), 1_440_938_160).expect("signed");
        assert_eq!(signed.url, "https://autoscaling.eu-west-1.amazonaws.com/");
        assert_eq!(signed.body, body);
        let header = |name: &str| {
            signed
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("host"), Some("autoscaling.eu-west-1.amazonaws.com"));
        assert_eq!(header("x-amz-date"), Some("20150830T123600Z"));
        assert_eq!(header("x-amz-security-token"), Some("token"));
        let authorization = header("authorization").expect("authorization");
        assert!(
            authorization.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/eu-west-1/autoscaling/\
                 aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
                 Signature="
            ),
            "{authorization}"
        );
        // Deterministic: the same inputs sign the same.
        let again = sign(&config(), &credentials, body, 1_440_938_160).expect("signed");
        assert_eq!(again, signed);
    }

    const DESCRIBE: &str = r#"<DescribeAutoScalingGroupsResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">
  <DescribeAutoScalingGroupsResult>
    <AutoScalingGroups>
      <member>
        <AutoScalingGroupName>floe-read-replicas</AutoScalingGroupName>
        <MinSize>0</MinSize>
        <MaxSize>8</MaxSize>
        <DesiredCapacity>3</DesiredCapacity>
        <Instances>
          <member>
            <InstanceId>i-0123456789abcdef0</InstanceId>
            <LifecycleState>InService</LifecycleState>
          </member>
        </Instances>
      </member>
    </AutoScalingGroups>
  </DescribeAutoScalingGroupsResult>
  <ResponseMetadata>
    <RequestId>7c6e177f-f082-11e1-ac58-3714bEXAMPLE</RequestId>
  </ResponseMetadata>
</DescribeAutoScalingGroupsResponse>"#;

    const NO_GROUP: &str = r#"<DescribeAutoScalingGroupsResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">
  <DescribeAutoScalingGroupsResult>
    <AutoScalingGroups/>
  </DescribeAutoScalingGroupsResult>
  <ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>
</DescribeAutoScalingGroupsResponse>"#;

    const EMPTY_LIST: &str = "<DescribeAutoScalingGroupsResponse><DescribeAutoScalingGroupsResult>\
        <AutoScalingGroups></AutoScalingGroups></DescribeAutoScalingGroupsResult>\
        </DescribeAutoScalingGroupsResponse>";

    const ERROR: &str = r#"<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">
  <Error>
    <Type>Sender</Type>
    <Code>ValidationError</Code>
    <Message>New SetDesiredCapacity value 9 is above max value 8 for the AutoScalingGroup.</Message>
  </Error>
  <RequestId>2a1b4c2e-0000-4d6f-9bd5-EXAMPLE</RequestId>
</ErrorResponse>"#;

    const SET_OK: &str = r#"<SetDesiredCapacityResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">
  <ResponseMetadata><RequestId>9fe8d4f2-0000-11e1-a1a1-EXAMPLE</RequestId></ResponseMetadata>
</SetDesiredCapacityResponse>"#;

    #[test]
    fn recorded_answers_are_read() {
        assert_eq!(
            desired_capacity(200, DESCRIBE, "floe-read-replicas").expect("capacity"),
            3
        );
        assert!(check(200, SET_OK).is_ok());
        for missing in [NO_GROUP, EMPTY_LIST] {
            assert!(matches!(
                desired_capacity(200, missing, "g"),
                Err(DriverError::Misconfigured(_))
            ));
        }
        match check(400, ERROR) {
            Err(DriverError::Refused {
                status,
                code,
                message,
                ..
            }) => {
                assert_eq!((status, code.as_str()), (400, "ValidationError"));
                assert!(message.starts_with("New SetDesiredCapacity value 9"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            check(503, "Service Unavailable"),
            Err(DriverError::Refused { status: 503, .. })
        ));
        assert!(matches!(
            desired_capacity(200, "<html/>", "g"),
            Err(DriverError::Unexpected { .. })
        ));
    }
}

//! The cloud autoscaling-group driver: the read replicas are the instances of an AWS Auto
//! Scaling group (the one the deployment's Terraform creates). It sets the group's desired
//! capacity to start replicas, and terminates a drained replica's instance (a replica
//! registers under its instance id) with `ShouldDecrementDesiredCapacity` to stop it.
//!
//! It calls the Auto Scaling API through the official AWS SDK, which finds credentials and
//! the region through the SDK's standard chain: environment variables, the shared
//! `config`/`credentials` files (`AWS_PROFILE`), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE`),
//! the ECS container endpoint, then the EC2 instance metadata service (IMDSv2) — the instance
//! role, on a controlplane on EC2. TLS is rustls on ring, like the rest of the program.
//!
//! [`AsgDriver::connect`] describes the group once before the controlplane serves anything,
//! so that missing credentials, a missing region or a wrong group name stop the start with a
//! clear message instead of failing at the first scaling decision.
//!
//! Only [`AsgConfig`] is compiled without the `aws-asg` cargo feature: the SDK is heavy to
//! build.

use std::time::Duration;

/// Where the group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsgConfig {
    pub group_name: String,
    /// The group's region; `None`: the SDK's chain (`AWS_REGION`, the profile, the instance
    /// metadata).
    pub region: Option<String>,
    /// The Auto Scaling API's URL, for tests against a local server; `None`: AWS's endpoint
    /// for the region (or `AWS_ENDPOINT_URL_AUTO_SCALING`, which the SDK reads itself).
    pub endpoint: Option<String>,
}

impl AsgConfig {
    /// A group found through the SDK's chain alone.
    pub fn new(group_name: impl Into<String>) -> AsgConfig {
        AsgConfig {
            group_name: group_name.into(),
            region: None,
            endpoint: None,
        }
    }
}

/// The longest a connection to the API may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest one attempt of a call may take.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a call may take, retries included: well under the autoscaler's interval
/// times a few, so that a stuck API shows as driver errors, not a silent autoscaler.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts per call (the first included), with the SDK's standard backoff between them.
pub const MAX_ATTEMPTS: u32 = 3;

#[cfg(feature = "aws-asg")]
pub use client::AsgDriver;

#[cfg(feature = "aws-asg")]
mod client {
    use aws_config::BehaviorVersion;
    use aws_config::retry::RetryConfig;
    use aws_config::timeout::TimeoutConfig;
    use aws_sdk_autoscaling::config::http::HttpResponse;
    use aws_sdk_autoscaling::error::{ProvideErrorMetadata, SdkError};
    use aws_sdk_autoscaling::types::AutoScalingGroup;
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

    use super::*;
    use crate::driver::{DriverError, ReadReplicaDriver, Unexpected};

    const API: &str = "Auto Scaling";

    /// Scales an autoscaling group; see the module documentation.
    #[derive(Debug)]
    pub struct AsgDriver {
        group_name: String,
        client: aws_sdk_autoscaling::Client,
        /// The capacity last set or read.
        desired: Option<u32>,
    }

    impl AsgDriver {
        /// Loads the SDK's configuration, resolves credentials once, and describes the
        /// group: any of the three missing is an error here.
        pub async fn connect(config: AsgConfig) -> Result<AsgDriver, DriverError> {
            let http = aws_smithy_http_client::Builder::new()
                .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
                .build_https();
            let mut loader = aws_config::defaults(BehaviorVersion::latest())
                .http_client(http)
                .timeout_config(
                    TimeoutConfig::builder()
                        .connect_timeout(CONNECT_TIMEOUT)
                        .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                        .operation_timeout(CALL_TIMEOUT)
                        .build(),
                )
                .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS));
            if let Some(region) = &config.region {
                loader = loader.region(aws_config::Region::new(region.clone()));
            }
            if let Some(endpoint) = &config.endpoint {
                loader = loader.endpoint_url(endpoint);
            }
            let sdk = loader.load().await;
            let region = sdk.region().cloned().ok_or(DriverError::NoRegion)?;
            check_credentials(&sdk).await?;
            let client = aws_sdk_autoscaling::Client::new(&sdk);
            let mut driver = AsgDriver {
                group_name: config.group_name,
                client,
                desired: None,
            };
            let desired = driver.capacity().await?;
            tracing::info!(
                group = %driver.group_name,
                %region,
                desired,
                "scaling read replicas through the autoscaling group"
            );
            Ok(driver)
        }

        /// The group's desired capacity, read now.
        async fn capacity(&mut self) -> Result<u32, DriverError> {
            let answer = self
                .client
                .describe_auto_scaling_groups()
                .auto_scaling_group_names(&self.group_name)
                .send()
                .await
                .map_err(driver_error)?;
            let desired = desired_capacity(answer.auto_scaling_groups(), &self.group_name)?;
            self.desired = Some(desired);
            Ok(desired)
        }
    }

    /// Resolves credentials through the chain once, so that a controlplane without any
    /// fails at start.
    async fn check_credentials(sdk: &aws_config::SdkConfig) -> Result<(), DriverError> {
        use aws_sdk_autoscaling::config::ProvideCredentials;
        let provider = sdk.credentials_provider().ok_or_else(|| {
            DriverError::NoCredentials("the SDK has no credentials provider".into())
        })?;
        provider
            .provide_credentials()
            .await
            .map(|_| ())
            .map_err(|error| DriverError::NoCredentials(Box::new(error)))
    }

    /// The desired capacity of the group named `name` in a `DescribeAutoScalingGroups`
    /// answer.
    fn desired_capacity(groups: &[AutoScalingGroup], name: &str) -> Result<u32, DriverError> {
        let group = groups
            .iter()
            .find(|group| group.auto_scaling_group_name() == Some(name))
            .ok_or_else(|| DriverError::NoGroup(name.to_owned()))?;
        let desired = group
            .desired_capacity()
            .ok_or_else(|| DriverError::Unexpected {
                api: API,
                what: Unexpected::NoDesiredCapacity {
                    group: name.to_owned(),
                },
            })?;
        u32::try_from(desired).map_err(|_| DriverError::Unexpected {
            api: API,
            what: Unexpected::DesiredCapacityOutOfRange {
                group: name.to_owned(),
                desired,
            },
        })
    }

    /// An SDK failure, by what the autoscaler can do about it: a refusal carries the API's
    /// code and message; everything that kept the call from an answer is `Unreachable`.
    fn driver_error<E>(error: SdkError<E, HttpResponse>) -> DriverError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        match &error {
            SdkError::ServiceError(service) => DriverError::Refused {
                api: API,
                status: service.raw().status().as_u16(),
                code: service.err().code().unwrap_or("unknown").to_owned(),
                message: service.err().message().unwrap_or_default().to_owned(),
            },
            SdkError::ConstructionFailure(_) => DriverError::Request {
                api: API,
                source: Box::new(error),
            },
            _ => DriverError::Unreachable {
                api: API,
                source: Box::new(error),
            },
        }
    }

    impl ReadReplicaDriver for AsgDriver {
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
            self.client
                .set_desired_capacity()
                .auto_scaling_group_name(&self.group_name)
                .desired_capacity(i32::try_from(target).unwrap_or(i32::MAX))
                // The autoscaler has its own cooldowns.
                .honor_cooldown(false)
                .send()
                .await
                .map_err(driver_error)?;
            self.desired = Some(target);
            Ok(())
        }

        async fn stop(&mut self, replica_ids: &[String]) -> Result<(), DriverError> {
            for id in replica_ids {
                self.client
                    .terminate_instance_in_auto_scaling_group()
                    .instance_id(id)
                    .should_decrement_desired_capacity(true)
                    .send()
                    .await
                    .map_err(driver_error)?;
                self.desired = self.desired.map(|d| d.saturating_sub(1));
            }
            Ok(())
        }

        async fn shutdown(&mut self) {}
    }
}

//! The autoscaling-group driver against a real Auto Scaling API: the moto server that
//! `FLOE_TEST_S3_ENDPOINT` names (`scripts/moto.sh`; it serves Auto Scaling beside S3). Each
//! test runs the `floe-controlplane` binary with an environment of its own, so that
//! credentials reach the driver only through the AWS SDK's chain: a shared credentials file,
//! or the instance metadata service (a small fake of IMDSv2 here). Without the endpoint the
//! tests pass without checking anything, like the tier's S3 tests.
#![cfg(feature = "aws-asg")]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_autoscaling::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::Provider;
use aws_smithy_http_client::tls::rustls_provider::CryptoMode;
use common::{call, eventually};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

fn endpoint() -> Option<String> {
    std::env::var("FLOE_TEST_S3_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
}

/// A client of the test server with static test credentials (moto accepts any).
fn admin_client(endpoint: &str) -> aws_sdk_autoscaling::Client {
    let config = aws_sdk_autoscaling::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "floe-test"))
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(Provider::Rustls(CryptoMode::Ring))
                .build_https(),
        )
        .build();
    aws_sdk_autoscaling::Client::from_conf(config)
}

/// A new, empty group on the test server, named after the test.
async fn create_group(endpoint: &str, test: &str) -> String {
    let client = admin_client(endpoint);
    let name = format!("floe-{test}-{}", std::process::id());
    client
        .create_launch_configuration()
        .launch_configuration_name(&name)
        // One of the images moto knows.
        .image_id("ami-12c6146b")
        .instance_type("t3.micro")
        .send()
        .await
        .expect("a launch configuration");
    client
        .create_auto_scaling_group()
        .auto_scaling_group_name(&name)
        .launch_configuration_name(&name)
        .min_size(0)
        .max_size(4)
        .desired_capacity(0)
        .availability_zones("us-east-1a")
        .send()
        .await
        .expect("a group");
    name
}

async fn desired_capacity(endpoint: &str, group: &str) -> i32 {
    admin_client(endpoint)
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(group)
        .send()
        .await
        .expect("describe")
        .auto_scaling_groups()
        .first()
        .and_then(|g| g.desired_capacity())
        .expect("the group")
}

/// `floe-controlplane` with nothing of the test process's environment, the AWS SDK pointed
/// at files under `dir` and the test server, and `env` on top.
fn controlplane(dir: &Path, group: &str, endpoint: &str, env: &[(&str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_floe-controlplane"));
    command
        .env_clear()
        .env("HOME", dir)
        .env("AWS_CONFIG_FILE", dir.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("credentials"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("FLOE_AWS_ENDPOINT_URL", endpoint)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["--listen", "127.0.0.1:0", "--autoscale-interval-ms", "100"])
        .arg("--insecure-no-auth")
        .arg("--insecure-plain-http")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--aws-autoscaling-group", group])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Waits for the address line, and returns it with the still running child.
async fn listening(mut child: Child) -> (Child, std::net::SocketAddr) {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the controlplane starts within a minute")
        .expect("stdout")
        .unwrap_or_default();
    let addr = line
        .strip_prefix("floe-controlplane listening on http://")
        .and_then(|addr| addr.parse().ok());
    match addr {
        Some(addr) => (child, addr),
        None => {
            let output = child.wait_with_output().await.expect("exit");
            panic!(
                "the controlplane did not start: {line}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// Exit status and stderr of a controlplane that must stop by itself.
async fn refused(command: &mut Command) -> (bool, String) {
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the controlplane stops within a minute")
        .expect("it runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn scale_to_two(addr: std::net::SocketAddr, endpoint: &str, group: &str) {
    let policy = json!({
        "min_replicas": 2, "max_replicas": 4, "target_bytes_per_second": 104857600u64,
        "target_consumers": 1000, "hysteresis_percent": 20,
        "scale_up_cooldown_ms": 0, "scale_down_cooldown_ms": 0,
    });
    let put = call(addr, "PUT", "/v1/scaling-policy", Some(&policy), None).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    eventually(
        "the group's desired capacity to reach 2",
        Duration::from_secs(30),
        || async { (desired_capacity(endpoint, group).await == 2).then_some(()) },
    )
    .await;
}

fn write_profile(dir: &Path) {
    std::fs::write(
        dir.join("credentials"),
        "[floe]\naws_access_key_id = test\naws_secret_access_key = test\n",
    )
    .expect("credentials file");
    std::fs::write(dir.join("config"), "[profile floe]\nregion = us-east-1\n")
        .expect("config file");
}

#[tokio::test]
async fn credentials_from_a_shared_profile_scale_the_group() {
    let Some(endpoint) = endpoint() else { return };
    let group = create_group(&endpoint, "profile").await;
    let dir = tempfile::tempdir().expect("tempdir");
    write_profile(dir.path());
    let command = controlplane(
        dir.path(),
        &group,
        &endpoint,
        &[("AWS_PROFILE", "floe".to_owned())],
    )
    .spawn()
    .expect("spawn");
    let (mut child, addr) = listening(command).await;
    scale_to_two(addr, &endpoint, &group).await;
    child.kill().await.expect("kill");
}

#[tokio::test]
async fn a_group_that_does_not_exist_stops_the_start() {
    let Some(endpoint) = endpoint() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    write_profile(dir.path());
    let (success, stderr) = refused(&mut controlplane(
        dir.path(),
        "no-such-group",
        &endpoint,
        &[("AWS_PROFILE", "floe".to_owned())],
    ))
    .await;
    assert!(!success);
    assert!(
        stderr.contains("no autoscaling group named `no-such-group`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn no_credentials_anywhere_stop_the_start() {
    let Some(endpoint) = endpoint() else { return };
    let group = create_group(&endpoint, "nocreds").await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A region, but no keys: not in the environment, no files, no instance metadata.
    let (success, stderr) = refused(&mut controlplane(
        dir.path(),
        &group,
        &endpoint,
        &[("AWS_REGION", "us-east-1".to_owned())],
    ))
    .await;
    assert!(!success);
    assert!(stderr.contains("no AWS credentials"), "{stderr}");
    assert_eq!(desired_capacity(&endpoint, &group).await, 0);
}

#[tokio::test]
async fn the_instance_role_from_imdsv2_scales_the_group() {
    let Some(endpoint) = endpoint() else { return };
    let group = create_group(&endpoint, "imds").await;
    let imds = FakeImds::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = controlplane(
        dir.path(),
        &group,
        &endpoint,
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url.clone())],
    );
    command.env_remove("AWS_EC2_METADATA_DISABLED");
    let (mut child, addr) = listening(command.spawn().expect("spawn")).await;
    scale_to_two(addr, &endpoint, &group).await;
    assert!(
        imds.credentials_served.load(Ordering::SeqCst) > 0,
        "the credentials came from the instance metadata"
    );
    assert!(
        imds.token_requests.load(Ordering::SeqCst) > 0,
        "IMDSv2: a session token was asked for"
    );
    child.kill().await.expect("kill");
}

/// Just enough of the EC2 instance metadata service (IMDSv2) to hand out an instance role's
/// credentials and the region: a token for a PUT, then GETs that must carry it.
struct FakeImds {
    url: String,
    token_requests: Arc<AtomicUsize>,
    credentials_served: Arc<AtomicUsize>,
}

impl FakeImds {
    const TOKEN: &'static str = "fake-imds-token";

    async fn start() -> FakeImds {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let token_requests = Arc::new(AtomicUsize::new(0));
        let credentials_served = Arc::new(AtomicUsize::new(0));
        let (tokens, served) = (token_requests.clone(), credentials_served.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (tokens, served) = (tokens.clone(), served.clone());
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 8192];
                    let read = stream.read(&mut buffer).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    let (status, body) = FakeImds::answer(&request, &tokens, &served);
                    // A token's answer says how long it lives, as IMDSv2's does.
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\
                         X-aws-ec2-metadata-token-ttl-seconds: 21600\r\n\
                         Connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        FakeImds {
            url,
            token_requests,
            credentials_served,
        }
    }

    fn answer(request: &str, tokens: &AtomicUsize, served: &AtomicUsize) -> (&'static str, String) {
        let line = request.lines().next().unwrap_or_default();
        let authorized = request.lines().any(|l| {
            l.to_ascii_lowercase() == format!("x-aws-ec2-metadata-token: {}", Self::TOKEN)
        });
        if line.starts_with("PUT /latest/api/token") {
            tokens.fetch_add(1, Ordering::SeqCst);
            return ("200 OK", Self::TOKEN.to_owned());
        }
        if !authorized {
            return ("401 Unauthorized", String::new());
        }
        let path = line.split(' ').nth(1).unwrap_or_default();
        match path {
            "/latest/meta-data/iam/security-credentials/" => ("200 OK", "floe-role".to_owned()),
            "/latest/meta-data/iam/security-credentials/floe-role" => {
                served.fetch_add(1, Ordering::SeqCst);
                let body = json!({
                    "Code": "Success", "Type": "AWS-HMAC", "LastUpdated": "2026-01-01T00:00:00Z",
                    "AccessKeyId": "test", "SecretAccessKey": "test", "Token": "session",
                    "Expiration": "2099-01-01T00:00:00Z",
                });
                ("200 OK", body.to_string())
            }
            "/latest/meta-data/placement/region" => ("200 OK", "us-east-1".to_owned()),
            _ => ("404 Not Found", String::new()),
        }
    }
}

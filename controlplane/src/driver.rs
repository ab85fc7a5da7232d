//! Scaling drivers: how the autoscaler's decisions become running (or stopped) read replica
//! processes. One narrow trait, [`ReadReplicaDriver`], and three implementations: local child
//! processes ([`local::LocalDriver`], the default of `floe-broker dev` and the tests), a
//! Kubernetes Deployment ([`kubernetes`]) and a cloud autoscaling group ([`aws_asg`]).
//!
//! The Kubernetes driver's requests and answers are pure functions, compiled and unit-tested
//! always; only the HTTP client that sends them sits behind the `kubernetes` cargo feature.
//! The autoscaling-group driver calls the AWS SDK, behind the `aws-asg` feature, and is
//! tested against a local S3-compatible server that also serves Auto Scaling (moto).

pub mod aws_asg;
pub mod kubernetes;
pub mod local;

use std::future::Future;
use std::path::PathBuf;

/// Which driver the autoscaler acts through, if any. Part of [`crate::Config`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ReadReplicaDriverConfig {
    /// No autoscaler acts (the default of `floe-controlplane`): replicas are started by
    /// hand, and still register, heartbeat and drain.
    #[default]
    None,
    /// Child processes of the controlplane: `program args... --replica-id <id>`, where the
    /// driver picks `<id>` and the process registers under it.
    /// `env` is set on each child on top of the controlplane's environment.
    Local {
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// `spec.replicas` of a Deployment, through its scale subresource.
    Kubernetes(kubernetes::KubernetesConfig),
    /// The desired capacity of an autoscaling group.
    AwsAutoScalingGroup(aws_asg::AsgConfig),
}

/// Why a driver could not act. The autoscaler logs it and decides again next interval.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("could not start `{program}`")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not read {what} from {path}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No answer: the API could not be reached, or the call timed out.
    #[error("the {api} API could not be reached")]
    Unreachable {
        api: &'static str,
        #[source]
        source: BoxError,
    },
    /// The API answered with an error.
    #[error("the {api} API refused: HTTP {status} {code}: {message}")]
    Refused {
        api: &'static str,
        status: u16,
        code: String,
        message: String,
    },
    /// The API answered something its documentation does not describe.
    #[error("unexpected answer from the {api} API: {what}")]
    Unexpected { api: &'static str, what: Unexpected },
    #[error(
        "no AWS region for the autoscaling group: set AWS_REGION, a region in the AWS profile, or --aws-region"
    )]
    NoRegion,
    #[error(
        "no AWS credentials for the autoscaling group (looked in the environment, the shared \
         config and credentials files, web identity, the ECS container endpoint and the EC2 \
         instance metadata)"
    )]
    NoCredentials(#[source] BoxError),
    #[error("no autoscaling group named `{0}`")]
    NoGroup(String),
    #[error("the {api} request could not be built")]
    Request {
        api: &'static str,
        #[source]
        source: BoxError,
    },
    #[error("the HTTP client for the {api} API cannot be set up")]
    HttpClient {
        api: &'static str,
        #[source]
        source: BoxError,
    },
    #[error("this build has no {driver} driver: enable the `{feature}` feature")]
    NotBuilt {
        driver: &'static str,
        feature: &'static str,
    },
}

/// The cause of a failure from a library outside Floe.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What an API answered that its documentation does not describe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unexpected {
    #[error("HTTP {status} without a JSON body")]
    NoBody { status: u16 },
    #[error("a Scale without spec.replicas")]
    NoReplicas,
    #[error("the group `{group}` has no desired capacity")]
    NoDesiredCapacity { group: String },
    #[error("the group `{group}` has a desired capacity of {desired}")]
    DesiredCapacityOutOfRange { group: String, desired: i32 },
}

/// Starts and stops read replicas. Outputs of the autoscaler's [`crate::autoscale::Decision`]
/// are its inputs: the loop calls [`ReadReplicaDriver::starting`] before each decision, then
/// [`ReadReplicaDriver::stop`] for the replicas to stop (already draining) and
/// [`ReadReplicaDriver::start`] for the count to add. Every call may fail; the next interval
/// decides again from what the store then shows, so a driver need not retry.
pub trait ReadReplicaDriver: Send + 'static {
    /// How many replicas this driver started that have not registered yet; `registered`
    /// lists the ids of the live and draining replicas in the store. Also the place to reap
    /// exited processes and give up on ones that never registered.
    fn starting(
        &mut self,
        registered: &[String],
    ) -> impl Future<Output = Result<u32, DriverError>> + Send;

    /// Starts `count` more replicas.
    fn start(&mut self, count: u32) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Stops these replicas (drained: clients send them no new readers).
    fn stop(
        &mut self,
        replica_ids: &[String],
    ) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// The controlplane stops: local processes end with it; cloud replicas stay.
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send;
}

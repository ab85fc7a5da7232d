//! `floe-controlplane`: runs one controlplane until SIGINT or SIGTERM, logging as text or JSON.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use floe_controlplane::driver::aws_asg::AsgConfig;
use floe_controlplane::driver::kubernetes::KubernetesConfig;
use floe_controlplane::{Config, Controlplane, Database, ReplicaDriverConfig};
use tracing_subscriber::EnvFilter;

/// Floe's controlplane: the REST API, metadata store, placement, leases and the read
/// replica autoscaler.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// HTTP address of the REST API.
    #[arg(
        long,
        env = "FLOE_CONTROLPLANE_LISTEN",
        default_value = "127.0.0.1:7300"
    )]
    listen: SocketAddr,
    /// PostgreSQL URL (`postgres://…`); when absent, SQLite in the data directory.
    #[arg(long, env = "FLOE_DATABASE_URL")]
    database_url: Option<String>,
    /// Where the SQLite database lives (`<data-dir>/controlplane.db`).
    #[arg(long, env = "FLOE_DATA_DIR", required_unless_present = "database_url")]
    data_dir: Option<PathBuf>,
    /// Bearer token every mutating call must carry.
    #[arg(long, env = "FLOE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A broker is declared dead this long after its last heartbeat.
    #[arg(long, env = "FLOE_LEASE_MS", default_value_t = 10_000)]
    lease_ms: u64,
    /// How often brokers heartbeat (default: a third of the lease).
    #[arg(long, env = "FLOE_HEARTBEAT_INTERVAL_MS")]
    heartbeat_interval_ms: Option<u64>,
    /// How often the leader checks leases and placement.
    #[arg(long, env = "FLOE_RECONCILE_INTERVAL_MS", default_value_t = 1_000)]
    reconcile_interval_ms: u64,
    /// How often a standby tries to lead (PostgreSQL).
    #[arg(long, env = "FLOE_ELECTION_INTERVAL_MS", default_value_t = 2_000)]
    election_interval_ms: u64,
    /// How long a partition's leader election may run before it starts again.
    #[arg(
        long,
        env = "FLOE_PARTITION_ELECTION_TIMEOUT_MS",
        default_value_t = 3_000
    )]
    partition_election_timeout_ms: u64,
    /// The longest an assignments long-poll waits.
    #[arg(long, env = "FLOE_LONG_POLL_MAX_MS", default_value_t = 30_000)]
    long_poll_max_ms: u64,
    /// Replace a replicated partition's member on a broker dead this long.
    #[arg(long, env = "FLOE_REPLACE_DEAD_AFTER_MS", default_value_t = 300_000)]
    replace_dead_after_ms: u64,
    /// Replicas per partition when a create request names none.
    #[arg(long, env = "FLOE_DEFAULT_REPLICATION_FACTOR", default_value_t = 3)]
    default_replication_factor: u32,
    /// Scale read replicas as local processes: `PROGRAM ARGS... --replica-id ID`.
    #[arg(long, env = "FLOE_READ_REPLICA_PROGRAM", value_name = "PATH")]
    read_replica_program: Option<PathBuf>,
    /// An argument for --read-replica-program (repeat for several).
    #[arg(
        long = "read-replica-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    read_replica_args: Vec<String>,
    /// Scale read replicas as a Kubernetes Deployment, with the pod's service account.
    #[arg(
        long,
        env = "FLOE_KUBERNETES_DEPLOYMENT",
        value_name = "NAMESPACE/NAME"
    )]
    kubernetes_deployment: Option<String>,
    /// Scale read replicas as an AWS autoscaling group. Credentials and region come from the
    /// AWS SDK's standard chain: AWS_* variables, the shared config and credentials files
    /// (AWS_PROFILE), web identity, the ECS container endpoint, the EC2 instance role.
    #[arg(long, env = "FLOE_AWS_AUTOSCALING_GROUP", value_name = "NAME")]
    aws_autoscaling_group: Option<String>,
    /// The autoscaling group's region [default: the SDK's chain, e.g. AWS_REGION]
    #[arg(long, value_name = "REGION")]
    aws_region: Option<String>,
    /// The Auto Scaling API's URL, e.g. a local test server [default: AWS's endpoint]
    #[arg(long, env = "FLOE_AWS_ENDPOINT_URL", value_name = "URL")]
    aws_endpoint_url: Option<String>,
    /// How often the autoscaler decides.
    #[arg(long, env = "FLOE_AUTOSCALE_INTERVAL_MS", default_value_t = 2_000)]
    autoscale_interval_ms: u64,
    /// A draining read replica is stopped after this long even with consumers left.
    #[arg(
        long,
        env = "FLOE_READ_REPLICA_DRAIN_TIMEOUT_MS",
        default_value_t = 300_000
    )]
    read_replica_drain_timeout_ms: u64,
    /// Log lines as text for people, or JSON objects (one per line) for a log shipper.
    /// Levels come from FLOE_LOG, else RUST_LOG, else `info`.
    #[arg(long, env = "FLOE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The log filter: FLOE_LOG wins over RUST_LOG; `info` when neither is set or valid.
fn log_filter(floe_log: Option<&str>, rust_log: Option<&str>) -> EnvFilter {
    [floe_log, rust_log]
        .into_iter()
        .flatten()
        .find_map(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new("info"))
}

fn init_logging(format: LogFormat) {
    let floe_log = std::env::var("FLOE_LOG").ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(floe_log.as_deref(), rust_log.as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // JSON lines carry no colour codes; current span fields ride along with each event.
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

impl Args {
    /// The read replica driver the flags name (at most one).
    fn driver(&self) -> anyhow::Result<ReplicaDriverConfig> {
        let named = [
            self.read_replica_program.is_some(),
            self.kubernetes_deployment.is_some(),
            self.aws_autoscaling_group.is_some(),
        ];
        if named.iter().filter(|named| **named).count() > 1 {
            anyhow::bail!(
                "name at most one of --read-replica-program, --kubernetes-deployment and \
                 --aws-autoscaling-group"
            );
        }
        if let Some(program) = &self.read_replica_program {
            return Ok(ReplicaDriverConfig::Local {
                program: program.clone(),
                args: self.read_replica_args.clone(),
                env: Vec::new(),
            });
        }
        if let Some(deployment) = &self.kubernetes_deployment {
            let (namespace, name) = deployment
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .context("--kubernetes-deployment is NAMESPACE/NAME")?;
            return Ok(ReplicaDriverConfig::Kubernetes(
                KubernetesConfig::in_cluster(namespace, name),
            ));
        }
        if let Some(group) = &self.aws_autoscaling_group {
            return Ok(ReplicaDriverConfig::AwsAutoScalingGroup(AsgConfig {
                group_name: group.clone(),
                region: self.aws_region.clone(),
                endpoint: self.aws_endpoint_url.clone(),
            }));
        }
        Ok(ReplicaDriverConfig::None)
    }

    fn config(self) -> anyhow::Result<Config> {
        let driver = self.driver()?;
        let database = match (self.database_url, self.data_dir) {
            (Some(url), _) => Database::Postgres { url },
            (None, Some(dir)) => Database::Sqlite {
                path: dir.join("controlplane.db"),
            },
            // clap requires one of the two.
            (None, None) => Database::Sqlite {
                path: PathBuf::from("controlplane.db"),
            },
        };
        let mut config = Config::new(database);
        config.listen = self.listen;
        config.admin_token = self.admin_token;
        config.lease = Duration::from_millis(self.lease_ms);
        config.heartbeat_interval =
            Duration::from_millis(self.heartbeat_interval_ms.unwrap_or(self.lease_ms / 3));
        config.reconcile_interval = Duration::from_millis(self.reconcile_interval_ms);
        config.election_interval = Duration::from_millis(self.election_interval_ms);
        config.long_poll_max = Duration::from_millis(self.long_poll_max_ms);
        config.partition_election_timeout =
            Duration::from_millis(self.partition_election_timeout_ms);
        config.default_replication_factor = self.default_replication_factor;
        config.replace_dead_after = Duration::from_millis(self.replace_dead_after_ms);
        config.read_replicas = driver;
        config.autoscale_interval = Duration::from_millis(self.autoscale_interval_ms.max(10));
        config.read_replica_drain_timeout =
            Duration::from_millis(self.read_replica_drain_timeout_ms);
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    let config = args.config()?;
    let running = Controlplane::start(config)
        .await
        .context("starting the controlplane")?;
    // Scripts and tests read the bound address from this line.
    writeln!(
        std::io::stdout().lock(),
        "floe-controlplane listening on http://{}",
        running.local_addr()
    )?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floe_log_wins_over_rust_log_and_info_is_the_default() {
        assert_eq!(log_filter(Some("debug"), Some("warn")).to_string(), "debug");
        assert_eq!(log_filter(None, Some("warn")).to_string(), "warn");
        assert_eq!(log_filter(None, None).to_string(), "info");
        // An unreadable FLOE_LOG falls back to RUST_LOG rather than to nothing.
        assert_eq!(
            log_filter(Some("=!bad[["), Some("trace")).to_string(),
            "trace"
        );
    }

    #[test]
    fn the_log_format_and_aws_flags_parse() {
        let args = Args::try_parse_from([
            "floe-controlplane",
            "--data-dir",
            "/tmp/x",
            "--log-format",
            "json",
            "--aws-autoscaling-group",
            "floe-read-replicas",
            "--aws-endpoint-url",
            "http://127.0.0.1:5000",
        ])
        .expect("valid flags");
        assert_eq!(args.log_format, LogFormat::Json);
        let driver = args.driver().expect("one driver");
        assert_eq!(
            driver,
            ReplicaDriverConfig::AwsAutoScalingGroup(AsgConfig {
                group_name: "floe-read-replicas".to_owned(),
                region: None,
                endpoint: Some("http://127.0.0.1:5000".to_owned()),
            })
        );
    }
}

//! `floe-controlplane`: runs one controlplane until SIGINT or SIGTERM, logging as text or JSON.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use floe_controlplane::auth::read_secret;
use floe_controlplane::driver::aws_asg::AsgConfig;
use floe_controlplane::driver::kubernetes::KubernetesConfig;
use floe_controlplane::logging::LogFormat;
use floe_controlplane::{
    BootstrapTokens, Config, Controlplane, Database, ReadReplicaDriverConfig, TlsFiles,
};

/// Floe's controlplane: the REST API, metadata store, placement, leases and the read
/// replica autoscaler.
#[derive(Debug, Parser)]
#[command(version = floe_controlplane::BuildLabels::version_line())]
struct Args {
    /// A TOML file of settings: each key is one of these flags (`data-dir =
    /// "/var/lib/floe"`); flags and their environment variables win over it.
    #[arg(long = "config", env = "FLOE_CONFIG")]
    config_file: Option<PathBuf>,
    /// Check the settings (command line, environment, --config file, and the token files
    /// they name) and exit without starting: no port, database or certificate is opened.
    #[arg(long)]
    check_config: bool,
    /// HTTP address of the REST API.
    #[arg(
        long,
        env = "FLOE_CONTROLPLANE_LISTEN",
        default_value = "127.0.0.1:7300"
    )]
    listen: SocketAddr,
    /// PEM certificate chain (leaf first) the REST API presents; read again when it changes.
    #[arg(long, env = "FLOE_TLS_CERT", value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "FLOE_TLS_KEY", value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve the REST API over plain HTTP: tokens cross the network readable by anyone on
    /// the path. Refused unless given when there is no --tls-cert.
    #[arg(long, env = "FLOE_INSECURE_PLAIN_HTTP", conflicts_with = "tls_cert")]
    insecure_plain_http: bool,
    /// PostgreSQL URL (`postgres://…`); when absent, SQLite in the data directory.
    #[arg(long, env = "FLOE_DATABASE_URL")]
    database_url: Option<String>,
    /// Where the SQLite database lives (`<data-dir>/controlplane.db`).
    #[arg(long, env = "FLOE_DATA_DIR", required_unless_present = "database_url")]
    data_dir: Option<PathBuf>,
    /// A file holding the first administrator's token (a `cluster-admin` principal named
    /// `admin`), else FLOE_ADMIN_TOKEN in the environment. Secrets never come from the
    /// command line, where every user of the machine can read them.
    #[arg(long, env = "FLOE_ADMIN_TOKEN_FILE", value_name = "PATH")]
    admin_token_file: Option<PathBuf>,
    /// A file holding the token brokers register with (principal `brokers`), else
    /// FLOE_BROKER_TOKEN.
    #[arg(long, env = "FLOE_BROKER_TOKEN_FILE", value_name = "PATH")]
    broker_token_file: Option<PathBuf>,
    /// A file holding the token read replicas register with (principal `read-replicas`),
    /// else FLOE_READ_REPLICA_TOKEN.
    #[arg(long, env = "FLOE_READ_REPLICA_TOKEN_FILE", value_name = "PATH")]
    read_replica_token_file: Option<PathBuf>,
    /// Serve without authentication: anyone who reaches the API may do anything. Refused
    /// unless given; logged as a warning every minute.
    #[arg(long, env = "FLOE_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// A broker is declared dead this long after its last heartbeat [default: 10s].
    #[arg(long, env = "FLOE_LEASE", alias = "lease-ms", value_parser = parse_duration)]
    lease: Option<Duration>,
    /// How often brokers heartbeat [default: a third of the lease].
    #[arg(
        long,
        env = "FLOE_HEARTBEAT_INTERVAL",
        alias = "heartbeat-interval-ms",
        value_parser = parse_duration
    )]
    heartbeat_interval: Option<Duration>,
    /// How often the leader checks leases and placement [default: 1s].
    #[arg(
        long,
        env = "FLOE_RECONCILE_INTERVAL",
        alias = "reconcile-interval-ms",
        value_parser = parse_duration
    )]
    reconcile_interval: Option<Duration>,
    /// How often a standby tries to lead (PostgreSQL) [default: 2s].
    #[arg(
        long,
        env = "FLOE_ELECTION_INTERVAL",
        alias = "election-interval-ms",
        value_parser = parse_duration
    )]
    election_interval: Option<Duration>,
    /// How long a partition's leader election may run before it starts again [default: 3s].
    #[arg(
        long,
        env = "FLOE_PARTITION_ELECTION_TIMEOUT",
        alias = "partition-election-timeout-ms",
        value_parser = parse_duration
    )]
    partition_election_timeout: Option<Duration>,
    /// The longest an assignments long-poll waits [default: 30s].
    #[arg(
        long,
        env = "FLOE_LONG_POLL_MAX",
        alias = "long-poll-max-ms",
        value_parser = parse_duration
    )]
    long_poll_max: Option<Duration>,
    /// Replace a replicated partition's member on a broker dead this long [default: 5m].
    #[arg(
        long,
        env = "FLOE_REPLACE_DEAD_AFTER",
        alias = "replace-dead-after-ms",
        value_parser = parse_duration
    )]
    replace_dead_after: Option<Duration>,
    /// Replicas per partition when a create request names none.
    #[arg(long, env = "FLOE_DEFAULT_REPLICATION_FACTOR", default_value_t = 3)]
    default_replication_factor: u32,
    /// The most partition replicas one broker may hold: a create that would place more on
    /// any broker is refused (429 `limit_exceeded`).
    #[arg(long, env = "FLOE_MAX_PARTITIONS_PER_BROKER", default_value_t = 4000)]
    max_partitions_per_broker: u32,
    /// The most streams one principal may have created (and not deleted).
    #[arg(long, env = "FLOE_MAX_STREAMS_PER_PRINCIPAL", default_value_t = 1000)]
    max_streams_per_principal: u32,
    /// The most live members one consumer group may have: the next join is refused (429
    /// `limit_exceeded`).
    #[arg(long, env = "FLOE_MAX_GROUP_MEMBERS", default_value_t = 1000)]
    max_group_members: u32,
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
    /// How often the autoscaler decides (at least 10ms) [default: 2s].
    #[arg(
        long,
        env = "FLOE_AUTOSCALE_INTERVAL",
        alias = "autoscale-interval-ms",
        value_parser = parse_duration
    )]
    autoscale_interval: Option<Duration>,
    /// A draining read replica is stopped after this long even with consumers left
    /// [default: 5m].
    #[arg(
        long,
        env = "FLOE_READ_REPLICA_DRAIN_TIMEOUT",
        alias = "read-replica-drain-timeout-ms",
        value_parser = parse_duration
    )]
    read_replica_drain_timeout: Option<Duration>,
    /// PEM certificate of the cluster's peer CA, the one brokers trust on their peer ports
    /// (their `--peer-ca`). With --peer-ca-key-file, brokers registered here get short-lived
    /// certificates naming them.
    #[arg(long, env = "FLOE_PEER_CA", requires = "peer_ca_key_file")]
    peer_ca: Option<PathBuf>,
    /// PEM private key of the peer CA (a file, or a mounted secret; never on the command
    /// line).
    #[arg(long, env = "FLOE_PEER_CA_KEY_FILE", requires = "peer_ca")]
    peer_ca_key_file: Option<PathBuf>,
    /// How long an issued peer certificate is valid; brokers renew theirs after two thirds
    /// of it [default: 24h].
    #[arg(long, env = "FLOE_PEER_CERTIFICATE_LIFETIME", value_parser = parse_duration)]
    peer_certificate_lifetime: Option<Duration>,
    /// Log lines as text for people, or JSON objects (one per line) for a log shipper.
    /// Levels come from FLOE_LOG, else RUST_LOG, else `info`.
    #[arg(long, env = "FLOE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

impl Args {
    /// The bootstrap tokens, or `None` with `--insecure-no-auth`; an error when neither.
    fn auth(
        &self,
        variable: &impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<BootstrapTokens>> {
        let secret =
            |file: &Option<PathBuf>, name: &str| read_secret(file.as_deref(), variable(name), name);
        let admin = secret(&self.admin_token_file, "FLOE_ADMIN_TOKEN")?;
        let broker = secret(&self.broker_token_file, "FLOE_BROKER_TOKEN")?;
        let read_replica = secret(&self.read_replica_token_file, "FLOE_READ_REPLICA_TOKEN")?;
        match (admin, self.insecure_no_auth) {
            (Some(_), true) => {
                anyhow::bail!("--insecure-no-auth and an admin token both given: choose one")
            }
            (Some(admin), false) => Ok(Some(BootstrapTokens {
                admin,
                broker,
                read_replica,
            })),
            (None, true) => Ok(None),
            (None, false) => anyhow::bail!(
                "no authentication configured: give the first administrator's token with \
                 --admin-token-file (or FLOE_ADMIN_TOKEN), or run with --insecure-no-auth to \
                 let anyone who reaches the API do anything"
            ),
        }
    }

    /// The API's certificate, or `None` with `--insecure-plain-http`; an error when neither.
    fn tls(&self) -> anyhow::Result<Option<TlsFiles>> {
        match (&self.tls_cert, &self.tls_key, self.insecure_plain_http) {
            (Some(cert), Some(key), false) => Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            })),
            (None, None, true) => Ok(None),
            _ => anyhow::bail!(
                "no certificate for the REST API: give --tls-cert and --tls-key (or \
                 FLOE_TLS_CERT and FLOE_TLS_KEY), or run with --insecure-plain-http to send \
                 tokens and data in the clear"
            ),
        }
    }

    /// The read replica driver the flags name (at most one).
    fn driver(&self) -> anyhow::Result<ReadReplicaDriverConfig> {
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
            return Ok(ReadReplicaDriverConfig::Local {
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
            return Ok(ReadReplicaDriverConfig::Kubernetes(
                KubernetesConfig::in_cluster(namespace, name),
            ));
        }
        if let Some(group) = &self.aws_autoscaling_group {
            return Ok(ReadReplicaDriverConfig::AwsAutoScalingGroup(AsgConfig {
                group_name: group.clone(),
                region: self.aws_region.clone(),
                endpoint: self.aws_endpoint_url.clone(),
            }));
        }
        Ok(ReadReplicaDriverConfig::None)
    }

    /// The peer CA the flags name, read from its files (`None` when they name none).
    fn peer_ca(&self) -> anyhow::Result<Option<floe_controlplane::peer_ca::PeerCa>> {
        let (Some(certificate), Some(key)) = (&self.peer_ca, &self.peer_ca_key_file) else {
            return Ok(None);
        };
        let ca = floe_controlplane::peer_ca::PeerCa::load(certificate, key).with_context(|| {
            format!(
                "the peer CA {} and its key {}",
                certificate.display(),
                key.display()
            )
        })?;
        Ok(Some(ca))
    }

    /// The settings: [`Config::new`]'s defaults where neither a flag nor its variable is
    /// given; the token files are read, no other file (see [`Args::peer_ca`]). `variable` reads the environment, for the variables of the old `--*-ms`
    /// spellings (`FLOE_LEASE_MS`, …), which count when the new one is absent.
    fn config(self, variable: impl Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
        let mut driver = self.driver()?;
        let auth = self.auth(&variable)?;
        let tls = self.tls()?;
        // The read replicas the local driver starts find their token in their environment.
        if let (ReadReplicaDriverConfig::Local { env, .. }, Some(tokens)) = (&mut driver, &auth)
            && let Some(token) = &tokens.read_replica
        {
            env.push(("FLOE_READ_REPLICA_TOKEN".to_owned(), token.clone()));
        }
        let duration = |given: Option<Duration>, old_variable: &str| match given {
            Some(duration) => Ok(Some(duration)),
            None => variable(old_variable)
                .map(|text| parse_duration(&text))
                .transpose()
                .map_err(|e| anyhow::anyhow!("{old_variable}: {e}")),
        };
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
        config.tls = tls;
        config.auth = auth;
        config.lease = duration(self.lease, "FLOE_LEASE_MS")?.unwrap_or(config.lease);
        config.heartbeat_interval =
            duration(self.heartbeat_interval, "FLOE_HEARTBEAT_INTERVAL_MS")?
                .unwrap_or(config.lease / 3);
        config.reconcile_interval =
            duration(self.reconcile_interval, "FLOE_RECONCILE_INTERVAL_MS")?
                .unwrap_or(config.reconcile_interval);
        config.election_interval = duration(self.election_interval, "FLOE_ELECTION_INTERVAL_MS")?
            .unwrap_or(config.election_interval);
        config.long_poll_max =
            duration(self.long_poll_max, "FLOE_LONG_POLL_MAX_MS")?.unwrap_or(config.long_poll_max);
        config.partition_election_timeout = duration(
            self.partition_election_timeout,
            "FLOE_PARTITION_ELECTION_TIMEOUT_MS",
        )?
        .unwrap_or(config.partition_election_timeout);
        config.default_replication_factor = self.default_replication_factor;
        config.max_partitions_per_broker = self.max_partitions_per_broker;
        config.max_streams_per_principal = self.max_streams_per_principal;
        config.max_group_members = self.max_group_members;
        config.replace_dead_after =
            duration(self.replace_dead_after, "FLOE_REPLACE_DEAD_AFTER_MS")?
                .unwrap_or(config.replace_dead_after);
        config.read_replicas = driver;
        config.autoscale_interval =
            duration(self.autoscale_interval, "FLOE_AUTOSCALE_INTERVAL_MS")?
                .unwrap_or(config.autoscale_interval)
                .max(Duration::from_millis(10));
        config.read_replica_drain_timeout = duration(
            self.read_replica_drain_timeout,
            "FLOE_READ_REPLICA_DRAIN_TIMEOUT_MS",
        )?
        .unwrap_or(config.read_replica_drain_timeout);
        config.peer_certificate_lifetime = self
            .peer_certificate_lifetime
            .unwrap_or(config.peer_certificate_lifetime)
            .max(Duration::from_secs(60));
        Ok(config)
    }
}

/// A duration such as `10s`, `500ms` or `5m`; a bare number is milliseconds, the unit of the
/// old `--*-ms` spellings, so that their values keep their meaning.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(millis) = text.parse::<u64>() {
        return Ok(Duration::from_millis(millis));
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("`{text}` is not a duration (try 10s or 500ms; a bare number is milliseconds): {e}")
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = floe_controlplane::config_file::parse();
    floe_controlplane::logging::init(args.log_format);
    if let Some(path) = &args.config_file {
        tracing::info!(path = %path.display(), "settings from the configuration file, under flags and environment");
    }
    let check_only = args.check_config;
    let config_file = args.config_file.clone();
    // Read only when starting: --check-config opens no certificate.
    let peer_ca = (!check_only).then(|| args.peer_ca()).transpose()?.flatten();
    let mut config = args.config(|name| std::env::var(name).ok())?;
    config.peer_ca = peer_ca.map(std::sync::Arc::new);
    if check_only {
        let from = config_file.map_or_else(String::new, |path| format!(" with {}", path.display()));
        writeln!(
            std::io::stdout().lock(),
            "floe-controlplane: the settings{from} are valid"
        )?;
        return Ok(());
    }
    if config.auth.is_none() {
        tokio::spawn(floe_controlplane::auth::warn_insecure(
            "the controlplane's REST API",
        ));
    }
    if config.tls.is_none() {
        tokio::spawn(floe_controlplane::tls::warn_plain_http());
    }
    let running = Controlplane::start(config)
        .await
        .context("starting the controlplane")?;
    // Scripts and tests read the bound address from this line.
    writeln!(
        std::io::stdout().lock(),
        "floe-controlplane listening on {}",
        running.url()
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

    /// Parses `flags` after a data directory, with an admin token in the environment and no
    /// other variable.
    fn config(flags: &[&str]) -> Result<Config, String> {
        config_with(flags, &[("FLOE_ADMIN_TOKEN", "t0ken")])
    }

    #[test]
    fn authentication_is_required_unless_refused_out_loud() {
        let error = config_with(&[], &[]).expect_err("no authentication");
        assert!(error.contains("--insecure-no-auth"), "{error}");
        assert!(
            config_with(&["--insecure-no-auth"], &[])
                .expect("as set up")
                .auth
                .is_none()
        );
        let both = config(&["--insecure-no-auth"]).expect_err("both");
        assert!(both.contains("choose one"), "{both}");
        let dir = tempfile::tempdir().expect("as set up");
        let file = dir.path().join("broker-token");
        std::fs::write(&file, "b-token\n").expect("as set up");
        let broker_flag = format!("--broker-token-file={}", file.display());
        let auth = config(&[&broker_flag])
            .expect("as set up")
            .auth
            .expect("tokens");
        assert_eq!(auth.admin, "t0ken");
        assert_eq!(auth.broker.as_deref(), Some("b-token"));
        assert_eq!(auth.read_replica, None);
        std::fs::write(&file, " \n").expect("as set up");
        let empty = config(&[&broker_flag]).expect_err("empty file");
        assert!(empty.contains("is empty"), "{empty}");
        // The local driver's read replicas get their token in their environment.
        let local = config_with(
            &["--read-replica-program", "/bin/true"],
            &[
                ("FLOE_ADMIN_TOKEN", "a"),
                ("FLOE_READ_REPLICA_TOKEN", "r-token"),
            ],
        )
        .expect("valid");
        let ReadReplicaDriverConfig::Local { env, .. } = local.read_replicas else {
            panic!("the local driver");
        };
        assert_eq!(
            env,
            [("FLOE_READ_REPLICA_TOKEN".to_owned(), "r-token".to_owned())]
        );
        // Secrets are never flags.
        assert!(config(&["--admin-token", "x"]).is_err());
        assert!(!format!("{auth:?}").contains("t0ken"));
    }

    fn config_with(flags: &[&str], variables: &[(&str, &str)]) -> Result<Config, String> {
        let argv = [
            "floe-controlplane",
            "--data-dir",
            "/nonexistent",
            "--insecure-plain-http",
        ]
        .iter()
        .chain(flags);
        let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
        args.config(|name| {
            variables
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| value.to_string())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn plain_http_is_refused_unless_asked_for_out_loud() {
        let parse = |flags: &[&str]| {
            let argv = ["floe-controlplane", "--data-dir", "/nonexistent"]
                .iter()
                .chain(flags);
            Args::try_parse_from(argv)
                .map_err(|e| e.to_string())?
                .config(|name| (name == "FLOE_ADMIN_TOKEN").then(|| "t0ken".to_owned()))
                .map_err(|e| e.to_string())
        };
        let error = parse(&[]).expect_err("neither a certificate nor plain HTTP");
        assert!(error.contains("--tls-cert"), "{error}");
        assert!(error.contains("--insecure-plain-http"), "{error}");
        assert!(
            parse(&["--insecure-plain-http"])
                .expect("plain")
                .tls
                .is_none()
        );
        let tls = parse(&["--tls-cert", "/c.pem", "--tls-key", "/k.pem"])
            .expect("a certificate")
            .tls
            .expect("TLS");
        assert_eq!(tls.cert, PathBuf::from("/c.pem"));
        assert_eq!(tls.key, PathBuf::from("/k.pem"));
        let half = parse(&["--tls-cert", "/c.pem"]).expect_err("a certificate without its key");
        assert!(half.contains("--tls-key"), "{half}");
        let both = parse(&[
            "--tls-cert",
            "/c",
            "--tls-key",
            "/k",
            "--insecure-plain-http",
        ])
        .expect_err("contradictory");
        assert!(both.contains("cannot be used with"), "{both}");
    }

    #[test]
    fn durations_take_units() {
        let config = config(&[
            "--lease",
            "4s",
            "--reconcile-interval",
            "250ms",
            "--replace-dead-after",
            "5m",
            "--read-replica-drain-timeout",
            "1h 30m",
        ])
        .expect("valid durations");
        assert_eq!(config.lease, Duration::from_secs(4));
        assert_eq!(config.reconcile_interval, Duration::from_millis(250));
        assert_eq!(config.replace_dead_after, Duration::from_secs(300));
        assert_eq!(config.read_replica_drain_timeout, Duration::from_secs(5400));
    }

    #[test]
    fn old_ms_spellings_still_take_milliseconds() {
        let config = config(&[
            "--lease-ms",
            "2500",
            "--election-interval-ms",
            "100",
            "--long-poll-max-ms=100",
            "--partition-election-timeout-ms",
            "750",
        ])
        .expect("the old spellings");
        assert_eq!(config.lease, Duration::from_millis(2500));
        assert_eq!(config.election_interval, Duration::from_millis(100));
        assert_eq!(config.long_poll_max, Duration::from_millis(100));
        assert_eq!(
            config.partition_election_timeout,
            Duration::from_millis(750)
        );
    }

    #[test]
    fn old_ms_variables_count_when_the_new_ones_are_absent() {
        let variables = [
            ("FLOE_LEASE_MS", "3000"),
            ("FLOE_AUTOSCALE_INTERVAL_MS", "500"),
            ("FLOE_ADMIN_TOKEN", "t0ken"),
        ];
        let config =
            config_with(&["--autoscale-interval", "1s"], &variables).expect("valid variables");
        assert_eq!(config.lease, Duration::from_secs(3));
        assert_eq!(config.heartbeat_interval, Duration::from_secs(1));
        // The flag wins over the old variable.
        assert_eq!(config.autoscale_interval, Duration::from_secs(1));

        let error = config_with(
            &[],
            &[
                ("FLOE_REPLACE_DEAD_AFTER_MS", "soon"),
                ("FLOE_ADMIN_TOKEN", "t"),
            ],
        )
        .expect_err("not a duration");
        assert!(
            error.contains("FLOE_REPLACE_DEAD_AFTER_MS")
                && error.contains("`soon` is not a duration"),
            "{error}"
        );
    }

    #[test]
    fn no_flags_give_the_library_defaults() {
        let config = config(&[]).expect("no flags");
        assert_eq!(config.lease, Duration::from_secs(10));
        assert_eq!(config.heartbeat_interval, Duration::from_secs(10) / 3);
        assert_eq!(config.reconcile_interval, Duration::from_secs(1));
        assert_eq!(config.election_interval, Duration::from_secs(2));
        assert_eq!(config.partition_election_timeout, Duration::from_secs(3));
        assert_eq!(config.long_poll_max, Duration::from_secs(30));
        assert_eq!(config.replace_dead_after, Duration::from_secs(300));
        assert_eq!(config.autoscale_interval, Duration::from_secs(2));
        assert_eq!(config.read_replica_drain_timeout, Duration::from_secs(300));
    }

    #[test]
    fn a_bad_duration_is_refused_with_the_flag_and_an_example() {
        let error = config(&["--lease", "ten seconds"]).expect_err("not a duration");
        assert!(error.contains("--lease"), "{error}");
        assert!(
            error.contains("`ten seconds` is not a duration (try 10s or 500ms"),
            "{error}"
        );
        let error = config(&["--heartbeat-interval-ms=-5"]).expect_err("negative");
        assert!(error.contains("`-5` is not a duration"), "{error}");
    }

    #[test]
    fn a_tiny_autoscale_interval_is_raised_to_ten_milliseconds() {
        let config = config(&["--autoscale-interval", "1ms"]).expect("valid");
        assert_eq!(config.autoscale_interval, Duration::from_millis(10));
    }

    #[test]
    fn the_documented_configuration_file_parses() {
        let doc = include_str!("../../docs/operations.md");
        let marker = "The controlplane (`floe-controlplane --config";
        let after = &doc[doc.find(marker).expect("the example is documented")..];
        let start = after.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let text = &after[start..start + after[start..].find("```").expect("closed")];
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), text).expect("write");
        let args = vec![
            "floe-controlplane".into(),
            "--config".into(),
            file.path().into(),
        ];
        let args: Args = floe_controlplane::config_file::try_parse_from(args, |_| None)
            .expect("the documented configuration parses");
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.lease, Some(Duration::from_secs(10)));
        assert_eq!(args.max_partitions_per_broker, 4000);
        assert_eq!(args.max_streams_per_principal, 1000);
        assert!(matches!(
            args.driver().expect("one driver"),
            ReadReplicaDriverConfig::AwsAutoScalingGroup(_)
        ));
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
            ReadReplicaDriverConfig::AwsAutoScalingGroup(AsgConfig {
                group_name: "floe-read-replicas".to_owned(),
                region: None,
                endpoint: Some("http://127.0.0.1:5000".to_owned()),
            })
        );
    }
}

//! The `floe-broker` binary: `dev` (everything in one process, zero configuration),
//! `serve` (a broker with operator-provided certificates) and `certs` (a development CA and
//! certificate for a cluster on one machine).

use std::net::SocketAddr;
use std::path::PathBuf;

use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use floe_broker::run::{self, DiskHighWater, Settings};
use floe_broker::run::{ClientAuth, ClientLimits, ControlplaneSettings};
use floe_broker::tls::CertificatePaths;
use floe_broker::{dev, read_replica, tls};
use floe_controlplane::auth::read_secret;
use floe_controlplane::logging::LogFormat;
use floe_wire::auth::Secret;

#[derive(Parser, Debug)]
#[command(
    name = "floe-broker",
    version = floe_controlplane::BuildLabels::version_line(),
    about = "Floe broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text for people, or JSON objects (one per line) for a log shipper.
    /// Levels come from FLOE_LOG, else RUST_LOG, else `info`.
    #[arg(long, global = true, env = "FLOE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run Floe's embedded default: one process, local data directory, local CA; writes the
    /// client profile so `floe` works with no flags.
    Dev(DevArgs),
    /// Run a broker with operator-provided certificates.
    Serve(ServeArgs),
    /// Run a read replica: serves history from object storage through its cache, and the
    /// live tail by following the partitions' leaders; no durable state.
    #[command(name = "read-replica", alias = "replica")]
    ReadReplica(ReadReplicaArgs),
    /// Write a CA (`ca.pem`, and its key `ca.key`) and a broker certificate for localhost
    /// (`broker.pem`, `broker.key`) into a directory, for a cluster on one machine; existing
    /// files are kept. With --broker-id, also the peer certificate naming that broker
    /// (`broker-<id>.pem`, `broker-<id>.key`), for `serve --peer-cert`.
    Certs {
        /// The directory to write into.
        #[arg(long)]
        dir: PathBuf,
        /// Also write the peer certificate naming this broker (repeat for several).
        #[arg(long = "broker-id", value_name = "ID")]
        broker_ids: Vec<u32>,
    },
}

#[derive(Args, Debug)]
struct DevArgs {
    /// Data directory [default: $FLOE_HOME/dev or ~/.local/share/floe/dev]
    #[arg(long, env = "FLOE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// QUIC (UDP) address to listen on.
    #[arg(long, env = "FLOE_LISTEN", default_value = "127.0.0.1:7100")]
    listen: SocketAddr,
    /// HTTP address of the /metrics endpoint.
    #[arg(long, env = "FLOE_METRICS_LISTEN", default_value = "127.0.0.1:7180")]
    metrics_listen: SocketAddr,
    /// HTTP address of the embedded controlplane's REST API.
    #[arg(
        long,
        env = "FLOE_CONTROLPLANE_LISTEN",
        default_value = "127.0.0.1:7300"
    )]
    controlplane_listen: SocketAddr,
    /// The client profile to write, a name or a path [default: $FLOE_PROFILE, else the
    /// profile named `dev` in ~/.config/floe/profiles, made current when none is]
    #[arg(long, value_name = "NAME|PATH")]
    profile: Option<std::ffi::OsString>,
    /// Read replicas the autoscaler keeps running at least (child processes of this one).
    #[arg(long, env = "FLOE_DEV_READ_REPLICAS", default_value_t = 1)]
    read_replicas: u32,
    /// Read replicas the autoscaler may run at most; 0 runs none and no autoscaler.
    #[arg(long, env = "FLOE_DEV_MAX_READ_REPLICAS", default_value_t = 4)]
    max_read_replicas: u32,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    clients: ClientLimitArgs,
}

/// Object storage, the tier cache and the disk, for `dev` and `serve` alike.
#[derive(Args, Debug)]
struct StorageArgs {
    #[command(flatten)]
    objects: ObjectStoreArgs,
    /// The shortest time between two upload runs of a partition: the segments sealed
    /// meanwhile share one manifest commit.
    #[arg(long, env = "FLOE_TIER_UPLOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    tier_upload_interval: Duration,
    /// How often tier retention runs and unreferenced objects are collected.
    #[arg(long, env = "FLOE_TIER_COLLECT_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    tier_collect_interval: Duration,
    /// How long an unreferenced object stays before it is collected.
    #[arg(long, env = "FLOE_TIER_COLLECT_GRACE", default_value = "10m", value_parser = parse_duration)]
    tier_collect_grace: Duration,
    /// Refuse publishes (retryably) past this: `90%` of the data directory's filesystem, or a
    /// size such as `200GiB` of partition logs.
    #[arg(long, env = "FLOE_DISK_HIGH_WATER", default_value = "90%")]
    disk_high_water: DiskHighWater,
    /// Bytes of each partition's newest synced log data kept in the page cache, e.g. 64MiB;
    /// older data is read from the disk. `all` leaves the page cache to the operating system.
    #[arg(long, env = "FLOE_LOG_PAGE_CACHE", default_value = "64MiB", value_parser = parse_page_cache)]
    log_page_cache: PageCache,
    /// Bytes per second this broker serves history at, all consumers together, e.g. 200MiB:
    /// fetches of sealed segments and of the tier wait their turn, so that consumers
    /// catching up leave the disk and the cores to publishers. Reads at the tail are never
    /// held back. [default: no cap]
    #[arg(long, env = "FLOE_HISTORY_READ_RATE", value_parser = parse_rate)]
    history_read_rate: Option<u64>,
}

/// `--history-read-rate`: a size per second (`200MiB` or `200MiB/s`), at least one byte.
fn parse_rate(text: &str) -> Result<u64, String> {
    let text = text.trim();
    match floe_wire::units::parse_size(text.strip_suffix("/s").unwrap_or(text))? {
        0 => Err("a history read rate must be above zero (leave it out for no cap)".into()),
        bytes => Ok(bytes),
    }
}

/// `--log-page-cache`: a size, or `all` (`None`).
#[derive(Debug, Clone, Copy)]
struct PageCache(Option<u64>);

fn parse_page_cache(text: &str) -> Result<PageCache, String> {
    match text.trim() {
        "all" => Ok(PageCache(None)),
        size => floe_wire::units::parse_size(size).map(|bytes| PageCache(Some(bytes))),
    }
}

/// What clients may hold of the client port, together and each: brokers and read replicas.
#[derive(Args, Debug)]
struct ClientLimitArgs {
    /// Client connections open at once; one more is closed at accept with the retryable
    /// `TooManyConnections`.
    #[arg(long, env = "FLOE_MAX_CONNECTIONS", default_value_t = ClientLimits::default().connections)]
    max_connections: u32,
    /// Client connections open at once from one IP address.
    #[arg(long, env = "FLOE_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = ClientLimits::default().connections_per_address)]
    max_connections_per_address: u32,
    /// Concurrent requests (QUIC streams) per connection.
    #[arg(long, env = "FLOE_STREAMS_PER_CONNECTION", default_value_t = 256)]
    streams_per_connection: u32,
    /// Memory for requests in flight, every connection together, e.g. 256MiB: a request
    /// that finds none free within --request-wait is answered `Throttled`.
    #[arg(long, env = "FLOE_REQUEST_MEMORY", default_value = "256MiB", value_parser = floe_wire::units::parse_size)]
    request_memory: u64,
    /// How long a request waits for --request-memory before it is answered `Throttled`.
    #[arg(long, env = "FLOE_REQUEST_WAIT", default_value = "5s", value_parser = parse_duration)]
    request_wait: Duration,
    /// How long a request's payload may take to arrive once memory is held for it.
    #[arg(long, env = "FLOE_REQUEST_PAYLOAD_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    request_payload_timeout: Duration,
    /// How long a new connection has to have its Hello accepted before it is closed.
    #[arg(long, env = "FLOE_HELLO_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    hello_timeout: Duration,
}

impl ClientLimitArgs {
    fn limits(&self) -> ClientLimits {
        ClientLimits {
            connections: self.max_connections,
            connections_per_address: self.max_connections_per_address,
            request_bytes: self.request_memory,
            request_wait: self.request_wait,
            payload_timeout: self.request_payload_timeout,
            hello_timeout: self.hello_timeout,
        }
    }

    fn apply(&self, settings: &mut Settings) {
        settings.client_limits = self.limits();
        settings.streams_per_connection = self.streams_per_connection;
    }
}

/// Where tiered segments are read from, and the cache in front: brokers and read replicas.
#[derive(Args, Debug)]
struct ObjectStoreArgs {
    /// Object storage for sealed segments: `s3://bucket[/prefix]` or `file:///dir`
    /// [default: the directory `objects` in the data directory]
    #[arg(long, env = "FLOE_OBJECT_STORE")]
    object_store: Option<String>,
    /// Endpoint of an S3-compatible server, e.g. http://127.0.0.1:9000 (path-style requests).
    /// Credentials and region otherwise come from the usual AWS_* variables.
    #[arg(long, env = "FLOE_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    #[arg(long, env = "FLOE_S3_REGION")]
    s3_region: Option<String>,
    /// Allow an http:// endpoint.
    #[arg(long, env = "FLOE_S3_ALLOW_HTTP")]
    s3_allow_http: bool,
    /// The access key this process signs object-storage requests with, overriding
    /// AWS_ACCESS_KEY_ID: a read replica is given a read-only key of its own. Needs the
    /// secret from --s3-secret-access-key-file or FLOE_S3_SECRET_ACCESS_KEY.
    #[arg(long, env = "FLOE_S3_ACCESS_KEY_ID")]
    s3_access_key_id: Option<String>,
    /// A file holding the secret of --s3-access-key-id, else FLOE_S3_SECRET_ACCESS_KEY.
    #[arg(long, env = "FLOE_S3_SECRET_ACCESS_KEY_FILE", value_name = "PATH")]
    s3_secret_access_key_file: Option<PathBuf>,
    /// Memory for cached tier chunks, e.g. 256MiB.
    #[arg(long, env = "FLOE_TIER_CACHE_MEMORY", default_value = "256MiB", value_parser = floe_wire::units::parse_size)]
    tier_cache_memory: u64,
    /// Local disk for cached tier chunks (0 for none), e.g. 1GiB [default: 1GiB for S3, none
    /// for a local directory, whose objects are already on a local disk]
    #[arg(long, env = "FLOE_TIER_CACHE_DISK", value_parser = floe_wire::units::parse_size)]
    tier_cache_disk: Option<u64>,
}

impl ObjectStoreArgs {
    /// Fills in the store's URL, settings and credentials and the cache sizes.
    fn apply(
        self,
        tier: &mut floe_broker::tiering::TierSettings,
        cache_disk_bytes: &mut Option<usize>,
    ) -> Result<()> {
        if let Some(url) = self.object_store {
            tier.url = url;
        }
        tier.s3.endpoint = self.s3_endpoint;
        tier.s3.region = self.s3_region;
        tier.s3.allow_http = self.s3_allow_http;
        let secret = read_secret(
            self.s3_secret_access_key_file.as_deref(),
            std::env::var("FLOE_S3_SECRET_ACCESS_KEY").ok(),
            "FLOE_S3_SECRET_ACCESS_KEY",
        )?;
        match (self.s3_access_key_id, secret) {
            (Some(id), Some(secret)) => {
                tier.s3.access_key_id = Some(id);
                tier.s3.secret_access_key = Some(secret);
            }
            (None, None) => {}
            (Some(_), None) => anyhow::bail!(
                "--s3-access-key-id needs its secret: --s3-secret-access-key-file or \
                 FLOE_S3_SECRET_ACCESS_KEY"
            ),
            (None, Some(_)) => anyhow::bail!(
                "an S3 secret (--s3-secret-access-key-file or FLOE_S3_SECRET_ACCESS_KEY) needs \
                 --s3-access-key-id"
            ),
        }
        tier.reader.memory_cache_bytes =
            usize::try_from(self.tier_cache_memory).unwrap_or(usize::MAX);
        *cache_disk_bytes = self
            .tier_cache_disk
            .map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX));
        Ok(())
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration (try 10m or 30s): {e}"))
}

impl StorageArgs {
    fn apply(self, settings: &mut Settings) -> Result<()> {
        settings.object_store = self.objects.object_store.clone();
        self.objects
            .apply(&mut settings.tier, &mut settings.tier_cache_disk_bytes)?;
        settings.tier.upload_min_interval = self.tier_upload_interval;
        settings.tier.upload_interval = self.tier_upload_interval.min(Duration::from_secs(1));
        settings.tier.collect_interval = self.tier_collect_interval;
        settings.tier.collect_grace = self.tier_collect_grace;
        settings.disk_high_water = self.disk_high_water;
        settings.log.page_cache_bytes = self.log_page_cache.0;
        settings.history_read_bytes_per_second = self.history_read_rate;
        arm_failpoints(settings);
        Ok(())
    }
}

/// Crash tests stop the process at chosen points, named by `FLOE_TEST_FAILPOINT`. Compiled
/// only into debug builds (what `cargo test` runs) and builds with the `failpoints`
/// feature: a release binary never reads the variable.
#[cfg(any(debug_assertions, feature = "failpoints"))]
fn arm_failpoints(settings: &mut Settings) {
    if std::env::var("FLOE_TEST_FAILPOINT").as_deref() == Ok("tier-before-commit") {
        settings.tier.uploader.before_commit =
            Some(floe_tier::BeforeCommit(std::sync::Arc::new(|| {
                tracing::error!("failpoint tier-before-commit: aborting");
                std::process::abort()
            })));
    }
}

/// A release build has no failpoints.
#[cfg(not(any(debug_assertions, feature = "failpoints")))]
fn arm_failpoints(_settings: &mut Settings) {}

#[derive(Args, Debug)]
struct ServeArgs {
    /// A TOML file of settings: each key is one of this command's flags (`data-dir =
    /// "/var/lib/floe"`); flags and their environment variables win over it.
    #[arg(long = "config", env = "FLOE_CONFIG")]
    config_file: Option<PathBuf>,
    /// Check the settings (command line, environment, --config file, and the token files
    /// they name) and exit without starting: no port, certificate or data directory is
    /// opened.
    #[arg(long)]
    check_config: bool,
    #[arg(long, env = "FLOE_DATA_DIR")]
    data_dir: PathBuf,
    #[arg(long, env = "FLOE_LISTEN", default_value = "0.0.0.0:7100")]
    listen: SocketAddr,
    #[arg(long, env = "FLOE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// PEM certificate chain.
    #[arg(long, env = "FLOE_TLS_CERT")]
    cert: PathBuf,
    /// PEM private key.
    #[arg(long, env = "FLOE_TLS_KEY")]
    key: PathBuf,
    /// A PEM CA whose certificates name principals: a client presenting one signs in as the
    /// user principal its subject's common name names (mutual TLS), instead of with a token.
    #[arg(long, env = "FLOE_CLIENT_CA", value_name = "PATH")]
    client_ca: Option<PathBuf>,
    /// host:port clients use to reach this broker [default: the listen address]
    #[arg(long, env = "FLOE_ADVERTISE")]
    advertise: Option<String>,
    /// Broker id without a controlplane (with one, the controlplane assigns it).
    #[arg(long, env = "FLOE_BROKER_ID", default_value_t = 0)]
    broker_id: u32,
    /// The controlplane's REST API, e.g. http://10.0.0.5:7300: the broker registers there
    /// and serves the partitions it is assigned. Without it, streams live in the local
    /// catalog and are created over the client protocol.
    #[arg(long, env = "FLOE_CONTROLPLANE")]
    controlplane: Option<String>,
    /// The PEM CA that signed the controlplane's certificate (an https --controlplane); by
    /// default the system's roots.
    #[arg(
        long,
        env = "FLOE_CONTROLPLANE_CA",
        value_name = "PATH",
        requires = "controlplane"
    )]
    controlplane_ca: Option<PathBuf>,
    /// A file holding the token this broker calls the controlplane with (a principal of
    /// kind `broker`, e.g. the controlplane's `--broker-token-file`), else FLOE_BROKER_TOKEN.
    #[arg(long, env = "FLOE_TOKEN_FILE", value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Without a controlplane: a file holding the one token clients must present (as a
    /// `cluster-admin`), else FLOE_ADMIN_TOKEN. With one, clients present the tokens of the
    /// principals it keeps.
    #[arg(long, env = "FLOE_ADMIN_TOKEN_FILE", value_name = "PATH")]
    admin_token_file: Option<PathBuf>,
    /// Serve clients without authentication: anyone who reaches the client port may read,
    /// write and delete every stream. Refused unless given; logged every minute.
    #[arg(long, env = "FLOE_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// Failure domain (e.g. an availability zone) reported to the controlplane.
    #[arg(long, env = "FLOE_ZONE")]
    zone: Option<String>,
    /// The peer port: replication traffic from other brokers (QUIC, mutual TLS with the
    /// certificate above). Needed to hold replicas of streams with a replication factor
    /// above 1. Port 0 picks a free one.
    #[arg(long, env = "FLOE_PEER_LISTEN", requires_all = ["controlplane", "peer_ca"])]
    peer_listen: Option<SocketAddr>,
    /// host:port other brokers use to reach the peer port [default: its listen address]
    #[arg(long, env = "FLOE_PEER_ADVERTISE")]
    peer_advertise: Option<String>,
    /// PEM certificate of the CA that signs every broker's certificate: peers must present
    /// one it signed.
    #[arg(long, env = "FLOE_PEER_CA")]
    peer_ca: Option<PathBuf>,
    /// PEM certificate naming this broker (`floe:broker:<id>`) for the peer port, e.g. from
    /// `floe-broker certs --broker-id`. A new broker registers under the id it names.
    /// [default: the controlplane issues one after registration, and renews it]
    #[arg(long, env = "FLOE_PEER_TLS_CERT", requires = "peer_key")]
    peer_cert: Option<PathBuf>,
    /// PEM private key of --peer-cert.
    #[arg(long, env = "FLOE_PEER_TLS_KEY", requires = "peer_cert")]
    peer_key: Option<PathBuf>,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    clients: ClientLimitArgs,
}

#[derive(Args, Debug)]
struct ReadReplicaArgs {
    /// A TOML file of settings: each key is one of this command's flags (`data-dir =
    /// "/var/lib/floe"`); flags and their environment variables win over it.
    #[arg(long = "config", env = "FLOE_CONFIG")]
    config_file: Option<PathBuf>,
    /// Check the settings (command line, environment, --config file, and the token files
    /// they name) and exit without starting: no port, certificate or data directory is
    /// opened.
    #[arg(long)]
    check_config: bool,
    /// The controlplane's REST API, e.g. http://10.0.0.5:7300: the replica registers there
    /// and finds the brokers.
    #[arg(long, env = "FLOE_CONTROLPLANE")]
    controlplane: String,
    /// The PEM CA that signed the controlplane's certificate (an https --controlplane); by
    /// default the system's roots.
    #[arg(long, env = "FLOE_CONTROLPLANE_CA", value_name = "PATH")]
    controlplane_ca: Option<PathBuf>,
    /// A file holding the token this replica calls the controlplane and the brokers with (a
    /// principal of kind `read-replica`, e.g. the controlplane's
    /// `--read-replica-token-file`), else FLOE_READ_REPLICA_TOKEN.
    #[arg(long, env = "FLOE_TOKEN_FILE", value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Serve consumers without authentication. Refused unless given; logged every minute.
    #[arg(long, env = "FLOE_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// The id to register under (a scaler that starts replicas names them) [default: one
    /// the controlplane assigns]
    #[arg(long, env = "FLOE_REPLICA_ID")]
    replica_id: Option<String>,
    /// Where the cache's disk half lives; nothing durable is kept.
    #[arg(long, env = "FLOE_DATA_DIR")]
    data_dir: PathBuf,
    #[arg(long, env = "FLOE_LISTEN", default_value = "0.0.0.0:7150")]
    listen: SocketAddr,
    #[arg(long, env = "FLOE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// PEM certificate chain consumers see.
    #[arg(long, env = "FLOE_TLS_CERT")]
    cert: PathBuf,
    /// PEM private key.
    #[arg(long, env = "FLOE_TLS_KEY")]
    key: PathBuf,
    /// A PEM CA whose certificates name principals: a client presenting one signs in as the
    /// user principal its subject's common name names (mutual TLS), instead of with a token.
    #[arg(long, env = "FLOE_CLIENT_CA", value_name = "PATH")]
    client_ca: Option<PathBuf>,
    /// host:port clients use to reach this replica [default: the listen address]
    #[arg(long, env = "FLOE_ADVERTISE")]
    advertise: Option<String>,
    /// PEM certificate of the CA that signed the brokers' certificates.
    #[arg(long, env = "FLOE_BROKER_CA")]
    broker_ca: PathBuf,
    /// The name the brokers' certificates carry.
    #[arg(long, env = "FLOE_BROKER_SERVER_NAME", default_value = "localhost")]
    broker_server_name: String,
    /// Bytes of recent records kept in memory per followed partition, e.g. 64MiB.
    #[arg(long, env = "FLOE_TAIL_WINDOW", default_value = "64MiB", value_parser = floe_wire::units::parse_size)]
    tail_window: u64,
    #[command(flatten)]
    objects: ObjectStoreArgs,
    #[command(flatten)]
    clients: ClientLimitArgs,
}

fn main() -> Result<()> {
    let cli: Cli = floe_controlplane::config_file::parse();
    floe_controlplane::logging::init(cli.log_format);
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a TLS crypto provider was already installed"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Dev(args) => run_dev(args).await,
            Command::Serve(args) => run_serve(args).await,
            Command::ReadReplica(args) => run_read_replica(args).await,
            Command::Certs { dir, broker_ids } => {
                let certs = tls::ClusterCertificates::ensure(&dir)?;
                use std::io::Write;
                let mut out = std::io::stdout();
                writeln!(out, "{}", certs.files.ca.display())?;
                for id in broker_ids {
                    let paths = certs.peer_certificate(floe_wire::BrokerId::new(id))?;
                    writeln!(out, "{}", paths.cert.display())?;
                }
                Ok(())
            }
        }
    })
}

async fn run_dev(args: DevArgs) -> Result<()> {
    let data_dir = match args.data_dir {
        Some(dir) => dir,
        None => dev::default_data_dir()?,
    };
    let mut settings = dev::prepare(&data_dir, args.listen, args.metrics_listen)?;
    args.storage.apply(&mut settings)?;
    args.clients.apply(&mut settings);
    let objects = settings
        .object_store
        .clone()
        .unwrap_or_else(|| data_dir.join("objects").display().to_string());
    let ca = data_dir.join("tls").join("ca.pem");
    let replicas =
        dev::DevReplicas::new(&settings, &ca, args.read_replicas, args.max_read_replicas)?;
    let tokens = dev::DevTokens::ensure(&data_dir)?;
    let controlplane =
        dev::start_controlplane(&data_dir, args.controlplane_listen, &replicas, &tokens).await?;
    let controlplane_addr = controlplane.local_addr();
    settings.controlplane = Some(ControlplaneSettings {
        url: format!("http://{controlplane_addr}"),
        ca: None,
        token: Some(tokens.broker.expose().to_owned()),
        zone: None,
        peer_endpoint: None,
    });
    settings.client_auth = ClientAuth::Controlplane;
    let running = run::start(settings).await?;
    let targets = dev::ProfileTargets {
        quic: running.quic_addr,
        metrics: running.metrics_addr,
        controlplane: Some(controlplane_addr),
    };
    let profile = dev::write_profile(args.profile.as_deref(), &targets, &ca, &tokens.admin)?;
    eprintln!(
        "floe dev: broker on {} (QUIC), metrics on http://{}/metrics, controlplane on \
         http://{controlplane_addr}/v1",
        running.quic_addr,
        running
            .metrics_addr
            .map_or_else(|| "-".into(), |a| a.to_string())
    );
    eprintln!(
        "floe dev: data in {}, objects in {objects}, client profile {}",
        data_dir.display(),
        profile_line(&profile)
    );
    eprintln!(
        "floe dev: {}-{} read replicas (`floe read-replica list`)",
        replicas.min, replicas.max
    );
    eprintln!("floe dev: try `floe stream create demo` then `echo hi | floe publish demo`");
    wait_for_signal().await?;
    let stopped = running.shutdown().await;
    controlplane.shutdown().await;
    Ok(stopped?)
}

/// Says where settings came from besides the command line.
fn log_config_file(path: Option<&std::path::Path>) {
    if let Some(path) = path {
        tracing::info!(path = %path.display(), "settings from the configuration file, under flags and environment");
    }
}

async fn run_serve(args: ServeArgs) -> Result<()> {
    log_config_file(args.config_file.as_deref());
    let check_only = args.check_config;
    let config_file = args.config_file.clone();
    let settings = serve_settings(args)?;
    if check_only {
        return report_checked("floe-broker serve", config_file.as_deref());
    }
    if settings.client_auth == ClientAuth::Insecure {
        tokio::spawn(floe_controlplane::auth::warn_insecure(
            "the broker's client port",
        ));
    }
    let running = run::start(settings).await?;
    wait_for_signal().await?;
    Ok(running.shutdown().await?)
}

/// What `--check-config` prints once the settings are found to go together.
fn report_checked(command: &str, config_file: Option<&std::path::Path>) -> Result<()> {
    let from = config_file.map_or_else(String::new, |path| format!(" with {}", path.display()));
    use std::io::Write;
    writeln!(
        std::io::stdout().lock(),
        "{command}: the settings{from} are valid"
    )?;
    Ok(())
}

/// The broker's settings from its flags, environment and token files; nothing is started.
fn serve_settings(args: ServeArgs) -> Result<Settings> {
    let certificate = CertificatePaths {
        cert: args.cert,
        key: args.key,
    };
    let mut settings = Settings::new(args.data_dir, args.listen, certificate);
    settings.client_ca = args.client_ca;
    let peer_certificate = match (args.peer_cert, args.peer_key) {
        (Some(cert), Some(key)) => Some(CertificatePaths { cert, key }),
        _ => None,
    };
    settings.peer = match (args.peer_listen, args.peer_ca) {
        (Some(listen), Some(ca)) => Some(run::PeerSettings {
            listen,
            tls: tls::PeerTls {
                certificate: peer_certificate,
                ca,
            },
        }),
        _ => None,
    };
    settings.metrics_listen = args.metrics_listen;
    settings.advertised = args.advertise;
    settings.broker_id = args.broker_id;
    let env = |name: &str| std::env::var(name).ok();
    let token = read_secret(
        args.token_file.as_deref(),
        env("FLOE_BROKER_TOKEN"),
        "FLOE_BROKER_TOKEN",
    )?;
    let admin = read_secret(
        args.admin_token_file.as_deref(),
        env("FLOE_ADMIN_TOKEN"),
        "FLOE_ADMIN_TOKEN",
    )?;
    settings.client_auth = match (args.insecure_no_auth, &args.controlplane, admin) {
        (true, _, Some(_)) => anyhow::bail!(
            "--insecure-no-auth and an admin token (--admin-token-file or FLOE_ADMIN_TOKEN) both \
             given: choose one"
        ),
        (false, Some(_), Some(_)) => anyhow::bail!(
            "--admin-token-file (or FLOE_ADMIN_TOKEN) is for a broker without a controlplane; with \
             --controlplane, clients present the tokens of the principals it keeps"
        ),
        (true, _, None) => ClientAuth::Insecure,
        (false, Some(_), None) => ClientAuth::Controlplane,
        (false, None, Some(admin)) => ClientAuth::AdminToken(admin),
        (false, None, None) => anyhow::bail!(
            "no authentication configured: give --controlplane (clients present the tokens of \
             its principals), or --admin-token-file (or FLOE_ADMIN_TOKEN) for a broker on its \
             own, or --insecure-no-auth to let anyone who reaches the port do anything"
        ),
    };
    settings.controlplane = args.controlplane.map(|url| ControlplaneSettings {
        url,
        ca: args.controlplane_ca,
        token,
        zone: args.zone,
        peer_endpoint: args.peer_advertise,
    });
    args.storage.apply(&mut settings)?;
    args.clients.apply(&mut settings);
    let _ = tls::ALPN;
    Ok(settings)
}

async fn run_read_replica(args: ReadReplicaArgs) -> Result<()> {
    log_config_file(args.config_file.as_deref());
    let check_only = args.check_config;
    let config_file = args.config_file.clone();
    let settings = read_replica_settings(args)?;
    if check_only {
        return report_checked("floe-broker read-replica", config_file.as_deref());
    }
    if settings.client_auth == ClientAuth::Insecure {
        tokio::spawn(floe_controlplane::auth::warn_insecure(
            "the read replica's client port",
        ));
    }
    let running = read_replica::start(settings).await?;
    wait_for_signal().await?;
    running.shutdown().await;
    Ok(())
}

/// The read replica's settings from its flags, environment and token file; nothing is
/// started.
fn read_replica_settings(args: ReadReplicaArgs) -> Result<read_replica::ReadReplicaSettings> {
    let certificates = CertificatePaths {
        cert: args.cert,
        key: args.key,
    };
    let Some(object_store) = args.objects.object_store.clone() else {
        anyhow::bail!("a read replica needs --object-store: the bucket the brokers tier to");
    };
    let mut settings = read_replica::ReadReplicaSettings::new(
        args.data_dir,
        certificates,
        args.controlplane,
        args.broker_ca,
        object_store,
    );
    settings.listen = args.listen;
    settings.metrics_listen = args.metrics_listen;
    settings.advertised = args.advertise;
    settings.controlplane_ca = args.controlplane_ca;
    settings.client_ca = args.client_ca;
    let env = std::env::var("FLOE_READ_REPLICA_TOKEN").ok();
    settings.token =
        read_secret(args.token_file.as_deref(), env, "FLOE_READ_REPLICA_TOKEN")?.map(Secret::new);
    if settings.token.is_none() && !args.insecure_no_auth {
        anyhow::bail!(
            "no token: a read replica calls the controlplane and the brokers with the token of a \
             read-replica principal (--token-file, or FLOE_READ_REPLICA_TOKEN), or serves without \
             authentication with --insecure-no-auth"
        );
    }
    settings.client_auth = if args.insecure_no_auth {
        ClientAuth::Insecure
    } else {
        ClientAuth::Controlplane
    };
    settings.replica_id = args.replica_id;
    settings.broker_server_name = args.broker_server_name;
    settings.window_bytes = usize::try_from(args.tail_window).unwrap_or(usize::MAX);
    settings.client_limits = args.clients.limits();
    settings.streams_per_connection = args.clients.streams_per_connection;
    args.objects
        .apply(&mut settings.tier, &mut settings.tier_cache_disk_bytes)?;
    Ok(settings)
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    Ok(())
}

/// How `dev` names the profile it wrote, and whether `floe` uses it without flags.
fn profile_line(profile: &dev::WrittenProfile) -> String {
    let path = profile.path.display();
    match (&profile.name, profile.current) {
        (Some(name), true) => format!("{name} ({path}), the current one"),
        (Some(name), false) => format!(
            "{name} ({path}); another profile is current: `floe profile use {name}` or \
             `floe --profile {name} …`"
        ),
        (None, _) => format!("{path} (`floe --profile {path} …`)"),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn page_cache(args: &[&str]) -> Option<u64> {
        let cli = Cli::try_parse_from(
            ["floe-broker", "dev", "--data-dir", "/nowhere"]
                .iter()
                .chain(args),
        )
        .expect("parses");
        let Command::Dev(dev) = cli.command else {
            panic!("not dev");
        };
        let mut settings = Settings::new(
            "/nowhere".into(),
            "127.0.0.1:0".parse().expect("address"),
            floe_broker::tls::CertificatePaths {
                cert: "c".into(),
                key: "k".into(),
            },
        );
        dev.storage.apply(&mut settings).expect("storage settings");
        settings.log.page_cache_bytes
    }

    /// The TOML block after the line of `docs/operations.md` that contains `marker`.
    fn documented_config(marker: &str) -> tempfile::NamedTempFile {
        let doc = include_str!("../../docs/operations.md");
        let after = &doc[doc.find(marker).expect("the example is documented")..];
        let start = after.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let text = &after[start..start + after[start..].find("```").expect("closed")];
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), text).expect("write");
        file
    }

    fn parse_with_file(args: &[&str], file: &tempfile::NamedTempFile) -> Cli {
        let mut args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        args.extend(["--config".into(), file.path().into()]);
        floe_controlplane::config_file::try_parse_from(args, |_| None)
            .expect("the documented configuration parses")
    }

    #[test]
    fn the_documented_configuration_files_parse() {
        let broker = documented_config("A broker (`floe-broker serve --config");
        let cli = parse_with_file(&["floe-broker", "serve"], &broker);
        assert_eq!(cli.log_format, LogFormat::Json);
        let Command::Serve(serve) = cli.command else {
            panic!("not serve");
        };
        assert_eq!(serve.data_dir, std::path::Path::new("/var/lib/floe"));
        assert_eq!(
            serve.peer_listen,
            Some("0.0.0.0:7200".parse().expect("address"))
        );
        assert_eq!(serve.storage.history_read_rate, Some(200 << 20));
        assert_eq!(serve.clients.max_connections, 4096);
        assert_eq!(serve.clients.request_memory, 256 << 20);

        let replica = documented_config("A read replica (`floe-broker read-replica --config");
        let cli = parse_with_file(&["floe-broker", "read-replica"], &replica);
        let Command::ReadReplica(replica) = cli.command else {
            panic!("not a read replica");
        };
        assert_eq!(replica.broker_server_name, "broker.floe.internal");
        assert_eq!(replica.tail_window, 64 << 20);
    }

    #[test]
    fn the_log_page_cache_is_a_size_or_all() {
        assert_eq!(page_cache(&[]), Some(64 << 20));
        assert_eq!(page_cache(&["--log-page-cache", "1GiB"]), Some(1 << 30));
        assert_eq!(page_cache(&["--log-page-cache", "all"]), None);
    }

    #[test]
    fn the_history_read_rate_is_a_size_per_second_and_never_zero() {
        assert_eq!(parse_rate("200MiB"), Ok(200 << 20));
        assert_eq!(parse_rate("200MiB/s"), Ok(200 << 20));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }
}

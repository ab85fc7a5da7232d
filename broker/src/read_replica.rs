//! `floe-broker read-replica`: a read replica. It owns no partition and no durable state, only a
//! cache. It answers consumers' fetches over the client protocol: history from the tiered
//! segments through its hybrid cache, the live tail from a bounded in-memory window that it
//! fills by following each partition's leader as a consumer does (one feed per partition,
//! however many consumers read it here). What it holds neither place — a gap between the
//! tier's end and the window after an eviction, a position given as a time — it asks the
//! leader for, on the consumer's behalf. Killed at any moment, it loses nothing: consumers
//! keep their positions and move to another replica or to the leader.

mod fetch;
mod follow;
mod registration;
mod window;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_client::{Client, ClientConfig};
use floe_tier::{PartitionPath, RequestObserver, TierReader};
use floe_wire::auth::Secret;
use floe_wire::frame::{ConnectionLimits, Message};
use floe_wire::{BrokerId, PartitionId, StreamName};
use tokio::sync::watch;

use crate::auth::{Access, Caller, ClientAuth};
use crate::metrics::Metrics;
use crate::quic::{ClientPort, ClientPortError};
use crate::server::{self, Refusal, Service};
use crate::tiering::{self, TierSettings};
use crate::tls::CertificatePaths;
use follow::Tail;

/// Why a read replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReadReplicaError {
    #[error("the read replica id `{0}` is not 1 to 64 bytes of [A-Za-z0-9._-]")]
    InvalidId(String),
    #[error("cannot create {path}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tiering(#[from] crate::tiering::TieringError),
    #[error("cannot open the tier cache")]
    Cache(#[source] floe_tier::TierError),
    #[error("the controlplane URL")]
    ControlplaneUrl(#[source] floe_client::rest::RestError),
    #[error("cannot reach the brokers through {controlplane}: {why}")]
    NoBrokers { controlplane: String, why: String },
    #[error("cannot open the client port")]
    ClientPort(#[from] ClientPortError),
    #[error("registering with the controlplane")]
    Register(#[source] floe_client::rest::RestError),
    #[error(transparent)]
    OperatorsPort(#[from] crate::operators::OperatorsPortError),
}

type Result<T, E = ReadReplicaError> = std::result::Result<T, E>;

/// Concurrent requests per client connection.
const STREAMS_PER_CONNECTION: u32 = 256;

/// Everything a read replica needs to start.
#[derive(Debug, Clone)]
pub struct ReadReplicaSettings {
    /// The cache's disk half lives here; nothing else is written.
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `None` disables `/metrics`.
    pub metrics_listen: Option<SocketAddr>,
    /// The certificate consumers see.
    pub certificates: CertificatePaths,
    /// The CA whose certificates name principals (mutual TLS on the client port).
    pub client_ca: Option<PathBuf>,
    /// `host:port` clients use; defaults to the bound address.
    pub advertised: Option<String>,
    /// The controlplane's REST URL and token: where the replica registers and finds brokers.
    /// The token (a principal of kind `read-replica`) is also what the replica shows the
    /// brokers it follows.
    pub controlplane: String,
    /// The PEM CA the controlplane's certificate chains to (`https` only); `None`: the
    /// system's roots.
    pub controlplane_ca: Option<PathBuf>,
    pub token: Option<Secret>,
    /// How callers on this replica's client port are checked.
    pub client_auth: ClientAuth,
    /// The id to register under (the local autoscaler names the replicas it starts).
    pub replica_id: Option<String>,
    /// How the replica reaches the brokers as a client: their CA and certificate name.
    pub broker_ca: PathBuf,
    pub broker_server_name: String,
    /// Object storage (read access is enough) and the cache.
    pub tier: TierSettings,
    /// `None`: [`crate::tiering::cache_disk_bytes`] decides by the object store.
    pub tier_cache_disk_bytes: Option<usize>,
    /// Bytes of tail one partition's window holds.
    pub window_bytes: usize,
    /// A partition nobody fetched for this long stops being followed.
    pub idle_partition: Duration,
    pub limits: ConnectionLimits,
    pub fetch_wait_max: Duration,
    pub fetch_bytes_per_connection: u32,
    /// Connections, and request bytes in flight across them.
    pub client_limits: crate::server::ClientLimits,
    /// Concurrent requests (QUIC streams) per connection.
    pub streams_per_connection: u32,
}

impl ReadReplicaSettings {
    /// Defaults for everything but the places and identities.
    pub fn new(
        data_dir: PathBuf,
        certificates: CertificatePaths,
        controlplane: String,
        broker_ca: PathBuf,
        object_store: String,
    ) -> ReadReplicaSettings {
        let tier = TierSettings {
            url: object_store,
            ..TierSettings::default()
        };
        ReadReplicaSettings {
            data_dir,
            listen: "127.0.0.1:0".parse().expect("a socket address"),
            metrics_listen: None,
            certificates,
            client_ca: None,
            advertised: None,
            controlplane,
            controlplane_ca: None,
            token: None,
            client_auth: ClientAuth::Insecure,
            replica_id: None,
            broker_ca,
            broker_server_name: "localhost".to_owned(),
            tier,
            tier_cache_disk_bytes: None,
            window_bytes: 64 << 20,
            idle_partition: Duration::from_secs(60),
            limits: crate::server::default_limits(),
            fetch_wait_max: Duration::from_secs(30),
            fetch_bytes_per_connection: 64 << 20,
            client_limits: crate::server::ClientLimits::default(),
            streams_per_connection: STREAMS_PER_CONNECTION,
        }
    }
}

/// What the replica's connections share.
#[derive(Debug)]
pub struct ReadReplica {
    pub reader: TierReader,
    /// A client of the brokers, routing each partition to its leader.
    pub brokers: Client,
    pub metrics: Arc<Metrics>,
    tails: Mutex<HashMap<(StreamName, PartitionId), Arc<Tail>>>,
    window_bytes: usize,
    idle_partition: Duration,
    limits: ConnectionLimits,
    fetch_wait_max: Duration,
    fetch_bytes_per_connection: u32,
    shutdown: watch::Receiver<bool>,
    /// How callers are checked.
    access: Arc<Access>,
    /// Load, as heartbeats report it.
    pub load: registration::Load,
}

impl ReadReplica {
    /// The tail of a partition, followed from now on if it was not.
    fn tail(self: &Arc<Self>, stream: &StreamName, partition: PartitionId) -> Arc<Tail> {
        let mut tails = self.tails.lock().unwrap_or_else(|e| e.into_inner());
        let key = (stream.clone(), partition);
        if let Some(tail) = tails.get(&key).filter(|t| !t.stopped()) {
            tail.touch();
            return tail.clone();
        }
        let tail = Tail::start(self.clone(), stream.clone(), partition, self.window_bytes);
        tails.insert(key, tail.clone());
        tail
    }

    /// Stops following partitions nobody read for a while.
    fn forget_idle(&self) {
        let mut tails = self.tails.lock().unwrap_or_else(|e| e.into_inner());
        tails.retain(|_, tail| {
            let keep = !tail.stopped() && tail.idle_for() < self.idle_partition;
            if !keep {
                tail.stop();
            }
            keep
        });
    }

    /// Partitions followed now.
    pub fn followed(&self) -> usize {
        self.tails.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn tier_path(stream: &StreamName, partition: PartitionId) -> Option<PartitionPath> {
        PartitionPath::new(stream.as_str(), partition.get()).ok()
    }
}

impl Service for ReadReplica {
    fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    fn fetch_bytes_per_connection(&self) -> u32 {
        self.fetch_bytes_per_connection
    }

    fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn server_id(&self) -> BrokerId {
        // Read replicas are not brokers; 0 is never a broker's id.
        BrokerId::new(0)
    }

    fn shutdown(&self) -> &watch::Receiver<bool> {
        &self.shutdown
    }

    fn access(&self) -> &Access {
        &self.access
    }

    async fn answer(
        self: &Arc<Self>,
        message: Message,
        _caller: &Caller,
        started: Instant,
        _turn: Option<server::Turn<'_>>,
    ) -> Message {
        match message {
            Message::Fetch(request) => fetch::fetch(self, request, started).await,
            Message::MetadataRequest(request) => {
                // The brokers know; a replica relays.
                match self
                    .brokers
                    .request(Message::MetadataRequest(request))
                    .await
                {
                    Ok(answer) => answer,
                    Err(e) => Refusal::LeaderUnreachable(e.to_string()).into(),
                }
            }
            Message::Produce(_) | Message::CreateStream(_) | Message::DeleteStream(_) => {
                Refusal::FetchesOnly.into()
            }
            other => Refusal::NotARequest(other.message_type()).into(),
        }
    }
}

/// A running read replica.
#[derive(Debug)]
pub struct Running {
    pub quic_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub state: Arc<ReadReplica>,
    pub replica_id: String,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Leaves the controlplane's list, stops serving and following.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

/// Starts a read replica: opens the store and the cache, connects to the brokers, registers
/// with the controlplane, and serves.
pub async fn start(mut settings: ReadReplicaSettings) -> Result<Running> {
    create_data_dir(&mut settings)?;
    let metrics = Metrics::new();
    let reader = open_reader(&settings).await?;

    let token = settings.token.as_ref().map(|t| t.expose().to_owned());
    let rest = floe_client::rest::Controlplane::with_ca(
        &settings.controlplane,
        token,
        settings.controlplane_ca.as_deref(),
    )
    .map_err(ReadReplicaError::ControlplaneUrl)?;
    let brokers = connect_brokers(&rest, &settings).await?;

    let ClientPort {
        endpoint,
        local_addr: quic_addr,
        advertised,
        ..
    } = bind_client_port(&settings)?;

    let (shutdown, shutdown_rx) = watch::channel(false);
    let access = Arc::new(Access::new(&settings.client_auth));
    if settings.client_auth == ClientAuth::Controlplane {
        tokio::spawn(crate::auth::refresh(
            access.clone(),
            rest.clone(),
            shutdown_rx.clone(),
        ));
    }
    let state = Arc::new(ReadReplica {
        access,
        reader,
        brokers,
        metrics: metrics.clone(),
        tails: Mutex::new(HashMap::new()),
        window_bytes: settings.window_bytes.max(1),
        idle_partition: settings.idle_partition,
        limits: settings.limits,
        fetch_wait_max: settings.fetch_wait_max,
        fetch_bytes_per_connection: settings.fetch_bytes_per_connection.max(1),
        shutdown: shutdown_rx.clone(),
        load: registration::Load::default(),
    });
    let registered =
        registration::register(&rest, settings.replica_id.clone(), &advertised).await?;
    let mut tasks = Vec::new();
    let mut metrics_addr = None;
    if let Some(addr) = settings.metrics_listen {
        let (bound, handle) = serve_operators(&state, &metrics, addr).await?;
        metrics_addr = Some(bound);
        tasks.push(handle);
    }
    tasks.push(tokio::spawn(server::serve(
        endpoint,
        state.clone(),
        settings.client_limits,
    )));
    tasks.push(tokio::spawn(registration::heartbeat(
        state.clone(),
        rest,
        registered.clone(),
        advertised,
        shutdown_rx,
    )));
    tracing::info!(%quic_addr, replica_id = %registered.replica_id, "read replica serving");
    Ok(Running {
        quic_addr,
        metrics_addr,
        state,
        replica_id: registered.replica_id,
        shutdown,
        tasks,
    })
}

/// Creates the data directory; under a replica id, the replica's own directory below it.
fn create_data_dir(settings: &mut ReadReplicaSettings) -> Result<()> {
    // Replicas started under an id by a scaler may share a parent directory (the local
    // driver's children do): each keeps its cache in its own.
    if let Some(id) = &settings.replica_id {
        // Also a directory name: not `.` or `..`.
        let valid = floe_wire::admin::valid_read_replica_id(id) && id != "." && id != "..";
        if !valid {
            return Err(ReadReplicaError::InvalidId(id.clone()));
        }
        settings.data_dir = settings.data_dir.join(id);
    }
    std::fs::create_dir_all(&settings.data_dir).map_err(|source| ReadReplicaError::DataDir {
        path: settings.data_dir.clone(),
        source,
    })
}

/// Opens object storage and the tier reader, with its cache's disk half under the data
/// directory.
async fn open_reader(settings: &ReadReplicaSettings) -> Result<TierReader> {
    let mut reader_config = settings.tier.reader.clone();
    reader_config.disk_cache = tiering::disk_cache(
        settings.data_dir.join("cache"),
        tiering::cache_disk_bytes(settings.tier_cache_disk_bytes, &settings.tier.url),
        reader_config.chunk_bytes,
    );
    // Read-only: a replica never writes to the bucket, whatever its credentials allow.
    let store = tiering::open_store(&settings.tier)?
        .read_only()
        .with_observer(RequestObserver(Arc::new(|_, _| {})));
    TierReader::new(store, reader_config)
        .await
        .map_err(ReadReplicaError::Cache)
}

/// Binds the client port consumers fetch from.
fn bind_client_port(settings: &ReadReplicaSettings) -> Result<ClientPort> {
    Ok(ClientPort::bind(
        settings.listen,
        &settings.certificates,
        settings.client_ca.as_deref(),
        settings.streams_per_connection.max(1),
        &settings.data_dir,
        settings.advertised.as_deref(),
    )?)
}

/// Serves the operators' port on `addr`, its metrics mirroring the tier's: the bound
/// address and the port's task.
async fn serve_operators(
    state: &Arc<ReadReplica>,
    metrics: &Arc<Metrics>,
    addr: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let weak = Arc::downgrade(state);
    metrics.set_scrape_hook(crate::metrics::ScrapeHook(Box::new(move |m: &Metrics| {
        if let Some(state) = weak.upgrade() {
            m.mirror_tier(
                &state.reader.store().metrics().snapshot(),
                state.reader.cache_memory_bytes(),
            );
        }
    })));
    // Registered by now: ready from the first probe.
    let readiness = crate::operators::Readiness::default();
    readiness.set_ready();
    Ok(crate::operators::serve(metrics.clone(), readiness, addr).await?)
}

/// A client of every broker the controlplane lists, waiting until at least one is live.
async fn connect_brokers(
    rest: &floe_client::rest::Controlplane,
    settings: &ReadReplicaSettings,
) -> Result<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = rest.brokers().await;
        if let Ok(list) = &listed {
            let endpoints: Vec<String> = list
                .brokers
                .iter()
                .filter(|b| b.state == floe_wire::admin::BrokerState::Live)
                .map(|b| b.client_endpoint.to_string())
                .collect();
            if !endpoints.is_empty() {
                let mut config = ClientConfig::new(
                    endpoints.join(","),
                    settings.broker_server_name.clone(),
                    settings.broker_ca.clone(),
                );
                config.client_name = "floe-read-replica".to_owned();
                config.token = settings.token.clone();
                match Client::connect(config).await {
                    Ok(client) => return Ok(client),
                    Err(e) => tracing::warn!(error = %e, "no broker answered; retrying"),
                }
            }
        }
        if Instant::now() > deadline {
            let why = match listed {
                Ok(_) => "no live broker answered".to_owned(),
                Err(e) => e.to_string(),
            };
            return Err(ReadReplicaError::NoBrokers {
                controlplane: settings.controlplane.clone(),
                why,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

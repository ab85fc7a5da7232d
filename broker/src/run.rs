//! Starting and stopping a broker: the assembly of its layers. The partitions and their
//! logs at the bottom; the replication drivers, tiering, the controlplane session and the
//! history read cap above them; the QUIC servers (client port, peer port) and `/metrics` on
//! top. Each task gets the handles it uses, nothing more.

mod scrape;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_hot_log::{LogConfig, SyncActivity};
use floe_tier::{RequestKind, RequestObserver, YieldToSyncs};
use floe_wire::frame::ConnectionLimits;
use floe_wire::{BrokerId, Endpoint};
use tokio::sync::watch;

use crate::auth::Access;
pub use crate::disk::DiskHighWater;
use crate::disk::DiskWatch;
use crate::history_read_cap::HistoryReadCap;
use crate::lease::Lease;
use crate::metrics::{KindLabels, Metrics};
use crate::partitions::{Partitions, StreamDefaults, fsync_observer};
use crate::peer::Peers;
use crate::peer_identity::PeerCredentials;
use crate::peer_identity::issued::Issued;
use crate::quic::ClientPort;
use crate::replication::Replication;
use crate::server::{Broker, BrokerParts};
use crate::session::{self, Session};
use crate::tiering::{self, TierSettings, Tiering};
use crate::tls::{self, CertificatePaths};

pub use crate::auth::ClientAuth;
pub use crate::server::ClientLimits;
pub use crate::session::ControlplaneSettings;

/// Why a broker could not start, or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid connection limits: {0}")]
    Limits(String),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Quic(#[from] crate::quic::QuicError),
    #[error("cannot open the peer port")]
    PeerPort(#[source] crate::quic::QuicError),
    #[error("a peer port needs a controlplane")]
    PeerWithoutControlplane,
    #[error(
        "the peer certificate names broker {named}, but this data directory is broker {broker}'s"
    )]
    PeerCertificate { named: BrokerId, broker: BrokerId },
    #[error("cannot obtain a peer certificate from the controlplane")]
    IssuePeerCertificate(#[from] crate::peer_identity::issued::IssueError),
    #[error("cannot read a bound address")]
    LocalAddr(#[source] std::io::Error),
    #[error("cannot open the client port")]
    ClientPort(#[from] crate::quic::ClientPortError),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    #[error("checking clients against the controlplane's principals needs a controlplane")]
    AuthWithoutControlplane,
    #[error(transparent)]
    Tiering(#[from] crate::tiering::TieringError),
    #[error(transparent)]
    Partitions(#[from] crate::partitions::StreamError),
    #[error(transparent)]
    OperatorsPort(#[from] crate::operators::OperatorsPortError),
    #[error("closing the logs failed")]
    Close(#[source] tokio::task::JoinError),
}

type Result<T, E = StartError> = std::result::Result<T, E>;

/// Everything a broker needs to start.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `None` disables the `/metrics` endpoint.
    pub metrics_listen: Option<SocketAddr>,
    pub certificates: CertificatePaths,
    /// The CA whose certificates name principals (mutual TLS on the client port); `None`:
    /// clients prove themselves by token only.
    pub client_ca: Option<PathBuf>,
    /// `host:port` clients use to reach this broker; defaults to `listen`.
    pub advertised: Option<String>,
    pub broker_id: u32,
    pub log: LogConfig,
    pub limits: ConnectionLimits,
    pub fetch_wait_max: Duration,
    /// Concurrent requests (QUIC streams) per connection.
    pub streams_per_connection: u32,
    /// Bytes of fetch responses one connection may hold at once.
    pub fetch_bytes_per_connection: u32,
    /// Connections, and request bytes in flight across them, on the client port.
    pub client_limits: ClientLimits,
    /// Object storage: `None` is a directory under the data directory.
    pub object_store: Option<String>,
    pub tier: TierSettings,
    /// Bytes of the tier cache's disk half under the data directory (0: memory only);
    /// `None`: [`crate::tiering::cache_disk_bytes`] decides by the object store.
    pub tier_cache_disk_bytes: Option<usize>,
    pub stream_defaults: StreamDefaults,
    pub disk_high_water: DiskHighWater,
    /// Bytes per second this broker reads history at, for all consumers together: fetches
    /// of sealed segments or of the tier (see [`crate::history_read_cap`]). `None`: no cap.
    pub history_read_bytes_per_second: Option<u64>,
    /// The controlplane that assigns this broker its partitions; `None`: the local catalog
    /// alone, streams created over the client protocol.
    pub controlplane: Option<ControlplaneSettings>,
    /// The peer port, for replicated partitions (with a controlplane only).
    pub peer: Option<PeerSettings>,
    /// How callers on the client port are checked; [`ClientAuth::Controlplane`] needs a
    /// controlplane.
    pub client_auth: ClientAuth,
}

/// Where this broker takes replication traffic from its peers, and its identity there.
#[derive(Debug, Clone)]
pub struct PeerSettings {
    pub listen: SocketAddr,
    pub tls: tls::PeerTls,
}

/// Segments a broker seals by default: 128 MiB. Each sealed segment costs object storage
/// one PUT, plus at most one manifest commit, so at any ingest rate the tier takes at most
/// 16 PUTs per GiB (and fewer when commits cover several segments); 64 MiB segments cost up
/// to 32 at low rates. Below the tier's single-PUT limit, so no multipart upload.
pub const DEFAULT_SEGMENT_BYTES: u64 = 128 << 20;

impl Settings {
    /// Defaults for everything but the paths.
    pub fn new(data_dir: PathBuf, listen: SocketAddr, certificates: CertificatePaths) -> Settings {
        Settings {
            data_dir,
            listen,
            metrics_listen: None,
            certificates,
            client_ca: None,
            advertised: None,
            broker_id: 0,
            log: LogConfig {
                segment_bytes_max: DEFAULT_SEGMENT_BYTES,
                ..LogConfig::default()
            },
            limits: crate::server::default_limits(),
            fetch_wait_max: Duration::from_secs(30),
            streams_per_connection: 256,
            fetch_bytes_per_connection: 32 * 1024 * 1024,
            client_limits: ClientLimits::default(),
            object_store: None,
            tier: TierSettings::default(),
            tier_cache_disk_bytes: None,
            stream_defaults: StreamDefaults::default(),
            disk_high_water: DiskHighWater::UsedFraction(0.9),
            history_read_bytes_per_second: None,
            client_auth: ClientAuth::Insecure,
            controlplane: None,
            peer: None,
        }
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Running {
    pub quic_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    partitions: Arc<Partitions>,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    maintenance: tokio::task::JoinHandle<()>,
    tiering: tokio::task::JoinHandle<()>,
    /// Heartbeats and assignments (when a controlplane manages this broker), the peer port.
    cluster: Vec<tokio::task::JoinHandle<()>>,
    metrics_server: Option<tokio::task::JoinHandle<()>>,
}

/// The broker's layers below its servers, as [`start`] assembles them.
struct Layers {
    partitions: Arc<Partitions>,
    tiering: Arc<Tiering>,
    syncs: Arc<SyncActivity>,
    disk: Arc<DiskWatch>,
    metrics: Arc<Metrics>,
    session: Option<Arc<Session>>,
    replication: Option<Replication>,
}

/// Opens the partitions and starts serving.
pub async fn start(settings: Settings) -> Result<Running> {
    settings
        .limits
        .check()
        .map_err(|e| StartError::Limits(e.to_string()))?;
    check_client_limits(&settings)?;
    let metrics = Metrics::new();
    // A managed broker writes its partitions without replicas only while its lease holds.
    let lease = settings
        .controlplane
        .as_ref()
        .map(|_| Arc::new(Lease::default()));
    let (partitions, tiering, syncs) = open_partitions(&settings, &metrics, lease.clone()).await?;

    let ClientPort {
        endpoint,
        local_addr: quic_addr,
        advertised,
        reset_key,
    } = bind_client_port(&settings)?;
    let (session, peer_port) =
        join_cluster(&settings, &reset_key, &advertised, &metrics, lease).await?;
    let broker_id = broker_id(&settings, session.as_ref());

    let (shutdown, shutdown_rx) = watch::channel(false);
    let (replication, peer_server) = replication(
        peer_port,
        session.as_ref(),
        broker_id,
        &metrics,
        &partitions,
        &shutdown_rx,
    )?;
    let layers = Layers {
        partitions,
        tiering,
        syncs,
        disk: Arc::new(DiskWatch::default()),
        metrics,
        session,
        replication,
    };
    let access = client_access(&settings, layers.session.as_ref(), &shutdown_rx)?;
    let broker = client_service(
        &layers,
        &settings,
        (broker_id, advertised),
        access,
        &shutdown_rx,
    );
    let readiness = crate::operators::Readiness::default();
    let (metrics_addr, metrics_server) =
        serve_operators(&layers.metrics, &readiness, settings.metrics_listen).await?;
    layers.metrics.set_scrape_hook(scrape::hook(&layers));
    let tasks = spawn_tasks(
        &layers,
        &settings,
        broker,
        endpoint,
        peer_server,
        &shutdown_rx,
    );
    become_ready(layers.session.as_ref(), readiness);
    tracing::info!(%quic_addr, ?metrics_addr, data_dir = %settings.data_dir.display(), "broker serving");
    Ok(Running {
        quic_addr,
        metrics_addr,
        partitions: layers.partitions,
        shutdown,
        server: tasks.server,
        maintenance: tasks.maintenance,
        tiering: tasks.tiering,
        cluster: tasks.cluster,
        metrics_server,
    })
}

/// Refuses client limits that could never admit a request or a connection.
fn check_client_limits(settings: &Settings) -> Result<()> {
    let limits = &settings.client_limits;
    let frame = u64::from(settings.limits.max_frame_bytes);
    if limits.request_bytes < frame {
        return Err(StartError::Limits(format!(
            "--request-memory ({} bytes) is smaller than one frame ({frame} bytes)",
            limits.request_bytes
        )));
    }
    if limits.connections == 0 || limits.connections_per_address == 0 {
        return Err(StartError::Limits(
            "--max-connections and --max-connections-per-address must be at least 1".into(),
        ));
    }
    if settings.streams_per_connection == 0 {
        return Err(StartError::Limits(
            "--streams-per-connection must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Binds the client port, with its certificate, its streams per connection, and the
/// stateless-reset key kept in the data directory.
fn bind_client_port(settings: &Settings) -> Result<ClientPort> {
    Ok(ClientPort::bind(
        settings.listen,
        &settings.certificates,
        settings.client_ca.as_deref(),
        settings.streams_per_connection,
        &settings.data_dir,
        settings.advertised.as_deref(),
    )?)
}

/// The id the controlplane gave this broker, or the configured one without a controlplane.
fn broker_id(settings: &Settings, session: Option<&Arc<Session>>) -> BrokerId {
    session.map_or(BrokerId::new(settings.broker_id), |s| s.broker_id())
}

/// How the client port checks callers; with the controlplane's principals, the task that
/// keeps them fresh is started here.
fn client_access(
    settings: &Settings,
    session: Option<&Arc<Session>>,
    shutdown: &watch::Receiver<bool>,
) -> Result<Arc<Access>> {
    let access = Arc::new(Access::new(&settings.client_auth));
    if settings.client_auth == ClientAuth::Controlplane {
        let session = session.ok_or(StartError::AuthWithoutControlplane)?;
        tokio::spawn(crate::auth::refresh(
            access.clone(),
            session.controlplane().clone(),
            shutdown.clone(),
        ));
    }
    Ok(access)
}

/// The broker's `Service` on the client port, over the layers below it.
fn client_service(
    layers: &Layers,
    settings: &Settings,
    (broker_id, advertised): (BrokerId, Endpoint),
    access: Arc<Access>,
    shutdown: &watch::Receiver<bool>,
) -> Arc<Broker> {
    Arc::new(Broker::new(BrokerParts {
        partitions: layers.partitions.clone(),
        tiering: layers.tiering.clone(),
        disk: layers.disk.clone(),
        metrics: layers.metrics.clone(),
        limits: settings.limits,
        broker_id,
        session: layers.session.clone(),
        replication: layers.replication.clone(),
        advertised,
        fetch_wait_max: settings.fetch_wait_max,
        shutdown: shutdown.clone(),
        fetch_bytes_per_connection: settings.fetch_bytes_per_connection,
        history_cap: HistoryReadCap::new(settings.history_read_bytes_per_second),
        access,
    }))
}

/// Opens the operators' port on `listen`, if any: its bound address and its task.
async fn serve_operators(
    metrics: &Arc<Metrics>,
    readiness: &crate::operators::Readiness,
    listen: Option<SocketAddr>,
) -> Result<(Option<SocketAddr>, Option<tokio::task::JoinHandle<()>>)> {
    Ok(match listen {
        Some(addr) => {
            let (bound, handle) =
                crate::operators::serve(metrics.clone(), readiness.clone(), addr).await?;
            (Some(bound), Some(handle))
        }
        None => (None, None),
    })
}

/// Marks the broker ready now, or with a controlplane once its first assignments are applied.
fn become_ready(session: Option<&Arc<Session>>, readiness: crate::operators::Readiness) {
    match session {
        // Ready once the controlplane's assignments are applied: until then the broker may
        // not serve the partitions it was given.
        Some(session) => {
            let session = session.clone();
            tokio::spawn(async move {
                session.first_applied().await;
                readiness.set_ready();
            });
        }
        None => readiness.set_ready(),
    }
}

/// A running broker's tasks.
struct Tasks {
    server: tokio::task::JoinHandle<()>,
    maintenance: tokio::task::JoinHandle<()>,
    tiering: tokio::task::JoinHandle<()>,
    cluster: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts serving the client port (and the peer port, if any), and the maintenance, tiering
/// and controlplane tasks.
fn spawn_tasks(
    layers: &Layers,
    settings: &Settings,
    broker: Arc<Broker>,
    endpoint: quinn::Endpoint,
    peer_server: Option<PeerServer>,
    shutdown: &watch::Receiver<bool>,
) -> Tasks {
    let server = tokio::spawn(crate::server::serve(
        endpoint,
        broker,
        settings.client_limits,
    ));
    let maintenance = tokio::spawn(maintain(
        layers.partitions.clone(),
        layers.disk.clone(),
        settings.data_dir.clone(),
        settings.disk_high_water,
        shutdown.clone(),
    ));
    let tiering = tokio::spawn(tiering::run(
        layers.tiering.clone(),
        layers.partitions.clone(),
        layers.metrics.clone(),
        shutdown.clone(),
    ));
    let mut cluster = Vec::new();
    if let Some(session) = &layers.session {
        cluster.push(tokio::spawn(session::heartbeat(
            session.clone(),
            layers.partitions.clone(),
            layers.metrics.clone(),
            shutdown.clone(),
        )));
        let holdings = session::Holdings {
            partitions: layers.partitions.clone(),
            replication: layers.replication.clone(),
        };
        cluster.push(tokio::spawn(session::follow_assignments(
            session.clone(),
            holdings,
            shutdown.clone(),
        )));
    }
    if let (Some(peer), Some(replication)) = (peer_server, &layers.replication) {
        cluster.push(tokio::spawn(crate::peer::serve(
            peer.endpoint,
            settings.limits.frame_limits(),
            Arc::new(replication.clone()),
            layers.metrics.mismatch_counter(),
            shutdown.clone(),
        )));
        if let Some(issued) = peer.issued {
            cluster.push(tokio::spawn(issued.renew(shutdown.clone())));
        }
    }
    Tasks {
        server,
        maintenance,
        tiering,
        cluster,
    }
}

/// What replicated partitions need, on a managed broker with a peer port: the replication
/// drivers' context (the peers, the controlplane link), and the peer port's server side, to
/// be served once the broker has started. `None` on any other broker.
fn replication(
    peer_port: Option<PeerPort>,
    session: Option<&Arc<Session>>,
    broker_id: BrokerId,
    metrics: &Arc<Metrics>,
    partitions: &Arc<Partitions>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Option<Replication>, Option<PeerServer>)> {
    let (Some(peer_port), Some(session)) = (peer_port, session) else {
        return Ok((None, None));
    };
    let PeerPort {
        endpoint,
        client,
        issued,
    } = peer_port;
    let peers = Arc::new(Peers::new(
        broker_id,
        endpoint.clone(),
        client,
        session.controlplane().clone(),
        shutdown.clone(),
    ));
    let peer_addr = endpoint.local_addr().map_err(StartError::LocalAddr)?;
    tracing::info!(%peer_addr, "peer port open");
    let replication = Replication::new(
        broker_id,
        metrics.clone(),
        peers,
        session.controlplane().clone(),
        partitions.clone(),
    );
    Ok((Some(replication), Some(PeerServer { endpoint, issued })))
}

/// The peer port's server side, and the renewal of its certificate, to start once the
/// broker has.
struct PeerServer {
    endpoint: quinn::Endpoint,
    issued: Option<Issued>,
}

/// Opens object storage and every partition's log in the data directory, with the logs'
/// syncs timed into `metrics` and tier uploads yielding to those syncs.
async fn open_partitions(
    settings: &Settings,
    metrics: &Arc<Metrics>,
    lease: Option<Arc<Lease>>,
) -> Result<(Arc<Partitions>, Arc<Tiering>, Arc<SyncActivity>)> {
    let mut log = settings.log.clone();
    log.sync_observer = Some(fsync_observer(metrics.fsync_latency.clone()));
    log.batch_bytes_max = log.batch_bytes_max.min(settings.limits.max_batch_bytes);
    // Every log is in the data directory, on one disk, with the segments uploads read (and
    // a local-directory tier's objects): uploads wait for pauses in the logs' syncs.
    let sync_activity = Arc::new(SyncActivity::new());
    log.sync_activity = Some(sync_activity.clone());
    let tiering = open_tiering(settings, metrics).await?;
    let mut uploader = settings.tier.uploader.clone();
    uploader.yield_to = Some(YieldToSyncs::new(sync_activity.clone()));
    uploader.commit_window_ms = settings.tier.commit_window_ms();
    let (store, defaults) = (tiering.store().clone(), settings.stream_defaults);
    let partitions =
        Partitions::open(&settings.data_dir, log, defaults, store, uploader, lease).await?;
    Ok((Arc::new(partitions), Arc::new(tiering), sync_activity))
}

/// This broker's peer port, once open: its endpoint, the client side of connections to
/// peers, and the certificate the controlplane issued it (renewed while it runs), if it was
/// not given one.
struct PeerPort {
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    issued: Option<Issued>,
}

/// With a controlplane: registers this broker with it, and opens the peer port (and the
/// client side of peer connections) when one is configured. A peer port without a
/// controlplane is refused: nothing would tell the broker its peers.
///
/// The peer port's certificate names this broker: either the one given, whose broker a new
/// broker registers as (and an existing one must be), or one the controlplane issues after
/// registration.
async fn join_cluster(
    settings: &Settings,
    reset_key: &[u8],
    advertised: &Endpoint,
    metrics: &Arc<Metrics>,
    lease: Option<Arc<Lease>>,
) -> Result<(Option<Arc<Session>>, Option<PeerPort>)> {
    let opened = match (&settings.peer, &settings.controlplane) {
        (Some(peer), Some(_)) => Some(open_peer_port(peer, reset_key, metrics)?),
        (Some(_), None) => return Err(StartError::PeerWithoutControlplane),
        _ => None,
    };
    let Some(controlplane) = &settings.controlplane else {
        return Ok((None, None));
    };
    let mut controlplane = controlplane.clone();
    if controlplane.peer_endpoint.is_none()
        && let Some((endpoint, ..)) = &opened
    {
        let local = endpoint.local_addr().map_err(StartError::LocalAddr)?;
        controlplane.peer_endpoint = Some(local.to_string());
    }
    let named = opened
        .as_ref()
        .and_then(|(_, _, credentials)| credentials.broker());
    let lease = lease.unwrap_or_default();
    let session = Session::connect(
        &controlplane,
        &settings.data_dir,
        advertised.clone(),
        named,
        lease,
    )
    .await?;
    let session = Arc::new(session);
    let Some((endpoint, client, credentials)) = opened else {
        return Ok((Some(session), None));
    };
    let broker = session.broker_id();
    let issued = match credentials.broker() {
        Some(named) if named == broker => None,
        Some(named) => return Err(StartError::PeerCertificate { named, broker }),
        None => Some(
            Issued::obtain(
                session.controlplane().clone(),
                broker,
                &settings.data_dir,
                credentials,
            )
            .await?,
        ),
    };
    let port = PeerPort {
        endpoint,
        client,
        issued,
    };
    Ok((Some(session), Some(port)))
}

/// Binds the peer port with this broker's certificate, when it has one of its own (else an
/// empty one, until the controlplane issues it).
fn open_peer_port(
    peer: &PeerSettings,
    reset_key: &[u8],
    metrics: &Arc<Metrics>,
) -> Result<(quinn::Endpoint, quinn::ClientConfig, Arc<PeerCredentials>)> {
    let credentials = match &peer.tls.certificate {
        Some(paths) => tls::peer_credentials(paths)?,
        None => Arc::new(PeerCredentials::new(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))),
    };
    let config = tls::peer_server_config(credentials.clone(), &peer.tls.ca)?;
    let endpoint =
        crate::quic::endpoint(peer.listen, config, reset_key).map_err(StartError::PeerPort)?;
    let client = tls::peer_client_config(
        credentials.clone(),
        &peer.tls.ca,
        metrics.mismatch_counter(),
    )?;
    Ok((endpoint, client, credentials))
}

/// Opens object storage (the local directory by default) with its request latencies feeding
/// the metrics, and the tier cache under the data directory.
async fn open_tiering(settings: &Settings, metrics: &Arc<Metrics>) -> Result<Tiering> {
    let mut tier = settings.tier.clone();
    tier.url = match &settings.object_store {
        Some(url) => url.clone(),
        None => TierSettings::local_url(&settings.data_dir)?,
    };
    tier.reader.disk_cache = tiering::disk_cache(
        settings.data_dir.join("cache"),
        tiering::cache_disk_bytes(settings.tier_cache_disk_bytes, &tier.url),
        tier.reader.chunk_bytes,
    );
    let latency = metrics.tier_request_latency.clone();
    let observer = RequestObserver(Arc::new(move |kind: RequestKind, took: Duration| {
        latency
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .observe(took.as_secs_f64());
    }));
    Ok(Tiering::open(tier, observer).await?)
}

/// Every second: segment ages and local retention on every partition, then the disk's
/// high-water mark.
async fn maintain(
    partitions: Arc<Partitions>,
    disk: Arc<DiskWatch>,
    data_dir: PathBuf,
    high_water: DiskHighWater,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (partitions, disk, data_dir) = (partitions.clone(), disk.clone(), data_dir.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    partitions.maintain(Instant::now());
                    disk.check(high_water, &data_dir, partitions.local_bytes());
                }).await;
            }
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
        }
    }
}

impl Running {
    /// Stops accepting requests, then syncs and closes every log.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
        let _ = self.maintenance.await;
        let _ = self.tiering.await;
        for task in self.cluster {
            let _ = task.await;
        }
        if let Some(handle) = self.metrics_server {
            handle.abort();
        }
        let partitions = self.partitions.clone();
        tokio::task::spawn_blocking(move || partitions.close_all())
            .await
            .map_err(StartError::Close)?;
        tracing::info!("broker stopped; every log synced and closed");
        Ok(())
    }
}

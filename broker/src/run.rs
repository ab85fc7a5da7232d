//! Starting and stopping a broker: partitions, tiering, QUIC server, metrics, maintenance.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use floe_hot_log::{LogConfig, SyncActivity};
use floe_tier::{RequestKind, RequestObserver, YieldToSyncs};
use floe_wire::frame::ConnectionLimits;
use floe_wire::{BrokerId, Endpoint};
use tokio::sync::watch;

use crate::history_rate::HistoryRate;
use crate::managed::{self, ControlplaneSettings, Managed};
use crate::metrics::{FollowerLabels, KindLabels, Metrics, ScrapeHook, StreamLabels, mirror};
use crate::partitions::{Partitions, StreamDefaults, fsync_observer};
use crate::peer::{self, Peers};
use crate::replica::ReplicaContext;
use crate::server::{self, BrokerState};
use crate::tiering::{self, TierSettings, Tiering};
use crate::tls::{self, CertificatePaths};

/// When the broker stops accepting publishes to protect its disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskHighWater {
    /// The data directory's filesystem is this full (a fraction, e.g. 0.9).
    UsedFraction(f64),
    /// The partition logs hold this many bytes.
    LogBytes(u64),
}

impl FromStr for DiskHighWater {
    type Err = String;

    /// `90%` (of the filesystem) or a size such as `200GiB` (of the partition logs).
    fn from_str(s: &str) -> Result<DiskHighWater, String> {
        if let Some(percent) = s.trim().strip_suffix('%') {
            let value: f64 = percent
                .trim()
                .parse()
                .map_err(|_| format!("`{s}`: not a percentage"))?;
            if !(value > 0.0 && value <= 100.0) {
                return Err(format!("`{s}`: a percentage above 0 and at most 100"));
            }
            return Ok(DiskHighWater::UsedFraction(value / 100.0));
        }
        floe_wire::units::parse_size(s).map(DiskHighWater::LogBytes)
    }
}

impl DiskHighWater {
    /// Whether the mark is reached.
    fn reached(&self, data_dir: &Path, log_bytes: u64) -> bool {
        match *self {
            DiskHighWater::LogBytes(max) => log_bytes >= max,
            DiskHighWater::UsedFraction(fraction) => match rustix::fs::statvfs(data_dir) {
                Ok(fs) => used_fraction(fs.f_blocks, fs.f_bfree, fs.f_bavail) >= fraction,
                Err(e) => {
                    tracing::warn!(dir = %data_dir.display(), error = %e, "cannot read the filesystem's usage");
                    false
                }
            },
        }
    }
}

/// How full a filesystem is, as `df` reports it: the blocks in use over the blocks this
/// process could use (in use plus available to it). Blocks reserved for root, or otherwise
/// neither free to us nor in use, count for neither: on a filesystem with a large reserve,
/// `(total - available) / total` would call it full long before it is.
fn used_fraction(blocks: u64, free: u64, available: u64) -> f64 {
    let used = blocks.saturating_sub(free);
    let usable = used.saturating_add(available);
    if usable == 0 {
        return 0.0;
    }
    used as f64 / usable as f64
}

/// Everything a broker needs to start.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `None` disables the `/metrics` endpoint.
    pub metrics_listen: Option<SocketAddr>,
    pub certificates: CertificatePaths,
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
    /// Object storage: `None` is a directory under the data directory.
    pub object_store: Option<String>,
    pub tier: TierSettings,
    /// Bytes of the tier cache's disk half under the data directory (0: memory only);
    /// `None`: [`crate::tiering::cache_disk_bytes`] decides by the object store.
    pub tier_cache_disk_bytes: Option<usize>,
    pub stream_defaults: StreamDefaults,
    pub disk_high_water: DiskHighWater,
    /// Bytes per second this broker reads history at, for all consumers together: fetches
    /// of sealed segments or of the tier (see [`crate::history_rate`]). `None`: no cap.
    pub history_read_bytes_per_second: Option<u64>,
    /// The controlplane that assigns this broker its partitions; `None`: the local catalog
    /// alone, streams created over the client protocol.
    pub controlplane: Option<ControlplaneSettings>,
    /// The peer port, for replicated partitions (with a controlplane only).
    pub peer: Option<PeerSettings>,
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
            advertised: None,
            broker_id: 0,
            log: LogConfig {
                segment_bytes_max: DEFAULT_SEGMENT_BYTES,
                ..LogConfig::default()
            },
            limits: default_limits(),
            fetch_wait_max: Duration::from_secs(30),
            streams_per_connection: 256,
            fetch_bytes_per_connection: 32 * 1024 * 1024,
            object_store: None,
            tier: TierSettings::default(),
            tier_cache_disk_bytes: None,
            stream_defaults: StreamDefaults::default(),
            disk_high_water: DiskHighWater::UsedFraction(0.9),
            history_read_bytes_per_second: None,
            controlplane: None,
            peer: None,
        }
    }
}

/// The connection limits a broker announces by default.
pub fn default_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_frame_bytes: 16 * 1024 * 1024,
        max_batch_bytes: 8 * 1024 * 1024,
        max_list_entries: 10_000,
        max_in_flight_bytes: 64 * 1024 * 1024,
        // Every batch a producer may have in flight is one whose retry the log recognises.
        max_in_flight_batches: floe_hot_log::PRODUCER_BATCHES_REMEMBERED as u16,
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Running {
    pub quic_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    state: Arc<BrokerState>,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    maintenance: tokio::task::JoinHandle<()>,
    tiering: tokio::task::JoinHandle<()>,
    /// Heartbeats and assignments, when a controlplane manages this broker.
    controlplane: Vec<tokio::task::JoinHandle<()>>,
    metrics_server: Option<tokio::task::JoinHandle<()>>,
}

/// Opens the partitions and starts serving.
pub async fn start(settings: Settings) -> Result<Running> {
    settings
        .limits
        .check()
        .map_err(|e| anyhow::anyhow!("invalid connection limits: {e}"))?;
    let metrics = Metrics::new();
    let (partitions, tiering, sync_activity) = open_partitions(&settings, &metrics).await?;

    let transport =
        tls::transport_config(settings.streams_per_connection, Duration::from_secs(30))?;
    let config = tls::server_config(&settings.certificates, transport)?;
    let reset_key = server::load_reset_key(&settings.data_dir)?;
    let endpoint = server::endpoint(settings.listen, config, &reset_key)?;
    let quic_addr = endpoint.local_addr()?;
    let advertised = settings
        .advertised
        .clone()
        .unwrap_or_else(|| quic_addr.to_string());
    let advertised =
        Endpoint::new(advertised).context("the advertised address is not host:port")?;
    let (managed, peer_endpoint) = join_cluster(&settings, &reset_key, &advertised).await?;
    let broker_id = managed
        .as_ref()
        .map_or(BrokerId::new(settings.broker_id), |m| m.broker_id);

    let (shutdown, shutdown_rx) = watch::channel(false);
    let (replication, peer_server) = replication_context(
        peer_endpoint,
        managed.as_ref(),
        broker_id,
        &metrics,
        &shutdown_rx,
    )?;
    let state = Arc::new(BrokerState {
        replication,
        partitions,
        tiering,
        disk_high_water: std::sync::atomic::AtomicBool::new(false),
        metrics: metrics.clone(),
        limits: settings.limits,
        broker_id,
        managed,
        advertised,
        fetch_wait_max: settings.fetch_wait_max,
        shutdown: shutdown_rx,
        fetch_bytes_per_connection: settings.fetch_bytes_per_connection.max(1),
        history_rate: HistoryRate::new(settings.history_read_bytes_per_second),
    });
    let (metrics_addr, metrics_server) = match settings.metrics_listen {
        Some(addr) => {
            let (bound, handle) = crate::metrics::serve(metrics.clone(), addr).await?;
            (Some(bound), Some(handle))
        }
        None => (None, None),
    };
    metrics.set_scrape_hook(scrape_hook(Arc::downgrade(&state), sync_activity));
    let Tasks {
        server,
        maintenance,
        tiering,
        controlplane,
    } = spawn_tasks(&state, &settings, endpoint, peer_server);
    tracing::info!(%quic_addr, ?metrics_addr, data_dir = %settings.data_dir.display(), "broker serving");
    Ok(Running {
        quic_addr,
        metrics_addr,
        state,
        shutdown,
        server,
        maintenance,
        tiering,
        controlplane,
        metrics_server,
    })
}

/// A running broker's tasks.
struct Tasks {
    server: tokio::task::JoinHandle<()>,
    maintenance: tokio::task::JoinHandle<()>,
    tiering: tokio::task::JoinHandle<()>,
    controlplane: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts serving the client port (and the peer port, if any), and the maintenance, tiering
/// and controlplane tasks.
fn spawn_tasks(
    state: &Arc<BrokerState>,
    settings: &Settings,
    endpoint: quinn::Endpoint,
    peer_server: Option<quinn::Endpoint>,
) -> Tasks {
    let server = tokio::spawn(server::serve(endpoint, state.clone()));
    let maintenance = tokio::spawn(maintain(
        state.clone(),
        settings.data_dir.clone(),
        settings.disk_high_water,
    ));
    let tiering = tokio::spawn(tiering::run(state.clone()));
    let mut controlplane = vec![
        tokio::spawn(managed::heartbeat(state.clone())),
        tokio::spawn(managed::follow_assignments(state.clone())),
    ];
    if let Some(endpoint) = peer_server {
        controlplane.push(tokio::spawn(peer::serve(endpoint, state.clone())));
    }
    Tasks {
        server,
        maintenance,
        tiering,
        controlplane,
    }
}

/// What replicated partitions need, on a managed broker with a peer port: the peers (the
/// port's server side is returned to be served once the broker's state exists), and the
/// controlplane link. `None` on any other broker.
fn replication_context(
    peer_endpoint: Option<(quinn::Endpoint, quinn::ClientConfig)>,
    managed: Option<&Managed>,
    broker_id: BrokerId,
    metrics: &Arc<Metrics>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Option<ReplicaContext>, Option<quinn::Endpoint>)> {
    let (Some((endpoint, client)), Some(managed)) = (peer_endpoint, managed) else {
        return Ok((None, None));
    };
    let peers = Arc::new(Peers::new(
        broker_id,
        endpoint.clone(),
        client,
        managed.controlplane.clone(),
        shutdown.clone(),
    ));
    tracing::info!(peer_addr = %endpoint.local_addr()?, "peer port open");
    let context = ReplicaContext {
        me: broker_id,
        metrics: metrics.clone(),
        peers,
        controlplane: managed.controlplane.clone(),
    };
    Ok((Some(context), Some(endpoint)))
}

/// Opens object storage and every partition's log in the data directory, with the logs'
/// syncs timed into `metrics` and tier uploads yielding to those syncs.
async fn open_partitions(
    settings: &Settings,
    metrics: &Arc<Metrics>,
) -> Result<(Partitions, Tiering, Arc<SyncActivity>)> {
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
    let (store, defaults) = (tiering.store.clone(), settings.stream_defaults);
    let partitions = Partitions::open(&settings.data_dir, log, defaults, store, uploader).await?;
    Ok((partitions, tiering, sync_activity))
}

/// With a controlplane: registers this broker with it, and opens the peer port (and the
/// client side of peer connections) when one is configured. A peer port without a
/// controlplane is refused: nothing would tell the broker its peers.
async fn join_cluster(
    settings: &Settings,
    reset_key: &[u8],
    advertised: &Endpoint,
) -> Result<(
    Option<Managed>,
    Option<(quinn::Endpoint, quinn::ClientConfig)>,
)> {
    let peer_endpoint = match (&settings.peer, &settings.controlplane) {
        (Some(peer), Some(_)) => {
            let config = tls::peer_server_config(&peer.tls)?;
            let endpoint = server::endpoint(peer.listen, config, reset_key)
                .context("opening the peer port")?;
            Some((endpoint, tls::peer_client_config(&peer.tls)?))
        }
        (Some(_), None) => anyhow::bail!("a peer port needs a controlplane"),
        _ => None,
    };
    let managed = match &settings.controlplane {
        Some(controlplane) => {
            let mut controlplane = controlplane.clone();
            if controlplane.peer_endpoint.is_none()
                && let Some((endpoint, _)) = &peer_endpoint
            {
                controlplane.peer_endpoint = Some(endpoint.local_addr()?.to_string());
            }
            Some(Managed::connect(&controlplane, &settings.data_dir, advertised.clone()).await?)
        }
        None => None,
    };
    Ok((managed, peer_endpoint))
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
    Tiering::open(tier, observer).await
}

/// Updates the gauges and mirrored counters from the broker's state before a scrape.
fn scrape_hook(state: std::sync::Weak<BrokerState>, syncs: Arc<SyncActivity>) -> ScrapeHook {
    ScrapeHook(Box::new(move |m: &Metrics| {
        let Some(state) = state.upgrade() else {
            return;
        };
        mirror(&m.tier_upload_yield_seconds, syncs.waited().as_secs_f64());
        let mut backlog: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        let mut local_bytes = 0;
        for p in state.partitions.all() {
            let b = p.upload_backlog();
            let entry = backlog.entry(p.stream.clone()).or_default();
            entry.0 += b.segments;
            entry.1 += b.bytes;
            local_bytes += p.log.size_bytes();
        }
        m.tier_backlog_segments.clear();
        m.tier_backlog_bytes.clear();
        for (stream, (segments, bytes)) in backlog {
            let labels = StreamLabels { stream };
            m.tier_backlog_segments
                .get_or_create(&labels)
                .set(i64::try_from(segments).unwrap_or(i64::MAX));
            m.tier_backlog_bytes
                .get_or_create(&labels)
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        m.local_log_bytes
            .set(i64::try_from(local_bytes).unwrap_or(i64::MAX));
        m.replication_lag.clear();
        for p in state.partitions.all() {
            let Some(replica) = p.replica() else { continue };
            let end = p.log.log_end().get();
            for (follower, acked) in replica.follower_progress() {
                m.replication_lag
                    .get_or_create(&FollowerLabels {
                        stream: p.stream.clone(),
                        partition: p.id,
                        follower,
                    })
                    .set(i64::try_from(end.saturating_sub(acked)).unwrap_or(i64::MAX));
            }
        }
        m.disk_high_water
            .set(i64::from(state.disk_high_water.load(Ordering::Relaxed)));
        m.mirror_tier(
            &state.tiering.store.metrics().snapshot(),
            state.tiering.reader.cache_memory_bytes(),
        );
    }))
}

async fn maintain(state: Arc<BrokerState>, data_dir: PathBuf, high_water: DiskHighWater) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let state = state.clone();
                let data_dir = data_dir.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    state.partitions.maintain(Instant::now());
                    let reached = high_water.reached(&data_dir, state.partitions.local_bytes());
                    let was = state.disk_high_water.swap(reached, Ordering::Relaxed);
                    if reached != was {
                        if reached {
                            tracing::warn!(?high_water, "disk high-water mark reached: refusing publishes until tiering frees space");
                        } else {
                            tracing::info!("disk below its high-water mark: accepting publishes again");
                        }
                    }
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
        for task in self.controlplane {
            let _ = task.await;
        }
        if let Some(handle) = self.metrics_server {
            handle.abort();
        }
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || state.partitions.close_all()).await?;
        tracing::info!("broker stopped; every log synced and closed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fullness_is_used_over_usable_like_df() {
        // 252 blocks, 57 in use, 195 free of which only 35 are ours: 62% full, as df says.
        let fraction = used_fraction(252, 195, 35);
        assert!((fraction - 57.0 / 92.0).abs() < 1e-9, "{fraction}");
        assert_eq!(used_fraction(0, 0, 0), 0.0);
        assert_eq!(used_fraction(100, 0, 0), 1.0);
        assert_eq!(
            "90%".parse::<DiskHighWater>(),
            Ok(DiskHighWater::UsedFraction(0.9))
        );
    }
}

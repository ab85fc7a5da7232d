//! Starting and stopping a broker: partitions, QUIC server, metrics, maintenance.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use floe_hot_log::LogConfig;
use floe_wire::frame::ConnectionLimits;
use floe_wire::{BrokerId, Endpoint};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::partitions::{Partitions, fsync_observer};
use crate::server::{self, BrokerState};
use crate::tls::{self, CertificatePaths};

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
}

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
            log: LogConfig::default(),
            limits: default_limits(),
            fetch_wait_max: Duration::from_secs(30),
            streams_per_connection: 256,
            fetch_bytes_per_connection: 32 * 1024 * 1024,
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
    metrics_server: Option<tokio::task::JoinHandle<()>>,
}

/// Opens the partitions and starts serving.
pub async fn start(settings: Settings) -> Result<Running> {
    settings
        .limits
        .check()
        .map_err(|e| anyhow::anyhow!("invalid connection limits: {e}"))?;
    let metrics = Metrics::new();
    let mut log = settings.log.clone();
    log.sync_observer = Some(fsync_observer(metrics.fsync_latency.clone()));
    log.batch_bytes_max = log.batch_bytes_max.min(settings.limits.max_batch_bytes);
    let data_dir = settings.data_dir.clone();
    let partitions =
        tokio::task::spawn_blocking(move || Partitions::open(&data_dir, log)).await??;

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

    let (shutdown, shutdown_rx) = watch::channel(false);
    let state = Arc::new(BrokerState {
        partitions,
        metrics: metrics.clone(),
        limits: settings.limits,
        broker_id: BrokerId::new(settings.broker_id),
        advertised,
        fetch_wait_max: settings.fetch_wait_max,
        shutdown: shutdown_rx,
        fetch_bytes_per_connection: settings.fetch_bytes_per_connection.max(1),
    });
    let (metrics_addr, metrics_server) = match settings.metrics_listen {
        Some(addr) => {
            let (bound, handle) = crate::metrics::serve(metrics, addr).await?;
            (Some(bound), Some(handle))
        }
        None => (None, None),
    };
    let server = tokio::spawn(server::serve(endpoint, state.clone()));
    let maintenance = tokio::spawn(maintain(state.clone()));
    tracing::info!(%quic_addr, ?metrics_addr, data_dir = %settings.data_dir.display(), "broker serving");
    Ok(Running {
        quic_addr,
        metrics_addr,
        state,
        shutdown,
        server,
        maintenance,
        metrics_server,
    })
}

async fn maintain(state: Arc<BrokerState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let state = state.clone();
                let _ = tokio::task::spawn_blocking(move || state.partitions.maintain(Instant::now())).await;
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
        if let Some(handle) = self.metrics_server {
            handle.abort();
        }
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || state.partitions.close_all()).await?;
        tracing::info!("broker stopped; every log synced and closed");
        Ok(())
    }
}

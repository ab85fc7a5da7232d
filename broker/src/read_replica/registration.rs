//! The read replica and the controlplane: it registers (under the id its starter chose, if
//! any), then heartbeats with its load; the controlplane's answer says whether it is `live`
//! or `draining`. A lapsed lease (the controlplane was away) is answered by registering
//! again. On shutdown it leaves the list.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floe_client::rest::{Controlplane, RestError};
use floe_wire::Endpoint;
use floe_wire::admin::{
    ReadReplicaHeartbeat, ReadReplicaState, RegisterReadReplicaRequest, RegisterReadReplicaResponse,
};
use hdrhistogram::Histogram;
use tokio::sync::watch;

use super::ReadReplica;

/// How long registration keeps trying before the replica gives up starting.
const REGISTER_PATIENCE: Duration = Duration::from_secs(60);

/// What the replica served since the last heartbeat.
#[derive(Debug)]
pub struct Load {
    bytes: AtomicU64,
    relayed: AtomicU64,
    /// Fetch latencies of the interval, microseconds: every fetch counts, in a histogram of
    /// fixed size (three significant digits up to an hour).
    latencies: Mutex<Histogram<u64>>,
}

/// The longest latency the histogram tells apart, in microseconds; longer ones count as it.
const LATENCY_MAX_MICROS: u64 = 3_600_000_000;

impl Default for Load {
    fn default() -> Self {
        Load {
            bytes: AtomicU64::new(0),
            relayed: AtomicU64::new(0),
            latencies: Mutex::new(
                Histogram::new_with_bounds(1, LATENCY_MAX_MICROS, 3)
                    .expect("constant bounds are valid"),
            ),
        }
    }
}

impl Load {
    pub fn served(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A fetch passed to the partition's leader.
    pub fn relayed(&self) {
        self.relayed.fetch_add(1, Ordering::Relaxed);
    }

    /// Fetches relayed to leaders since the replica started.
    pub fn relayed_total(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }

    pub fn latency(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut latencies = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        latencies.saturating_record(micros.clamp(1, LATENCY_MAX_MICROS));
    }

    /// The interval's bytes and p99 latency in microseconds (0 without fetches), and a fresh
    /// interval.
    fn take(&self) -> (u64, u64) {
        let bytes = self.bytes.swap(0, Ordering::Relaxed);
        let mut latencies = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        let p99 = if latencies.is_empty() {
            0
        } else {
            latencies.value_at_quantile(0.99)
        };
        latencies.reset();
        (bytes, p99)
    }
}

/// Registers `id` (or a new id) at `endpoint`, retrying while the controlplane is away.
pub async fn register(
    rest: &Controlplane,
    id: Option<String>,
    endpoint: &Endpoint,
) -> Result<RegisterReadReplicaResponse, super::ReadReplicaError> {
    let request = RegisterReadReplicaRequest {
        replica_id: id,
        endpoint: endpoint.clone(),
        zone: None,
        build: Some(floe_wire::admin::Build::current()),
    };
    let deadline = Instant::now() + REGISTER_PATIENCE;
    loop {
        match rest.register_read_replica(&request).await {
            Ok(registered) => return Ok(registered),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tracing::warn!(error = %e, "registering with the controlplane; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(super::ReadReplicaError::Register(e)),
        }
    }
}

/// Heartbeats until shutdown, then leaves the controlplane's list.
pub async fn heartbeat(
    state: Arc<ReadReplica>,
    rest: Controlplane,
    mut registered: RegisterReadReplicaResponse,
    endpoint: Endpoint,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = Instant::now();
    let mut draining = false;
    let mut seen = (0u64, 0u64);
    loop {
        let interval = Duration::from_millis(registered.heartbeat_interval_ms.max(50));
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
        state.forget_idle();
        let (bytes, p99) = state.load.take();
        let elapsed = last.elapsed().as_secs_f64().max(0.001);
        last = Instant::now();
        // The interval's cache hit ratio, by chunk lookups (1000 when nothing was looked up).
        let snapshot = state.reader.store().metrics().snapshot();
        let hits = snapshot.chunk_hits - seen.0;
        let lookups = hits + (snapshot.chunk_misses - seen.1);
        seen = (snapshot.chunk_hits, snapshot.chunk_misses);
        let hit_ratio = (hits * 1000)
            .checked_div(lookups)
            .map_or(1000, |r| u32::try_from(r).unwrap_or(1000));
        let report = ReadReplicaHeartbeat {
            bytes_served_per_second: (bytes as f64 / elapsed) as u64,
            // Each consumer holds a connection; the brokers' own do not count.
            consumers: u32::try_from(state.metrics.connections.get().max(0)).unwrap_or(u32::MAX),
            fetch_latency_p99_us: p99,
            cache_hit_ratio_permille: hit_ratio,
        };
        match rest
            .read_replica_heartbeat(&registered.replica_id, &report)
            .await
        {
            Ok(answer) => {
                let now_draining = answer.state == ReadReplicaState::Draining;
                if now_draining != draining {
                    tracing::info!(replica_id = %registered.replica_id, state = ?answer.state, "controlplane state");
                    draining = now_draining;
                }
            }
            Err(
                e @ RestError::Api {
                    status: 404 | 409, ..
                },
            ) => {
                // The lease lapsed (the controlplane did not hear from us): register again.
                tracing::warn!(error = %e, "lease lost; registering again");
                match register(&rest, Some(registered.replica_id.clone()), &endpoint).await {
                    Ok(again) => registered = again,
                    Err(e) => tracing::error!(error = %e, "registering again failed"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
    if let Err(e) = rest.remove_read_replica(&registered.replica_id).await {
        tracing::warn!(error = %e, "leaving the controlplane's list failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_counts_every_fetch_of_the_interval_and_starts_again() {
        let load = Load::default();
        assert_eq!(load.take(), (0, 0));
        for _ in 0..990 {
            load.latency(Duration::from_micros(100));
        }
        for _ in 0..20_000 {
            load.latency(Duration::from_millis(50));
        }
        load.served(4096);
        let (bytes, p99) = load.take();
        assert_eq!(bytes, 4096);
        // Past the first 10,000 samples the slow fetches dominate: the p99 is theirs.
        assert!((49_900..=50_100).contains(&p99), "{p99}");
        assert_eq!(load.take(), (0, 0), "a fresh interval");
    }
}

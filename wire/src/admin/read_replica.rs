//! Read replicas: their registration, heartbeats and listing, and the policy that scales
//! them.

use serde::{Deserialize, Serialize};

use crate::Endpoint;
use crate::admin::Build;

/// The longest read replica id, in bytes.
pub const MAX_READ_REPLICA_ID_LEN: usize = 64;

/// Whether `id` is a valid read replica id: 1 to [`MAX_READ_REPLICA_ID_LEN`] bytes of
/// `[A-Za-z0-9._-]`.
pub fn valid_read_replica_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_READ_REPLICA_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// One read replica in `GET /v1/read-replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadReplicaInfo {
    pub replica_id: String,
    pub endpoint: Endpoint,
    pub zone: Option<String>,
    pub state: ReadReplicaState,
    /// Milliseconds since the Unix epoch.
    pub lease_expires_at_ms: u64,
    /// Load as last reported.
    pub bytes_served_per_second: u64,
    pub consumers: u32,
    /// The 99th percentile of fetch latency over the last report interval, microseconds.
    #[serde(default)]
    pub fetch_latency_p99_us: u64,
    /// Share of fetched bytes served from the replica's cache, in thousandths (0–1000).
    #[serde(default)]
    pub cache_hit_ratio_permille: u32,
    /// The build it registered with (absent for a read replica older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
}

/// `POST /v1/read-replicas`: a read replica announces itself and takes a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterReadReplicaRequest {
    /// The id to register under: the one the process was started with (a driver chose it),
    /// or the one it had before. 1 to 64 bytes of `[A-Za-z0-9._-]`. The controlplane assigns
    /// one (`r-<n>`) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_id: Option<String>,
    /// Where clients reach it (QUIC).
    pub endpoint: Endpoint,
    /// A failure domain (e.g. an availability zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The read replica's build, for operators (`floe version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
}

/// The replica's id and lease terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterReadReplicaResponse {
    pub replica_id: String,
    /// The lease lapses this long after the last heartbeat.
    pub lease_ms: u64,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: u64,
}

/// `POST /v1/read-replicas/{id}/heartbeat`: renews the lease and reports the replica's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadReplicaHeartbeat {
    /// Bytes sent to consumers per second, averaged over the last interval.
    #[serde(default)]
    pub bytes_served_per_second: u64,
    /// Consumers reading from this replica now.
    #[serde(default)]
    pub consumers: u32,
    /// The 99th percentile of fetch latency over the last interval, microseconds.
    #[serde(default)]
    pub fetch_latency_p99_us: u64,
    /// Share of fetched bytes served from the cache, in thousandths (0–1000).
    #[serde(default)]
    pub cache_hit_ratio_permille: u32,
}

/// The renewed lease and the state the controlplane holds for the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadReplicaHeartbeatResponse {
    /// `live`, or `draining`: clients send it no new readers, and it will be stopped.
    pub state: ReadReplicaState,
    pub lease_ms: u64,
}

/// A read replica's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadReplicaState {
    /// Holds a lease; clients route readers to it.
    Live,
    /// Holds a lease; clients send it no new readers. It is stopped once its consumers
    /// have left (or after a drain timeout).
    Draining,
    /// Its lease lapsed; clients move its readers to other replicas. It must register
    /// again; the controlplane forgets it after a while.
    Dead,
}

/// `GET /v1/read-replicas`, ordered by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadReplicaList {
    pub replicas: Vec<ReadReplicaInfo>,
}

/// `GET` and `PUT /v1/scaling-policy`: how many read replicas the autoscaler keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalingPolicy {
    /// At least this many replicas, even when idle.
    pub min_replicas: u32,
    /// Never more; at least `min_replicas`.
    pub max_replicas: u32,
    /// Bytes per second one replica should serve; 0: not a scaling signal.
    pub target_bytes_per_second: u64,
    /// Consumers one replica should serve; 0: not a scaling signal.
    pub target_consumers: u32,
    /// Load must differ from the target by more than this before the count changes, 0–100.
    pub hysteresis_percent: u32,
    /// Quiet time after scaling up before the next change.
    pub scale_up_cooldown_ms: u64,
    /// Quiet time after scaling down before the next change.
    pub scale_down_cooldown_ms: u64,
}

impl Default for ScalingPolicy {
    fn default() -> ScalingPolicy {
        ScalingPolicy {
            min_replicas: 0,
            max_replicas: 8,
            target_bytes_per_second: 100 * 1024 * 1024,
            target_consumers: 1000,
            hysteresis_percent: 20,
            scale_up_cooldown_ms: 60_000,
            scale_down_cooldown_ms: 300_000,
        }
    }
}

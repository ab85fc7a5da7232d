//! Read replicas and the policy that scales them.

use serde::{Deserialize, Serialize};

use crate::Endpoint;

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
}

/// A read replica's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadReplicaState {
    Live,
    Draining,
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
    /// Bytes per second one replica should serve.
    pub target_bytes_per_second: u64,
    /// Consumers one replica should serve.
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

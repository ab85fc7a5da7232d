//! Streams: create, list, describe, alter retention.

use serde::{Deserialize, Serialize};

use crate::{AckMode, BrokerId, LeaderEpoch, PartitionId, StreamName};

/// `POST /v1/streams`. Absent settings take the controlplane's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateStreamRequest {
    pub name: StreamName,
    /// At least 1; fixed for the stream's life.
    pub partitions: u32,
    /// Replicas per partition, at least 1; the controlplane's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    /// `quorum` when absent and the replication factor is above 1, else `leader`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_mode: Option<AckMode>,
    #[serde(default)]
    pub segment: SegmentSettings,
    #[serde(default)]
    pub retention: RetentionSettings,
}

/// The largest segment a broker's log can hold: its indexes address positions in 32 bits.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 31;

/// When a segment is sealed. An absent value takes the broker's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentSettings {
    /// Sealed once it holds this many bytes; at most [`MAX_SEGMENT_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Sealed once it is this old, so tiering never lags more than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
}

/// How long data is kept, per partition. Local retention applies to the hot log (an absent
/// value takes the broker's default); tier retention to object storage (absent: forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_ms: Option<u64>,
}

/// `PUT /v1/streams/{name}/retention`: replaces the stream's retention settings.
pub type AlterRetentionRequest = RetentionSettings;

/// A stream's settings as stored, defaults resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    pub partitions: u32,
    pub replication_factor: u32,
    pub ack_mode: AckMode,
    pub segment: SegmentSettings,
    pub retention: RetentionSettings,
}

/// One stream in `GET /v1/streams`, and the answer to create and alter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    pub name: StreamName,
    pub config: StreamConfig,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// `GET /v1/streams`, ordered by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamList {
    pub streams: Vec<StreamInfo>,
}

/// `GET /v1/streams/{name}`: the stream and every partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamDescription {
    pub name: StreamName,
    pub config: StreamConfig,
    pub created_at_ms: u64,
    /// Ordered by partition.
    pub partitions: Vec<PartitionDescription>,
}

/// A half-open range of offsets, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffsetRange {
    pub start: u64,
    pub end: u64,
}

/// One partition: where it lives and what its leader last reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDescription {
    pub partition: PartitionId,
    /// The replica set, preferred leader first; empty while no broker is live.
    pub replicas: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    /// The leadership term; bumped by every change of leader or replica set.
    pub epoch: LeaderEpoch,
    /// An election for `epoch` runs (`leader` is then absent); only for replicated
    /// partitions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub electing: bool,
    /// Offsets in the leader's hot log, as last reported.
    pub hot: Option<OffsetRange>,
    /// Offsets in object storage, as last reported.
    pub tier: Option<OffsetRange>,
    /// Bytes in the leader's hot log.
    pub bytes: Option<u64>,
    /// Sealed bytes waiting to be uploaded to object storage.
    pub upload_backlog_bytes: Option<u64>,
    /// The committed end consumers read up to, as last reported.
    #[serde(default)]
    pub high_watermark: Option<u64>,
    /// How far each follower lags behind the leader's log end, as last reported; empty for
    /// an unreplicated partition.
    #[serde(default)]
    pub replica_lag: Vec<crate::admin::ReplicaLag>,
    /// While the replica set changes (a member on a dead or draining broker is replaced):
    /// the set being left; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_replicas: Vec<BrokerId>,
}

impl SegmentSettings {
    /// The segment half of the client protocol's stream settings.
    pub fn from_client(settings: &crate::frame::StreamSettings) -> SegmentSettings {
        SegmentSettings {
            bytes: settings.segment_bytes,
            age_ms: settings.segment_age_ms,
        }
    }
}

impl RetentionSettings {
    /// The retention half of the client protocol's stream settings (its total retention is
    /// the REST API's tier retention).
    pub fn from_client(settings: &crate::frame::StreamSettings) -> RetentionSettings {
        RetentionSettings {
            local_bytes: settings.local_retention_bytes,
            local_ms: settings.local_retention_ms,
            tier_bytes: settings.retention_bytes,
            tier_ms: settings.retention_ms,
        }
    }
}

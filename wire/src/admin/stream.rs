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

/// A change of one setting: absent keeps it, `null` returns it to its default (the broker's,
/// or no limit), a value sets it. JSON merge-patch semantics (RFC 7396).
pub type Change<T> = Option<Option<T>>;

/// Reads a field that is present: `null` as `Some(None)`, a value as `Some(Some(v))`; an
/// absent field stays `None` through `#[serde(default)]`.
fn present<'de, D, T>(deserializer: D) -> Result<Change<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `PATCH /v1/streams/{name}`: the settings to change on a live stream; every field is
/// optional and an absent one keeps its value. `partitions` and `replication_factor` are
/// fixed for a stream's life; naming them is refused with the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlterStreamRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_mode: Option<AckMode>,
    #[serde(default, skip_serializing_if = "SegmentChange::is_empty")]
    pub segment: SegmentChange,
    #[serde(default, skip_serializing_if = "RetentionChange::is_empty")]
    pub retention: RetentionChange,
    /// Refused: records are placed by key over the partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// Refused: a stream keeps its replication factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
}

/// Changes of a stream's segment settings; see [`Change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentChange {
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes: Change<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub age_ms: Change<u64>,
}

/// Changes of a stream's retention settings; see [`Change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionChange {
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_bytes: Change<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_ms: Change<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tier_bytes: Change<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tier_ms: Change<u64>,
}

fn apply<T: Copy>(setting: &mut Option<T>, change: Change<T>) {
    if let Some(value) = change {
        *setting = value;
    }
}

impl SegmentChange {
    pub fn is_empty(&self) -> bool {
        *self == SegmentChange::default()
    }
}

impl RetentionChange {
    pub fn is_empty(&self) -> bool {
        *self == RetentionChange::default()
    }
}

impl AlterStreamRequest {
    /// Whether the request changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == AlterStreamRequest::default()
    }

    /// `config` with the changes made (the refused fields are not looked at).
    pub fn apply(&self, config: &StreamConfig) -> StreamConfig {
        let mut out = *config;
        if let Some(mode) = self.ack_mode {
            out.ack_mode = mode;
        }
        apply(&mut out.segment.bytes, self.segment.bytes);
        apply(&mut out.segment.age_ms, self.segment.age_ms);
        let retention = &self.retention;
        apply(&mut out.retention.local_bytes, retention.local_bytes);
        apply(&mut out.retention.local_ms, retention.local_ms);
        apply(&mut out.retention.tier_bytes, retention.tier_bytes);
        apply(&mut out.retention.tier_ms, retention.tier_ms);
        out
    }
}

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
    /// Replicas whose brokers hold the partition in the `corrupt` state (damaged data not
    /// cut; it refuses publishes and fetches there until an operator repairs it), as their
    /// last heartbeats reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corrupt: Vec<crate::admin::CorruptReplica>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alteration_keeps_what_is_absent_and_clears_what_is_null() {
        let request: AlterStreamRequest = serde_json::from_str(
            r#"{"ack_mode": "quorum", "segment": {"bytes": 1024},
                "retention": {"tier_ms": null, "local_bytes": 4096}}"#,
        )
        .expect("a request");
        assert_eq!(request.segment.bytes, Some(Some(1024)));
        assert_eq!(request.segment.age_ms, None);
        assert_eq!(request.retention.tier_ms, Some(None));
        let before = StreamConfig {
            partitions: 3,
            replication_factor: 3,
            ack_mode: AckMode::Leader,
            segment: SegmentSettings {
                bytes: None,
                age_ms: Some(60_000),
            },
            retention: RetentionSettings {
                local_bytes: None,
                local_ms: Some(1),
                tier_bytes: None,
                tier_ms: Some(2),
            },
        };
        let after = request.apply(&before);
        assert_eq!(after.ack_mode, AckMode::Quorum);
        assert_eq!(after.segment.bytes, Some(1024));
        assert_eq!(after.segment.age_ms, Some(60_000));
        assert_eq!(after.retention.local_bytes, Some(4096));
        assert_eq!(after.retention.local_ms, Some(1));
        assert_eq!(after.retention.tier_ms, None);
        // The same request again, through JSON: `null` survives the round trip.
        let text = serde_json::to_string(&request).expect("encodes");
        assert_eq!(
            serde_json::from_str::<AlterStreamRequest>(&text).expect("decodes"),
            request
        );
        assert!(AlterStreamRequest::default().is_empty());
        assert!(serde_json::from_str::<AlterStreamRequest>(r#"{"colour": 1}"#).is_err());
    }
}

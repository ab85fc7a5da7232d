//! Consumer groups and their committed offsets.

use serde::{Deserialize, Serialize};

use crate::{PartitionId, StreamName};

/// One group in `GET /v1/groups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSummary {
    pub group: String,
    /// Streams the group has committed offsets for.
    pub streams: u32,
    /// Partitions the group has committed offsets for.
    pub partitions: u32,
}

/// `GET /v1/groups`, ordered by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupList {
    pub groups: Vec<GroupSummary>,
}

/// `GET /v1/groups/{group}/offsets`, ordered by stream then partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOffsets {
    pub group: String,
    pub offsets: Vec<CommittedOffset>,
}

/// The next offset the group will read in one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub offset: u64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
}

/// `POST /v1/groups/{group}/offsets`: commits offsets, all or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitOffsetsRequest {
    pub offsets: Vec<OffsetCommit>,
}

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffsetCommit {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub offset: u64,
}

/// `POST /v1/groups/{group}/reset`: moves the group's offsets in one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetOffsetsRequest {
    pub stream: StreamName,
    /// The partitions to reset; every partition of the stream when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<PartitionId>>,
    pub to: ResetTarget,
}

/// Where a reset moves the offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResetTarget {
    /// The oldest offset still kept (tiered or hot), 0 if none was reported.
    Earliest,
    /// The end of the hot log as last reported by the leader.
    Latest,
    /// This offset.
    Offset { offset: u64 },
}

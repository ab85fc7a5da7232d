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
    /// Members live now (0 for a group that only has offsets).
    #[serde(default)]
    pub members: u32,
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
    /// The member committing, and the generation it last heard. Required while the group
    /// has live members; a commit without it is refused then (`group_not_empty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberGeneration>,
}

/// A member's id and the generation of the group it last heard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberGeneration {
    pub member_id: String,
    pub generation: u64,
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
    /// Reset even while the group has live members (they keep reading from where they
    /// are, and their next commits overwrite the reset).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
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

/// One partition of one stream, as groups assign them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupPartition {
    pub stream: StreamName,
    pub partition: PartitionId,
}

/// `POST /v1/groups/{group}/members`: joins the group as a new member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinGroupRequest {
    /// The streams the member reads; each must exist.
    pub streams: Vec<StreamName>,
    /// The member is removed this long after its last heartbeat (default 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_timeout_ms: Option<u64>,
    /// A label for people: shown by `floe group describe` (e.g. host and process id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
}

/// `POST /v1/groups/{group}/members/{member}/heartbeat`: the member is alive, reads
/// `owned`, and asks what to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberHeartbeat {
    /// The partitions the member still reads. A partition it was told to give up and no
    /// longer lists is free for its next owner: commit before leaving it out.
    pub owned: Vec<GroupPartition>,
    /// Answer at once when there is something to change, else wait up to this long for a
    /// change (0: answer at once; at most a third of the session timeout).
    #[serde(default)]
    pub wait_ms: u64,
}

/// The answer to a join and to every heartbeat: what the member may read now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    pub group: String,
    pub member_id: String,
    /// The group's generation: it grows with every change of the assignment. A commit must
    /// carry the newest generation this member has been told.
    pub generation: u64,
    pub session_timeout_ms: u64,
    /// Heartbeat at least this often.
    pub heartbeat_interval_ms: u64,
    /// The partitions this member reads now. One it reads that is not here must be
    /// committed and given up.
    pub assignment: Vec<GroupPartition>,
    /// Partitions that will be this member's once their present owner gives them up.
    pub pending: Vec<GroupPartition>,
}

/// A group's state as `GET /v1/groups/{group}` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    /// No live members.
    Empty,
    /// Every partition is read by the member it is assigned to.
    Stable,
    /// Some partitions wait for their present owner to give them up.
    Rebalancing,
}

/// `GET /v1/groups/{group}`: members, and per partition where the group is and how far
/// behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDescription {
    pub group: String,
    pub state: GroupState,
    pub generation: u64,
    pub members: Vec<GroupMember>,
    /// Every partition of the streams the members read or the group committed in, ordered
    /// by stream and partition.
    pub partitions: Vec<GroupPartitionState>,
}

/// One live member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub member_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    pub streams: Vec<StreamName>,
    /// The partitions it reads now.
    pub partitions: Vec<GroupPartition>,
    pub session_timeout_ms: u64,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: u64,
}

/// One partition of a group: committed offset, high watermark and lag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPartitionState {
    pub stream: StreamName,
    pub partition: PartitionId,
    /// The next offset the group will read; none before its first commit.
    pub committed: Option<u64>,
    /// The end of the partition's log as its leader last reported it.
    pub high_watermark: Option<u64>,
    /// `high_watermark - committed` (the whole log before a first commit); none while the
    /// end is unknown.
    pub lag: Option<u64>,
    /// The member reading it now.
    pub member: Option<String>,
}

impl OffsetCommit {
    /// The partition this commit is for.
    pub fn slot(&self) -> GroupPartition {
        GroupPartition {
            stream: self.stream.clone(),
            partition: self.partition,
        }
    }
}

impl CommittedOffset {
    /// The partition this offset is for.
    pub fn slot(&self) -> GroupPartition {
        GroupPartition {
            stream: self.stream.clone(),
            partition: self.partition,
        }
    }
}

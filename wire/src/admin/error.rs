//! The body of every failed REST call: a stable code for programs and a message for people.

use serde::{Deserialize, Serialize};

/// `{"code": "...", "message": "..."}`, sent with a 4xx or 5xx status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiError {
    pub code: ApiErrorCode,
    pub message: String,
}

/// What went wrong, grouped by what the caller can do about it. The names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiErrorCode {
    /// The request is malformed: bad JSON, bad path or query parameter (400).
    BadRequest,
    /// The body is not `application/json` (415).
    UnsupportedMediaType,
    /// The body parsed but a value is out of range or inconsistent (422).
    InvalidArgument,
    /// No bearer token, or one that is unknown or revoked (401).
    Unauthorized,
    /// The token is valid but its principal lacks the grant the call needs (403).
    Forbidden,
    /// No principal by that name, or it has no token by that key id (404).
    PrincipalNotFound,
    /// A principal by that name exists already (409).
    PrincipalExists,
    /// No stream by that name (404).
    StreamNotFound,
    /// No broker with that id (404).
    BrokerNotFound,
    /// No consumer group by that name (404).
    GroupNotFound,
    /// The stream has no partition by that number (404).
    PartitionNotFound,
    /// No read replica with that id (404).
    ReadReplicaNotFound,
    /// No route for this path (404) or method (405).
    RouteNotFound,
    /// The group has no member by that id: its session lapsed or it left. Join again, and
    /// read only what the new membership assigns (409).
    UnknownMember,
    /// The group's assignment changed since the generation the call names: heartbeat, then
    /// retry with the newer generation (409).
    StaleGeneration,
    /// The member committed a partition it is not reading: the partition moved to another
    /// member (409).
    PartitionNotAssigned,
    /// The group has live members; the call needs none (or `force`) (409).
    GroupNotEmpty,
    /// A stream by that name exists already (409).
    StreamExists,
    /// The broker's lease lapsed and it was declared dead: register again (409).
    LeaseExpired,
    /// Someone else changed the same partition first; re-read and retry (409).
    Conflict,
    /// The offset range needed to answer is not known yet (409).
    RangeUnknown,
    /// A create would pass a limit: partitions per broker or streams per principal; the
    /// message names it. Retry once streams are deleted, brokers added or the limit raised
    /// (429).
    LimitExceeded,
    /// This controlplane is a standby; ask the leader (503).
    NotLeader,
    /// The metadata store is unreachable or failed; retry later (503).
    Unavailable,
    /// A fault inside the controlplane, such as stored data it cannot read (500).
    Internal,
}

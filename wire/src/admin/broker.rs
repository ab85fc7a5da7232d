//! Brokers: registration, heartbeats (leases), listing, draining and their assignments.

use serde::{Deserialize, Serialize};

use crate::admin::Build;
use crate::admin::stream::{OffsetRange, StreamConfig};
use crate::{BrokerId, Endpoint, LeaderEpoch, PartitionId, StreamName};

/// `POST /v1/brokers`: a broker announces itself and takes a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterBrokerRequest {
    /// The id the broker had before (kept in its data directory); absent on its first start,
    /// when the controlplane assigns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_id: Option<BrokerId>,
    /// Where clients reach it (QUIC).
    pub client_endpoint: Endpoint,
    /// Where other brokers reach it (QUIC, mutual TLS).
    pub peer_endpoint: Endpoint,
    /// A failure domain (e.g. an availability zone); replicas of a partition are spread
    /// across zones when there are enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The broker's build, for operators (`floe version`, `floe broker list`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
}

/// The broker's id and lease terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterBrokerResponse {
    pub broker_id: BrokerId,
    /// The lease lapses this long after the last heartbeat.
    pub lease_ms: u64,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: u64,
}

/// `POST /v1/brokers/{id}/heartbeat`: renews the lease and reports the partitions this broker
/// leads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    #[serde(default)]
    pub partitions: Vec<PartitionReport>,
    /// Bytes per second of history (read from the tier) this broker served to consumers
    /// itself, averaged over the last interval: the demand read replicas would take over,
    /// and the autoscaler's signal to start the first one.
    #[serde(default)]
    pub history_read_bytes_per_second: u64,
    /// Partitions this broker holds in the `corrupt` state: their logs hold damaged data it
    /// would not cut, and they refuse publishes and fetches until an operator repairs them.
    /// Every heartbeat carries the whole list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corrupt: Vec<CorruptReport>,
}

/// One partition in the `corrupt` state, as the broker holding it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorruptReport {
    pub stream: StreamName,
    pub partition: PartitionId,
    /// The epoch in which the sender leads the partition, when its assignment says it does:
    /// the controlplane then elects another leader among the other replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<LeaderEpoch>,
    /// The damaged segment's file name (never a path).
    pub segment: String,
    /// Its first damaged byte.
    pub position: u64,
    /// The offsets the damaged segment holds: from `damaged_start`, to `damaged_end`
    /// (exclusive) or the log's end; absent when the damaged file is not a segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged_end: Option<u64>,
    /// What was found there.
    pub reason: String,
}

/// A replica of a partition held in the `corrupt` state by its broker, in a stream's
/// description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorruptReplica {
    pub broker_id: BrokerId,
    pub segment: String,
    pub position: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged_end: Option<u64>,
    pub reason: String,
}

/// What a leader knows of one partition. Ignored unless the sender leads it in `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionReport {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub epoch: LeaderEpoch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot: Option<OffsetRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<OffsetRange>,
    pub bytes: u64,
    pub upload_backlog_bytes: u64,
    /// Where consumers stop: the high watermark (the committed end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<u64>,
    /// Each follower's distance behind the leader's log end; replicated partitions only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_lag: Vec<ReplicaLag>,
    /// While the partition's replica set changes (its assignment names previous replicas):
    /// the new set, once the leader has seen a majority of it hold every committed record
    /// durably. The controlplane then completes the change, dropping the previous set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_set_caught_up: Vec<BrokerId>,
    /// The leader has not heard from a majority of its replica set for a lease: it cannot
    /// commit, though it and the controlplane still reach each other. The controlplane
    /// then elects a leader among the other replicas.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quorum_lost: bool,
}

/// How many records one follower of a partition lacks: the leader's log end minus the end
/// the follower acknowledged as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaLag {
    pub broker_id: BrokerId,
    pub records: u64,
}

/// The renewed lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    pub state: BrokerState,
    pub lease_ms: u64,
    /// The current assignment version: fetch assignments when it differs from the last seen.
    pub assignment_version: u64,
}

/// A broker's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrokerState {
    /// Holds a lease; receives new replicas.
    Live,
    /// Holds a lease; receives no new replicas and its replicas are moved away.
    Draining,
    /// Its lease lapsed; its replicas are moved away. It must register again.
    Dead,
}

/// One broker in `GET /v1/brokers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub broker_id: BrokerId,
    pub client_endpoint: Endpoint,
    pub peer_endpoint: Endpoint,
    pub zone: Option<String>,
    pub state: BrokerState,
    /// Milliseconds since the Unix epoch.
    pub lease_expires_at_ms: u64,
    /// Partitions this broker holds a replica of.
    pub replicas: u32,
    /// Partitions this broker leads.
    pub leaders: u32,
    /// The build it registered with (absent for a broker older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
}

/// `GET /v1/brokers`, ordered by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerList {
    pub brokers: Vec<BrokerInfo>,
}

/// `GET /v1/brokers/{id}/assignments`: every partition the broker holds a replica of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignments {
    pub broker_id: BrokerId,
    /// Increases with every change of any assignment in the cluster.
    pub version: u64,
    /// Ordered by stream name.
    pub streams: Vec<StreamAssignment>,
}

/// The partitions of one stream a broker holds, with the stream's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAssignment {
    pub name: StreamName,
    pub config: StreamConfig,
    /// When the stream was created (milliseconds since the Unix epoch): tells a stream
    /// deleted and created again under the same name from the one a broker already holds.
    pub created_at_ms: u64,
    /// Ordered by partition.
    pub partitions: Vec<PartitionAssignment>,
}

/// One partition's replica set, leader and epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAssignment {
    pub partition: PartitionId,
    pub replicas: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    pub epoch: LeaderEpoch,
    /// An election for `epoch` is running (`leader` is then absent): every replica promises
    /// `epoch` and answers with an [`ElectionReport`]. Only for replicated partitions
    /// (replication factor above 1).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub electing: bool,
    /// While the replica set changes (a dead broker is replaced): the set being left. Until
    /// the change completes, a record commits only once a majority of `replicas` *and* a
    /// majority of `previous_replicas` hold it, and elections count both majorities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_replicas: Vec<BrokerId>,
}

/// `POST /v1/brokers/{id}/elections`: a replica's answer to an election of its partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElectionReport {
    pub stream: StreamName,
    pub partition: PartitionId,
    /// The election's epoch.
    pub epoch: LeaderEpoch,
    pub outcome: ElectionOutcome,
}

/// What a replica answers to an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ElectionOutcome {
    /// The replica durably promised `epoch` (it ignores older leaders from now on); its
    /// durable log ends at `end`, and its last entry was written in `last_epoch` (0: empty).
    Reported { last_epoch: LeaderEpoch, end: u64 },
    /// The replica cannot report for, or lead, `epoch`: it promised a newer one, or it
    /// restarted after reporting. The controlplane elects again with an epoch above both
    /// `epoch` and `promised` (the newest epoch the replica has promised).
    Refused { promised: LeaderEpoch },
}

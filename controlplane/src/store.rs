//! The metadata store: the controlplane's only durable state, behind narrow async traits.
//!
//! [`MetadataStore`] holds the cluster (streams, partitions, replica assignments, leaders and
//! epochs, brokers and their leases); [`GroupOffsetStore`] consumer-group offsets;
//! [`ReadReplicaStore`] read replicas and their scaling policy; [`PrincipalStore`] who may
//! do what. [`SqlStore`] implements all
//! three on SQLite (the embedded default) and PostgreSQL. The conformance suite in
//! `tests/store_conformance.rs` runs against both.
//!
//! Contract shared by every implementation:
//! - Every method is one transaction: it happens entirely or not at all.
//! - The *assignment version* increases by one in the same transaction as every change of
//!   any partition's replicas, leader or epoch, and of the set of partitions (stream create
//!   and delete). Brokers long-poll on it.
//! - [`MetadataStore::reassign`] and [`MetadataStore::start_elections`] are compare-and-sets
//!   on each partition's epoch, [`MetadataStore::elect_leader`] on its epoch and its running
//!   election: if any partition moved past what the caller read, nothing is written.
//! - Times are passed in (milliseconds since the Unix epoch); the store reads no clock.

mod migrations;
mod sql;

use std::future::Future;

use floe_wire::admin::{
    Assignments, BrokerInfo, BrokerState, Build, CommittedOffset, GroupSummary, OffsetCommit,
    PartitionReport, ReadReplicaHeartbeat, ReadReplicaInfo, ScalingPolicy, StreamConfig,
    StreamDescription, StreamInfo,
};
use floe_wire::auth::{Credential, Principal};
use floe_wire::{BrokerId, Endpoint, LeaderEpoch, PartitionId, StreamName};

pub use sql::{Backend, SqlStore};

/// Why a store call failed, grouped by what the caller can do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("stream `{name}` exists already")]
    StreamExists { name: StreamName },
    #[error("no stream `{name}`")]
    StreamNotFound { name: StreamName },
    #[error("stream `{stream}` has no partition {partition}")]
    PartitionNotFound {
        stream: StreamName,
        partition: PartitionId,
    },
    #[error("no broker {id}")]
    BrokerNotFound { id: BrokerId },
    #[error("broker {id}'s lease lapsed; it must register again")]
    LeaseExpired { id: BrokerId },
    #[error("principal `{name}` exists already")]
    PrincipalExists { name: String },
    #[error("no principal `{name}`")]
    PrincipalNotFound { name: String },
    #[error("principal `{name}` has no token `{key_id}`")]
    TokenNotFound { name: String, key_id: String },
    #[error("no read replica `{id}`")]
    ReadReplicaNotFound { id: String },
    #[error("read replica `{id}`'s lease lapsed; it must register again")]
    ReadReplicaLeaseExpired { id: String },
    #[error("partition {stream}/{partition} is no longer at epoch {expected}")]
    EpochConflict {
        stream: StreamName,
        partition: PartitionId,
        expected: LeaderEpoch,
    },
    #[error("{field} = {value} does not fit the store's signed 64-bit integers")]
    OutOfRange { field: &'static str, value: u64 },
    #[error("stored {column} holds {value:?}, which is not valid")]
    Corrupt { column: &'static str, value: String },
    #[error("migration {version} was changed after it was applied")]
    MigrationChanged { version: i64 },
    #[error("the metadata store failed")]
    Backend {
        #[from]
        source: sqlx::Error,
    },
}

/// A broker announcing itself; see [`MetadataStore::register_broker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// The broker's previous id; a new one is assigned when absent.
    pub id: Option<BrokerId>,
    pub client_endpoint: Endpoint,
    pub peer_endpoint: Endpoint,
    pub zone: Option<String>,
    pub build: Option<Build>,
    pub now_ms: u64,
    pub lease_expires_at_ms: u64,
}

/// A read replica announcing itself; see [`ReadReplicaStore::register_read_replica`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReplicaRegistration {
    /// The id to register under; a new `r-<n>` is assigned when absent.
    pub id: Option<String>,
    pub endpoint: Endpoint,
    pub zone: Option<String>,
    pub build: Option<Build>,
    pub lease_expires_at_ms: u64,
}

/// A partition whose replica set needs repair: fewer live replicas than its replication
/// factor, or a replica on a broker that is not live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MisplacedPartition {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub replication_factor: u32,
    pub epoch: LeaderEpoch,
    pub leader: Option<BrokerId>,
    /// In position order, each with its broker's state (`Dead` for an unknown broker).
    pub replicas: Vec<(BrokerId, BrokerState)>,
    /// The set being left while the replica set changes; empty otherwise.
    pub previous: Vec<BrokerId>,
}

/// A new replica set and leader for one partition, valid only if the partition is still at
/// `expected_epoch`. Its epoch becomes `expected_epoch + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub expected_epoch: LeaderEpoch,
    /// Leader first when there is one.
    pub replicas: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    /// A replicated partition's change of replica set: the set being left, which the
    /// partition's election at the new epoch (started by the same write: no leader,
    /// electing) and its commits count along with the new one until the change completes
    /// ([`MetadataStore::report_partitions`]). Empty for every other reassignment.
    pub previous: Vec<BrokerId>,
}

/// A replicated partition's leadership, as the election rules need it; see
/// [`MetadataStore::leaderless_partitions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLeadership {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub replication_factor: u32,
    pub epoch: LeaderEpoch,
    /// `None` while electing, and for a partition that was never led.
    pub leader: Option<BrokerId>,
    /// An election for `epoch` runs; `leader` is then `None`.
    pub electing: bool,
    /// In position order, each with its broker's state (`Dead` for an unknown broker).
    pub replicas: Vec<(BrokerId, BrokerState)>,
    /// The set being left while the replica set changes (see [`Reassignment::previous`]);
    /// empty otherwise. Its members do not report (they no longer hold the partition), but
    /// an election needs reports from a majority of it too.
    pub previous: Vec<BrokerId>,
}

/// A new election of one partition's leader at `epoch`, valid only if the partition is
/// still at `expected_epoch` (and `epoch` is above it). The replica set stays as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionStart {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub expected_epoch: LeaderEpoch,
    pub epoch: LeaderEpoch,
}

/// The winner of the election of one partition at `epoch`; see
/// [`MetadataStore::elect_leader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionResult {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub epoch: LeaderEpoch,
    pub leader: BrokerId,
}

/// Streams, partitions, assignments, brokers and leases.
pub trait MetadataStore: Send + Sync + 'static {
    /// Creates `stream` with one partition per entry of `replicas` (its replica set, leader
    /// first; may be empty when no broker is live). Partitions with replicas start at epoch
    /// 1: led by their first replica when the replication factor is 1, electing without a
    /// leader when it is above 1. The others start at epoch 0 without a leader. Returns the
    /// new assignment version.
    fn create_stream(
        &self,
        stream: &StreamInfo,
        replicas: &[Vec<BrokerId>],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.create_stream_by(stream, replicas, None)
    }

    /// [`MetadataStore::create_stream`], recording the principal that created it (`None`:
    /// no one, without authentication), as [`MetadataStore::streams_created_by`] counts.
    fn create_stream_by(
        &self,
        stream: &StreamInfo,
        replicas: &[Vec<BrokerId>],
        creator: Option<&str>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// How many existing streams `creator` created.
    fn streams_created_by(
        &self,
        creator: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every stream, ordered by name.
    fn streams(&self) -> impl Future<Output = Result<Vec<StreamInfo>, StoreError>> + Send;

    /// One stream with its partitions, or `None`.
    fn describe_stream(
        &self,
        name: &StreamName,
    ) -> impl Future<Output = Result<Option<StreamDescription>, StoreError>> + Send;

    /// Replaces what can change on a live stream: its ack mode, segment and retention
    /// settings (`config`'s partitions and replication factor are not looked at). Returns
    /// the stream and the new assignment version, which brokers follow to learn it.
    fn set_stream_settings(
        &self,
        name: &StreamName,
        config: &StreamConfig,
    ) -> impl Future<Output = Result<(StreamInfo, u64), StoreError>> + Send;

    /// Deletes a stream, its partitions and its consumer-group offsets. Returns the new
    /// assignment version.
    fn delete_stream(
        &self,
        name: &StreamName,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Registers a broker, or re-registers one by its id: endpoints and zone are replaced
    /// and the lease renewed; a dead broker becomes live, a draining one stays draining.
    fn register_broker(
        &self,
        registration: &BrokerRegistration,
    ) -> impl Future<Output = Result<BrokerInfo, StoreError>> + Send;

    /// Extends a broker's lease. Fails with `LeaseExpired` once it was declared dead.
    fn renew_lease(
        &self,
        id: BrokerId,
        lease_expires_at_ms: u64,
    ) -> impl Future<Output = Result<BrokerInfo, StoreError>> + Send;

    /// Every broker, ordered by id, with its replica and leader counts.
    fn brokers(&self) -> impl Future<Output = Result<Vec<BrokerInfo>, StoreError>> + Send;

    /// Sets a broker's state: draining, or back to live from draining (a dead broker stays
    /// dead: only its heartbeat makes it live). Answers with the broker as it now is.
    fn set_broker_state(
        &self,
        id: BrokerId,
        state: BrokerState,
    ) -> impl Future<Output = Result<BrokerInfo, StoreError>> + Send;

    /// Extends every lease of a broker not declared dead to at least `lease_expires_at_ms`
    /// (a controlplane taking over counts every lease afresh on its own clock).
    fn extend_leases(
        &self,
        lease_expires_at_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Declares dead every broker not yet dead whose lease expired at or before `now_ms`;
    /// returns them.
    fn expire_leases(
        &self,
        now_ms: u64,
    ) -> impl Future<Output = Result<Vec<BrokerId>, StoreError>> + Send;

    /// Records what a leader reported; a report is ignored unless `id` leads that partition
    /// in the report's epoch. A report that the new set of a changing replica set holds
    /// everything committed ([`PartitionReport::new_set_caught_up`], naming the partition's
    /// current set) completes the change. Returns the new assignment version when any did.
    fn report_partitions(
        &self,
        id: BrokerId,
        reports: &[PartitionReport],
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;

    /// Partitions whose replica set needs repair, ordered by stream and partition.
    fn misplaced_partitions(
        &self,
    ) -> impl Future<Output = Result<Vec<MisplacedPartition>, StoreError>> + Send;

    /// Applies every reassignment or none (compare-and-set on each epoch). Returns the new
    /// assignment version.
    fn reassign(
        &self,
        changes: &[Reassignment],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Replicated partitions (replication factor above 1, at least one replica) that are
    /// electing, have no leader, or whose leader's broker is not live; ordered by stream and
    /// partition.
    fn leaderless_partitions(
        &self,
    ) -> impl Future<Output = Result<Vec<PartitionLeadership>, StoreError>> + Send;

    /// One partition's leadership (any replication factor).
    fn partition_leadership(
        &self,
        stream: &StreamName,
        partition: PartitionId,
    ) -> impl Future<Output = Result<PartitionLeadership, StoreError>> + Send;

    /// Starts every election or none (compare-and-set on each epoch): the partition moves to
    /// the new epoch, electing, without a leader, with its replica set unchanged. Returns the
    /// new assignment version.
    fn start_elections(
        &self,
        elections: &[ElectionStart],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Ends the election of `result.epoch` with its leader, if the partition is still
    /// electing at that epoch (`EpochConflict` otherwise). Returns the new assignment
    /// version.
    fn elect_leader(
        &self,
        result: &ElectionResult,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The earliest lease expiry among brokers not declared dead, if any: when
    /// [`MetadataStore::expire_leases`] next has something to do.
    fn next_lease_expiry(&self) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;

    /// The partitions broker `id` holds a replica of, with the assignment version they are
    /// consistent with.
    fn assignments(
        &self,
        id: BrokerId,
    ) -> impl Future<Output = Result<Assignments, StoreError>> + Send;

    /// The current assignment version.
    fn assignment_version(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// Consumer-group offsets.
pub trait GroupOffsetStore: Send + Sync + 'static {
    /// Every group with committed offsets, ordered by name.
    fn groups(&self) -> impl Future<Output = Result<Vec<GroupSummary>, StoreError>> + Send;

    /// A group's committed offsets, ordered by stream and partition; empty for an unknown
    /// group.
    fn group_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<CommittedOffset>, StoreError>> + Send;

    /// Commits offsets, all or none; every partition must exist.
    fn commit_offsets(
        &self,
        group: &str,
        commits: &[OffsetCommit],
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Commits offsets of several groups in one transaction, all or none. Later entries for
    /// the same group and partition win. Fails as a whole (`PartitionNotFound` naming the
    /// first entry it could not place) when any entry names a partition that does not exist;
    /// the caller may then commit the entries group by group to learn which.
    fn commit_offsets_batch(
        &self,
        entries: &[(&str, &OffsetCommit)],
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes a group's committed offsets; returns how many there were.
    fn delete_group(&self, group: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// Read replicas and the scaling policy.
pub trait ReadReplicaStore: Send + Sync + 'static {
    /// Every read replica, ordered by id.
    fn read_replicas(
        &self,
    ) -> impl Future<Output = Result<Vec<ReadReplicaInfo>, StoreError>> + Send;

    /// Inserts or replaces a read replica.
    fn upsert_read_replica(
        &self,
        replica: &ReadReplicaInfo,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Registers a read replica, or re-registers one by its id: endpoint and zone are
    /// replaced and the lease renewed; a dead replica becomes live, a draining one stays
    /// draining. A new replica starts live with no load.
    fn register_read_replica(
        &self,
        registration: &ReadReplicaRegistration,
    ) -> impl Future<Output = Result<ReadReplicaInfo, StoreError>> + Send;

    /// Extends a read replica's lease and records its load. Fails with
    /// `ReadReplicaLeaseExpired` once it was declared dead, `ReadReplicaNotFound` for an
    /// unknown id.
    fn renew_read_replica(
        &self,
        id: &str,
        lease_expires_at_ms: u64,
        load: &ReadReplicaHeartbeat,
    ) -> impl Future<Output = Result<ReadReplicaInfo, StoreError>> + Send;

    /// Moves a live read replica to `draining` (a draining or dead one keeps its state);
    /// returns it.
    fn drain_read_replica(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ReadReplicaInfo, StoreError>> + Send;

    /// Forgets a read replica (it left); `ReadReplicaNotFound` when unknown.
    fn remove_read_replica(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Declares dead every read replica not yet dead whose lease expired at or before
    /// `now_ms`; returns their ids, ordered.
    fn expire_read_replica_leases(
        &self,
        now_ms: u64,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Forgets every dead read replica whose lease expired at or before `expired_by_ms`;
    /// returns their ids, ordered.
    fn forget_dead_read_replicas(
        &self,
        expired_by_ms: u64,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// The scaling policy; [`ScalingPolicy::default`] until one is set.
    fn scaling_policy(&self) -> impl Future<Output = Result<ScalingPolicy, StoreError>> + Send;

    /// Replaces the scaling policy.
    fn set_scaling_policy(
        &self,
        policy: &ScalingPolicy,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A principal as stored, with its tokens' hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPrincipal {
    pub principal: Principal,
    pub tokens: Vec<StoredToken>,
}

/// One token of a principal: its key id and hash, and when it was minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    pub key: Credential,
    pub created_at_ms: u64,
}

/// Principals, their grants and the hashes of their tokens. Every change increases the
/// principals version in the same transaction; brokers and read replicas follow it.
pub trait PrincipalStore: Send + Sync + 'static {
    /// Creates a principal with its first token; `PrincipalExists` if the name is taken.
    /// Returns the new principals version.
    fn create_principal(
        &self,
        principal: &Principal,
        token: &Credential,
        now_ms: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Adds a token to a principal (rotation: the old one stays valid until revoked).
    fn add_token(
        &self,
        name: &str,
        token: &Credential,
        now_ms: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes a principal and every token of it.
    fn revoke_principal(&self, name: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes one token of a principal.
    fn revoke_token(
        &self,
        name: &str,
        key_id: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every principal, ordered by name, with its tokens (oldest first), and the principals
    /// version they are consistent with.
    fn principals(
        &self,
    ) -> impl Future<Output = Result<(u64, Vec<StoredPrincipal>), StoreError>> + Send;

    /// The current principals version.
    fn principals_version(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// Everything the controlplane keeps.
pub trait Store: MetadataStore + GroupOffsetStore + ReadReplicaStore + PrincipalStore {}

impl<T: MetadataStore + GroupOffsetStore + ReadReplicaStore + PrincipalStore> Store for T {}

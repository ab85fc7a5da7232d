//! One partition held by this broker: its hot log, its tier uploader and retention, and,
//! for a partition with replicas on other brokers, the producer's and consumer's side of
//! its replica ([`replica`]), which a replication driver above this layer feeds.
//!
//! No I/O of its own beyond what the log and the uploader do; no knowledge of the server,
//! the peers or the controlplane.

pub(crate) mod corrupt;
pub(crate) mod recent;
pub(crate) mod replica;
mod tenure;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use floe_hot_log::{Log, RetentionPolicy};
use floe_tier::{PartitionPath, TierRetention, Uploader};
use floe_wire::{AckMode, LeaderEpoch, Offset};

use crate::lease::Lease;
use replica::ReplicaHandle;

pub use tenure::TakeError;

/// The leader epoch a partition without replicas is written and tiered in on a broker
/// without a controlplane: its one broker is its writer for good. A managed broker writes
/// such a partition in the epoch its controlplane gave it ([`Partition::take`]).
pub const LOCAL_EPOCH: LeaderEpoch = LeaderEpoch::ZERO;

/// One partition of a stream held by this broker.
#[derive(Debug)]
pub(crate) struct Partition {
    stream: String,
    id: u32,
    log: Log,
    /// The stream's settings may change it.
    ack_mode: Mutex<AckMode>,
    /// Local retention and tier retention; the stream's settings may change them.
    retention: Mutex<(RetentionPolicy, TierRetention)>,
    tier_path: PartitionPath,
    uploader: Uploader,
    /// The partition has replicas on other brokers: producers append and consumers read
    /// through its replica, never straight to the log.
    replicated: bool,
    /// Set once, by the replication driver's first assignment (replicated partitions only).
    replica: OnceLock<ReplicaHandle>,
    /// Base offsets of the sealed segments being repaired from the tier (at most one
    /// repair per segment at a time; bounded by the segments of the log).
    repairs: Mutex<BTreeSet<Offset>>,
    /// For a partition without replicas on a managed broker: the broker's lease, without
    /// which it writes nothing. `None`: replicated, or no controlplane.
    lease: Option<Arc<Lease>>,
    /// The epoch this broker took the partition in ([`Partition::take`]): the manifest is
    /// fenced at it and the log continues the history the tier holds. Writes go only in the
    /// epoch the assignments give, once taken in it.
    taken: Mutex<Option<LeaderEpoch>>,
}

/// What a partition is opened with.
#[derive(Debug)]
pub(crate) struct PartitionParts {
    pub stream: String,
    pub id: u32,
    pub log: Log,
    pub ack_mode: AckMode,
    pub local_retention: RetentionPolicy,
    pub tier_retention: TierRetention,
    pub tier_path: PartitionPath,
    pub uploader: Uploader,
    pub replicated: bool,
    /// The broker's lease, for a partition without replicas on a managed broker.
    pub lease: Option<Arc<Lease>>,
}

impl Partition {
    pub(crate) fn new(parts: PartitionParts) -> Partition {
        Partition {
            stream: parts.stream,
            id: parts.id,
            log: parts.log,
            ack_mode: Mutex::new(parts.ack_mode),
            retention: Mutex::new((parts.local_retention, parts.tier_retention)),
            tier_path: parts.tier_path,
            uploader: parts.uploader,
            replicated: parts.replicated,
            replica: OnceLock::new(),
            repairs: Mutex::new(BTreeSet::new()),
            lease: parts.lease.filter(|_| !parts.replicated),
            taken: Mutex::new(None),
        }
    }

    /// Marks the sealed segment at `base_offset` as being repaired; false when a repair of
    /// it is already under way.
    pub(crate) fn begin_repair(&self, base_offset: Offset) -> bool {
        let mut repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        repairs.insert(base_offset)
    }

    /// Ends the repair [`Partition::begin_repair`] began.
    pub(crate) fn end_repair(&self, base_offset: Offset) {
        let mut repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        repairs.remove(&base_offset);
    }

    /// The stream's name.
    pub(crate) fn stream(&self) -> &str {
        &self.stream
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn log(&self) -> &Log {
        &self.log
    }

    /// When the stream acknowledges publishes.
    pub(crate) fn ack_mode(&self) -> AckMode {
        *self.ack_mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes when the stream acknowledges publishes, from the next publish on.
    pub(crate) fn set_ack_mode(&self, mode: AckMode) {
        *self.ack_mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// Where the partition's objects live in the bucket.
    pub(crate) fn tier_path(&self) -> &PartitionPath {
        &self.tier_path
    }

    pub(crate) fn uploader(&self) -> &Uploader {
        &self.uploader
    }

    /// Whether the partition has replicas on other brokers.
    pub(crate) fn is_replicated(&self) -> bool {
        self.replicated
    }

    /// The replica of a replicated partition, once its first assignment started it.
    pub(crate) fn replica(&self) -> Option<&ReplicaHandle> {
        self.replica.get()
    }

    /// The replica, started by `start` when it was not.
    pub(crate) fn replica_or_start(&self, start: impl FnOnce() -> ReplicaHandle) -> &ReplicaHandle {
        self.replica.get_or_init(start)
    }

    /// Stops the replica's driver, if one runs, and closes the log (the partition is no
    /// longer served here).
    pub(crate) fn close(&self) -> Result<(), floe_hot_log::LogError> {
        if let Some(replica) = self.replica.get() {
            replica.stop();
        }
        self.log.close()
    }

    /// Where records stop being visible to consumers: the high watermark of a replicated
    /// partition (none while this broker does not lead it), else the synced end.
    pub(crate) fn committed_end(&self) -> Option<Offset> {
        if !self.replicated {
            return Some(self.log.synced_end());
        }
        let commit = self.replica()?.commit();
        commit.leading?;
        Some(Offset::new(commit.high_watermark))
    }

    /// Whether this broker writes the partition's tier, and in which epoch: the leader of a
    /// replicated partition, or the holder of an unreplicated one while it may write it
    /// ([`Partition::write_epoch`]).
    pub(crate) fn tiers_here(&self) -> Option<LeaderEpoch> {
        if self.replicated {
            self.replica()?.commit().leading
        } else {
            self.write_epoch(Instant::now())
        }
    }

    /// The epoch a partition without replicas may be written in at `now`, if any: on a
    /// broker without a controlplane, [`LOCAL_EPOCH`] always; on a managed one, the epoch
    /// its assignments give it, once the partition is taken in that epoch and while the
    /// broker's lease holds. Asked before appending and again before acknowledging, so that
    /// nothing is acknowledged once the controlplane may have moved the partition.
    pub(crate) fn write_epoch(&self, now: Instant) -> Option<LeaderEpoch> {
        let Some(lease) = &self.lease else {
            return Some(LOCAL_EPOCH);
        };
        let taken = self.taken()?;
        (lease.write_epoch(&self.stream, self.id, now)? == taken).then_some(taken)
    }

    /// The epoch the partition was taken in, if it was.
    pub(crate) fn taken(&self) -> Option<LeaderEpoch> {
        *self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a managed broker takes this partition (one without replicas) at the epochs
    /// its assignments give.
    pub(crate) fn is_leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Sealed, committed data this broker has yet to tier, as of now: counted from the log,
    /// so a segment sealed since the last upload run counts at once. Nothing on a replica
    /// that does not lead: the leader tiers.
    pub(crate) fn upload_backlog(&self) -> floe_tier::Backlog {
        // `committed_end` is known exactly where this broker tiers (`tiers_here`).
        match self.committed_end() {
            Some(committed) => self.uploader.waiting(self.log.sealed_sizes(), committed),
            None => floe_tier::Backlog::default(),
        }
    }

    /// Sealed segments beyond it leave the local disk, once tiered.
    pub(crate) fn local_retention(&self) -> RetentionPolicy {
        self.retention.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// What the tier keeps.
    pub(crate) fn tier_retention(&self) -> TierRetention {
        self.retention.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    pub(crate) fn set_retention(&self, local: RetentionPolicy, tier: TierRetention) {
        *self.retention.lock().unwrap_or_else(|e| e.into_inner()) = (local, tier);
    }

    /// The first readable offset, tiered history included.
    pub(crate) fn log_start(&self) -> Offset {
        let local = self.log.log_start();
        match self.uploader.tier_start() {
            Some(tier) if tier < local => tier,
            _ => local,
        }
    }

    /// The end of the tiered range `[log_start, tier_end)`.
    pub(crate) fn tier_end(&self) -> Offset {
        self.uploader.tier_end().max(self.log_start())
    }
}

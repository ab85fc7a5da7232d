//! What replicas say to each other over the peer port, and what the state machine asks its
//! driver to do.

use floe_wire::LeaderEpoch;

use crate::history::EpochStart;

/// A replica's id: the broker id.
pub type ReplicaId = u32;

/// A record batch as replication sees it: offsets `[base, end)` written in `epoch`. The
/// bytes are opaque here; the broker's batches are `floe-wire` record batches.
pub trait Batch: Clone + std::fmt::Debug {
    fn base(&self) -> u64;
    /// One past the last offset.
    fn end(&self) -> u64;
    /// The epoch of the leader that assigned the offsets.
    fn epoch(&self) -> LeaderEpoch;
    /// Size on the wire, for flow control.
    fn size(&self) -> usize;
}

/// Reads the local log, for a leader shipping batches.
pub trait ReadLog<B> {
    /// Whole batches from `from` (a batch boundary) in order, about `max_bytes` together and at
    /// least one when `from` is below the log end.
    fn read(&self, from: u64, max_bytes: usize) -> Vec<B>;
}

/// Peer messages. Every message carries the sender's epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<B> {
    /// Leader → follower: `batches` continue the leader's log after `prev_offset`, whose
    /// previous entry has epoch `prev_epoch` (0 when the leader does not know it: below its
    /// log start, or just below it in a log that never recorded it). Empty `batches` make a
    /// heartbeat.
    Append {
        epoch: LeaderEpoch,
        prev_offset: u64,
        prev_epoch: LeaderEpoch,
        /// The follower's log cannot be joined to the leader's above the leader's local
        /// start: it must drop its log and start empty at `prev_offset` (everything below is
        /// committed and in object storage).
        reset: bool,
        batches: Vec<B>,
        high_watermark: u64,
    },
    /// Follower → leader: the follower holds durably, and in agreement with this epoch's
    /// leader, every offset below `end`.
    Ack { epoch: LeaderEpoch, end: u64 },
    /// Follower → leader: an append did not fit after the follower's log; here is that log,
    /// so the leader can find where they agree.
    Mismatch {
        epoch: LeaderEpoch,
        start: u64,
        end: u64,
        epochs: Vec<EpochStart>,
    },
    /// The receiver has promised `epoch`, newer than the sender's: the sender is deposed.
    Stale { epoch: LeaderEpoch },
}

impl<B> Message<B> {
    pub fn epoch(&self) -> LeaderEpoch {
        match self {
            Message::Append { epoch, .. }
            | Message::Ack { epoch, .. }
            | Message::Mismatch { epoch, .. }
            | Message::Stale { epoch } => *epoch,
        }
    }
}

/// What the driver must do, **in the order given**. The contract:
///
/// - [`Output::PersistEpoch`] must be durable before any later output is carried out: a
///   replica's promise not to accept older epochs must survive a crash before anyone relies
///   on it (the election report, an ack in the new epoch).
/// - [`Output::Reset`] is durable before any later output is carried out (the old log is
///   gone for good: a crash must not bring back entries below a checkpointed high watermark).
/// - [`Output::Write`] and [`Output::Truncate`] change the local log in order; they need not
///   be durable at once. The driver syncs the log when it likes and then
///   calls [`crate::Replica::on_synced`] with the log's durable end; a sync covers every change
///   made before it, truncations included. Acks are only ever sent for synced offsets.
/// - [`Output::Send`] may be delayed, duplicated or lost; the protocol retries.
/// - [`Output::HighWatermark`]: consumers may read below it; in `quorum` ack mode the leader
///   releases a producer's ack once its batch ends at or below it. It never decreases while
///   the process lives. The driver checkpoints [`crate::Replica::checkpoint_high_watermark`]
///   (never this value: it may run ahead of the durable log) whenever it likes.
/// - [`Output::MarkEpochStart`]: the new leader appends an entry of its epoch at its log end
///   before any producer's, and reports it with [`crate::Replica::on_appended`] like any
///   append.
/// - [`Output::Deposed`]: the replica no longer leads; acks still waiting must fail (their
///   batches may be truncated), and the producer retries on the new leader.
///
/// Every method of [`crate::Replica`] that returns outputs is `#[must_use]`, and so is an
/// `Output` itself (though not through the `Vec` holding it: that is what the methods' mark
/// is for).
#[must_use = "an output is a step the driver must carry out, in order"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<B> {
    PersistEpoch(LeaderEpoch),
    Send {
        to: ReplicaId,
        message: Message<B>,
    },
    /// Append these batches at the log end (a follower; the leader appends on its own).
    Write(Vec<B>),
    /// Drop the entries at and above this offset. Never at or below the high watermark.
    Truncate(u64),
    /// Drop the whole log; the next offset is `start`, and the entry before it (committed,
    /// in object storage) is of `base_epoch` (0: not known), which the log must keep, as
    /// its last epoch, for its election reports.
    Reset {
        start: u64,
        base_epoch: LeaderEpoch,
    },
    HighWatermark(u64),
    /// This replica now leads `epoch` and its log holds entries of earlier epochs that it
    /// does not know to be committed. Rule 3 commits them only under an entry of `epoch`:
    /// append one (the broker's epoch-start control batch, which consumers skip), so they
    /// commit without waiting for a producer, and a producer retrying them, answered as a
    /// duplicate, gets its acknowledgement.
    MarkEpochStart {
        epoch: LeaderEpoch,
    },
    /// For the controlplane's election of `epoch`: this replica's durable log ends at `end`
    /// with an entry of `last_epoch`, and it has promised to ignore older epochs.
    Report {
        epoch: LeaderEpoch,
        last_epoch: LeaderEpoch,
        end: u64,
    },
    /// This replica led `epoch` and no longer does.
    Deposed {
        epoch: LeaderEpoch,
    },
    /// The controlplane asked this replica to report for, or to lead, `epoch`, and it cannot:
    /// it promised a newer epoch, or it did not report for that election in this
    /// incarnation (it restarted since). The controlplane must elect with a newer epoch.
    Refused {
        epoch: LeaderEpoch,
    },
}

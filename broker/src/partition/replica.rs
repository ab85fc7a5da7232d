//! The producer's and consumer's side of a partition replica: appends in the epoch the
//! replica leads, the commit (leader epoch and high watermark) consumers may read below, and
//! the events the replication driver takes from its callers. The driver
//! (`crate::replication`) owns the state machine and is the only writer of [`Shared`].
//!
//! Producers append only through [`ReplicaHandle::append`], under the same lock the driver
//! holds while it changes the log or the role, so no producer batch lands in a log that is
//! following another leader, and the state machine always sees every append before anything
//! else happens to the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_hot_log::{Appended, Log, LogError};
use floe_replication::{Message, WireBatch};
use floe_wire::{BrokerId, LeaderEpoch};
use tokio::sync::{Notify, mpsc, watch};

use super::recent::{RECENT_BYTES_MAX, RecentAppends};
use crate::budget::ByteBudget;

/// What the controlplane says about this partition (one assignment version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assignment {
    pub epoch: LeaderEpoch,
    pub leader: Option<BrokerId>,
    pub electing: bool,
    pub replicas: Vec<BrokerId>,
    /// The set being left while the replica set changes; empty otherwise.
    pub previous: Vec<BrokerId>,
}

/// What producers and consumers see of a replica: the epoch it leads, if any, and the high
/// watermark below which records are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Commit {
    pub leading: Option<LeaderEpoch>,
    pub high_watermark: u64,
}

/// Bytes of record batches that peer messages may hold while they wait for a partition's
/// driver; appends beyond it are dropped. A leader has at most a window of appends (8 of up
/// to 1 MiB) in flight to a follower, but it sends the window again every retry interval
/// while the follower does not answer: a follower whose disk stalls would otherwise queue
/// those copies without bound. A dropped append costs only time (the leader resends what
/// was not acknowledged); messages without batches (acks, heartbeats) are never dropped.
const PEER_QUEUE_BYTES: usize = 32 << 20;

/// The record bytes a peer message carries.
fn batch_bytes(message: &Message<WireBatch>) -> usize {
    match message {
        Message::Append { batches, .. } => batches.iter().map(|b| b.bytes().len()).sum(),
        _ => 0,
    }
}

#[derive(Debug)]
pub(crate) enum Event {
    Stop,
    Assign(Assignment),
    Peer {
        from: u32,
        message: Message<WireBatch>,
        /// Its record bytes, held in the peer budget until the driver takes it.
        bytes: usize,
    },
}

/// Why a replicated append or its acknowledgement failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicaError {
    #[error("this broker does not lead the partition")]
    NotLeader,
    #[error(transparent)]
    Log(#[from] LogError),
}

/// The producer's and consumer's side of a partition replica.
#[derive(Debug)]
pub(crate) struct ReplicaHandle {
    events: mpsc::UnboundedSender<Event>,
    shared: Arc<Shared>,
}

/// What a replica's handle and its driver share. Written by the driver alone, but for
/// `recent`, which producers fill under `leading`.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The epoch this replica leads. Producers append under this lock; the driver holds it
    /// while it changes the role or the log.
    pub(crate) leading: Mutex<Option<LeaderEpoch>>,
    pub(crate) commit: watch::Sender<Commit>,
    pub(crate) appended: Notify,
    /// On a leader: each follower's acked end.
    pub(crate) progress: Mutex<Vec<(u32, u64)>>,
    /// On a leader while its replica set changes: the new set, once a majority of it holds
    /// everything committed (see `Replica::new_set_holds_committed`).
    pub(crate) caught_up: Mutex<Option<Vec<u32>>>,
    /// On a leader: how long since a majority was last in contact, in milliseconds
    /// (`u64::MAX` when not leading; see `Replica::quorum_contact_age_ms`).
    pub(crate) quorum_contact_age_ms: AtomicU64,
    /// The leader and epoch of the latest assignment, for clients asking where to go.
    pub(crate) assigned: Mutex<Option<(BrokerId, LeaderEpoch)>>,
    /// Record bytes in peer messages queued for the driver (see [`PEER_QUEUE_BYTES`]).
    pub(crate) peer_budget: ByteBudget,
    /// On a leader with followers: its newest appends, to ship from memory. Locked after
    /// `leading`, never before.
    pub(crate) recent: Mutex<RecentAppends>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<LeaderEpoch>> {
        self.leading.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn recent(&self) -> MutexGuard<'_, RecentAppends> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ReplicaHandle {
    /// Stops the driver (the partition is closing).
    pub(crate) fn stop(&self) {
        let _ = self.events.send(Event::Stop);
    }

    pub(crate) fn assign(&self, assignment: Assignment) {
        *self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            assignment.leader.map(|leader| (leader, assignment.epoch));
        let _ = self.events.send(Event::Assign(assignment));
    }

    pub(crate) fn deliver(&self, from: u32, message: Message<WireBatch>) {
        let bytes = batch_bytes(&message);
        if let Err(queued) = self.shared.peer_budget.try_take(bytes) {
            tracing::debug!(peer = from, queued, "replica busy; append dropped");
            return;
        }
        let _ = self.events.send(Event::Peer {
            from,
            message,
            bytes,
        });
    }

    /// The leader the controlplane last named, and its epoch (it may not have taken over
    /// yet).
    pub(crate) fn assigned_leader(&self) -> Option<(BrokerId, LeaderEpoch)> {
        *self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn commit(&self) -> Commit {
        *self.shared.commit.borrow()
    }

    /// On a leader, each follower's acked end; empty otherwise.
    pub(crate) fn follower_progress(&self) -> Vec<(u32, u64)> {
        self.shared
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// On a leader while its replica set changes: the new set, once a majority of it holds
    /// every committed record; `None` otherwise.
    pub(crate) fn new_set_caught_up(&self) -> Option<Vec<u32>> {
        self.shared
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// On a leader: how long since it last heard from enough followers to make a majority
    /// with itself; `None` when not leading.
    pub(crate) fn quorum_contact_age(&self) -> Option<Duration> {
        match self.shared.quorum_contact_age_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    pub(crate) fn watch_commit(&self) -> watch::Receiver<Commit> {
        self.shared.commit.subscribe()
    }

    /// Appends a producer's batch in the epoch this replica leads.
    pub(crate) fn append(
        &self,
        log: &Log,
        batch: &[u8],
    ) -> Result<(Appended, LeaderEpoch), ReplicaError> {
        let leading = self.shared.lock();
        let epoch = leading.ok_or(ReplicaError::NotLeader)?;
        let appended = log.append(batch, epoch)?;
        let has_followers = !self
            .shared
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        if !appended.duplicate && has_followers {
            self.shared
                .recent()
                .push_appended(batch, appended.base_offset, epoch);
        }
        Ok((appended, epoch))
    }

    /// Tells the driver that producers appended (after [`ReplicaHandle::append`]).
    pub(crate) fn appended(&self) {
        self.shared.appended.notify_one();
    }

    /// Waits until the records below `end`, appended in `epoch`, are committed (held durably
    /// by a majority); fails once this replica no longer leads `epoch`.
    pub(crate) async fn wait_committed(
        &self,
        end: u64,
        epoch: LeaderEpoch,
    ) -> Result<(), ReplicaError> {
        let mut commit = self.shared.commit.subscribe();
        loop {
            let now = *commit.borrow_and_update();
            if now.high_watermark >= end {
                return Ok(());
            }
            if now.leading != Some(epoch) {
                return Err(ReplicaError::NotLeader);
            }
            if commit.changed().await.is_err() {
                return Err(ReplicaError::NotLeader);
            }
        }
    }
}

/// A replica's two halves: the handle its partition keeps, and what its driver takes.
pub(crate) fn channel() -> (ReplicaHandle, DriverInbox) {
    let (events, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        leading: Mutex::new(None),
        commit: watch::Sender::new(Commit::default()),
        appended: Notify::new(),
        progress: Mutex::new(Vec::new()),
        caught_up: Mutex::new(None),
        quorum_contact_age_ms: AtomicU64::new(u64::MAX),
        assigned: Mutex::new(None),
        // Messages without batches take no bytes and always fit.
        peer_budget: ByteBudget::new(PEER_QUEUE_BYTES, 0),
        recent: Mutex::new(RecentAppends::new(RECENT_BYTES_MAX)),
    });
    let handle = ReplicaHandle {
        events,
        shared: shared.clone(),
    };
    (handle, DriverInbox { events: rx, shared })
}

/// The driver's side of a replica: the events its handle sends, and the state it publishes.
#[derive(Debug)]
pub(crate) struct DriverInbox {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub shared: Arc<Shared>,
}

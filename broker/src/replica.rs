//! The driver of a replicated partition: one task per partition replica that feeds the
//! replication state machine ([`floe_replication::Replica`]) with what happens — the
//! controlplane's assignments, peers' messages, the producer's appends, the log's syncs, the
//! time — and carries out its outputs in order against the partition's hot log, the peer
//! port and the controlplane, under the contract written on [`floe_replication::Output`].
//!
//! Producers append only through [`ReplicaHandle::append`], under the same lock the driver
//! holds while it changes the log or the role, so no producer batch lands in a log that is
//! following another leader, and the state machine always sees every append before anything
//! else happens to the log.

mod recent;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use floe_client::rest::Controlplane;
use floe_hot_log::{Appended, Log, LogError};
use floe_replication::{Config, Message, Output, Replica, WireBatch, log_view, to_wire};
use floe_wire::admin::{ElectionOutcome, ElectionReport};
use floe_wire::{BrokerId, ControlKind, Offset, PartitionId, StreamName};
use tokio::sync::{Notify, mpsc, watch};

use crate::budget::ByteBudget;
use crate::partitions::Partition;
use crate::peer::Peers;
use crate::server::BrokerState;
use recent::{RECENT_BYTES_MAX, RecentAppends, ShippingLog};

/// File in the partition's directory holding the newest epoch this replica promised.
const PROMISE_FILE: &str = "replica-promise";
/// How often the leader's heartbeats and retries are checked.
const TICK: Duration = Duration::from_millis(10);
/// How often the high watermark is checkpointed to disk when it moved.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// What the controlplane says about this partition (one assignment version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub epoch: u64,
    pub leader: Option<BrokerId>,
    pub electing: bool,
    pub replicas: Vec<BrokerId>,
    /// The set being left while the replica set changes; empty otherwise.
    pub previous: Vec<BrokerId>,
}

/// What producers and consumers see of a replica: the epoch it leads, if any, and the high
/// watermark below which records are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Commit {
    pub leading: Option<u32>,
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
enum Event {
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
pub enum ReplicaError {
    #[error("this broker does not lead the partition")]
    NotLeader,
    #[error(transparent)]
    Log(#[from] LogError),
}

/// The producer's and consumer's side of a partition replica.
#[derive(Debug)]
pub struct ReplicaHandle {
    events: mpsc::UnboundedSender<Event>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The epoch this replica leads. Producers append under this lock; the driver holds it
    /// while it changes the role or the log.
    leading: Mutex<Option<u32>>,
    commit: watch::Sender<Commit>,
    appended: Notify,
    /// On a leader: each follower's acked end.
    progress: Mutex<Vec<(u32, u64)>>,
    /// On a leader while its replica set changes: the new set, once a majority of it holds
    /// everything committed (see `Replica::new_set_holds_committed`).
    caught_up: Mutex<Option<Vec<u32>>>,
    /// On a leader: how long since a majority was last in contact, in milliseconds
    /// (`u64::MAX` when not leading; see `Replica::quorum_contact_age_ms`).
    quorum_contact_age_ms: AtomicU64,
    /// The leader and epoch of the latest assignment, for clients asking where to go.
    assigned: Mutex<Option<(BrokerId, u64)>>,
    /// Record bytes in peer messages queued for the driver (see [`PEER_QUEUE_BYTES`]).
    peer_budget: ByteBudget,
    /// On a leader with followers: its newest appends, to ship from memory. Locked after
    /// `leading`, never before.
    recent: Mutex<RecentAppends>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Option<u32>> {
        self.leading.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recent(&self) -> MutexGuard<'_, RecentAppends> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ReplicaHandle {
    /// Starts the driver of `partition`'s replica; it runs until [`ReplicaHandle::stop`].
    pub fn start(partition: &Arc<Partition>, context: ReplicaContext) -> ReplicaHandle {
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
        tokio::spawn(run(partition.clone(), shared.clone(), rx, context));
        ReplicaHandle { events, shared }
    }

    /// Stops the driver (the partition is closing).
    pub fn stop(&self) {
        let _ = self.events.send(Event::Stop);
    }

    pub fn assign(&self, assignment: Assignment) {
        *self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            assignment.leader.map(|leader| (leader, assignment.epoch));
        let _ = self.events.send(Event::Assign(assignment));
    }

    fn deliver(&self, from: u32, message: Message<WireBatch>) {
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
    pub fn assigned_leader(&self) -> Option<(BrokerId, u64)> {
        *self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn commit(&self) -> Commit {
        *self.shared.commit.borrow()
    }

    /// On a leader, each follower's acked end; empty otherwise.
    pub fn follower_progress(&self) -> Vec<(u32, u64)> {
        self.shared
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// On a leader while its replica set changes: the new set, once a majority of it holds
    /// every committed record; `None` otherwise.
    pub fn new_set_caught_up(&self) -> Option<Vec<u32>> {
        self.shared
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// On a leader: how long since it last heard from enough followers to make a majority
    /// with itself; `None` when not leading.
    pub fn quorum_contact_age(&self) -> Option<Duration> {
        match self.shared.quorum_contact_age_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    pub fn watch_commit(&self) -> watch::Receiver<Commit> {
        self.shared.commit.subscribe()
    }

    /// Appends a producer's batch in the epoch this replica leads.
    pub fn append(&self, log: &Log, batch: &[u8]) -> Result<(Appended, u32), ReplicaError> {
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
    pub fn appended(&self) {
        self.shared.appended.notify_one();
    }

    /// Waits until the records below `end`, appended in `epoch`, are committed (held durably
    /// by a majority); fails once this replica no longer leads `epoch`.
    pub async fn wait_committed(&self, end: u64, epoch: u32) -> Result<(), ReplicaError> {
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

/// What every replica driver of this broker shares.
#[derive(Debug, Clone)]
pub struct ReplicaContext {
    pub me: BrokerId,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub peers: Arc<Peers>,
    pub controlplane: Controlplane,
}

/// Hands a peer's message to the replica of its partition; dropped when this broker holds
/// no replica of it.
pub fn deliver(
    state: &BrokerState,
    from: BrokerId,
    stream: &StreamName,
    partition: PartitionId,
    message: Message<WireBatch>,
) {
    match state.partitions.get(stream.as_str(), partition.get()) {
        Some(p) => match p.replica() {
            Some(replica) => replica.deliver(from.get(), message),
            None => {
                tracing::debug!(%stream, partition = partition.get(), "a peer message for an unreplicated partition")
            }
        },
        None => {
            tracing::trace!(%stream, partition = partition.get(), "a peer message for a partition not held here")
        }
    }
}

/// Reads the promise file; 0 when there is none yet.
fn read_promise(path: &PathBuf) -> anyhow::Result<u32> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("{} holds `{}`: {e}", path.display(), text.trim())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Runs blocking disk work (an fsync) without stalling the runtime's other tasks.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Driver {
    partition: Arc<Partition>,
    shared: Arc<Shared>,
    context: ReplicaContext,
    replica: Replica,
    promise_path: PathBuf,
    stream: StreamName,
    checkpointed: u64,
    last_checkpoint: Instant,
    /// A fault the driver cannot carry out; the replica stops taking part.
    failed: Option<String>,
}

async fn run(
    partition: Arc<Partition>,
    shared: Arc<Shared>,
    mut events: mpsc::UnboundedReceiver<Event>,
    context: ReplicaContext,
) {
    let Some(mut driver) = recover(partition, shared, context).await else {
        return;
    };
    let mut synced = driver.partition.log.sync_status();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shared = driver.shared.clone();
    while driver.failed.is_none() {
        tokio::select! {
            event = events.recv() => match event {
                None | Some(Event::Stop) => break,
                Some(Event::Assign(assignment)) => driver.assign(&assignment),
                Some(Event::Peer { from, message, bytes }) => {
                    shared.peer_budget.release(bytes);
                    driver.step(|replica, log| replica.on_message(from, message, log));
                }
            },
            () = shared.appended.notified() => driver.step(|_, _| Vec::new()),
            changed = synced.changed() => {
                if changed.is_err() {
                    break;
                }
                let end = driver.partition.log.synced_end().get();
                driver.step(|replica, _| replica.on_synced(end));
            }
            _ = tick.tick() => {
                let now = now_ms();
                driver.step(|replica, log| replica.tick(now, log));
                driver.checkpoint();
            }
        }
    }
    if let Some(reason) = &driver.failed {
        tracing::error!(stream = %driver.stream, partition = driver.partition.id, %reason, "replica stopped");
    }
    *shared.lock() = None;
    shared
        .quorum_contact_age_ms
        .store(u64::MAX, Ordering::Relaxed);
    shared.commit.send_modify(|c| c.leading = None);
}

/// Builds the state machine from the durable log and the promise file.
async fn recover(
    partition: Arc<Partition>,
    shared: Arc<Shared>,
    context: ReplicaContext,
) -> Option<Driver> {
    let log = &partition.log;
    let promise_path = log.dir().join(PROMISE_FILE);
    let Ok(stream) = StreamName::new(partition.stream.clone()) else {
        return None;
    };
    // The state machine takes the recovered log as durable: sync it first.
    if let Err(e) = log.wait_synced(log.log_end()).await {
        tracing::error!(%stream, partition = partition.id, error = %e, "cannot sync the log to start replicating");
        return None;
    }
    let promised = match read_promise(&promise_path) {
        Ok(promised) => promised,
        Err(e) => {
            tracing::error!(%stream, partition = partition.id, error = %e, "cannot read the replica's promise");
            return None;
        }
    };
    let high_watermark = log.high_watermark().get();
    let replica = Replica::recover(
        context.me.get(),
        Config::default(),
        promised,
        log_view(log),
        high_watermark,
        now_ms(),
    );
    shared.commit.send_replace(Commit {
        leading: None,
        high_watermark: replica.high_watermark(),
    });
    tracing::info!(%stream, partition = partition.id, promised, log_end = %log.log_end(), "replica recovered");
    Some(Driver {
        partition,
        shared,
        context,
        replica,
        promise_path,
        stream,
        checkpointed: high_watermark,
        last_checkpoint: Instant::now(),
        failed: None,
    })
}

impl Driver {
    fn assign(&mut self, assignment: &Assignment) {
        let Ok(epoch) = u32::try_from(assignment.epoch) else {
            self.failed = Some(format!("epoch {} out of range", assignment.epoch));
            return;
        };
        let me = self.context.me;
        let replicas: Vec<u32> = assignment.replicas.iter().map(|b| b.get()).collect();
        let previous: Vec<u32> = assignment.previous.iter().map(|b| b.get()).collect();
        if assignment.electing {
            self.step(|replica, _| replica.prepare(epoch));
        } else if assignment.leader == Some(me) {
            // Again in the same epoch: the replica set changed (see `Replica::reconfigure`).
            self.step(|replica, log| replica.become_leader(epoch, &replicas, &previous, log));
        } else if let Some(leader) = assignment.leader {
            self.step(|replica, _| replica.become_follower(epoch, leader.get()));
        }
    }

    /// One step under the append lock: the state machine first learns of producer appends
    /// it has not seen, then handles the event; the outputs are carried out in order.
    fn step(
        &mut self,
        event: impl FnOnce(&mut Replica, &ShippingLog<'_>) -> Vec<Output<WireBatch>>,
    ) {
        let shared = self.shared.clone();
        let mut leading = shared.lock();
        let log = &self.partition.log;
        let end = log.log_end().get();
        // Local retention dropped tiered segments (committed data only).
        let start = log.log_start().get();
        if start > self.replica.log().start && start <= self.replica.high_watermark() {
            self.replica.on_log_start(start);
        }
        let mut outputs = Vec::new();
        {
            let mut recent = shared.recent();
            let shipping = ShippingLog {
                log,
                recent: &recent,
            };
            if end > self.replica.log().end {
                outputs.extend(self.replica.on_appended(end, &shipping));
            }
            outputs.extend(event(&mut self.replica, &shipping));
            // What every follower acknowledged is not shipped again from memory; a
            // replica that does not lead keeps nothing.
            match self.replica.leader_epoch() {
                Some(_) => {
                    let acked = self
                        .replica
                        .follower_progress()
                        .iter()
                        .map(|(_, m)| *m)
                        .min();
                    recent.release_below(acked.unwrap_or(u64::MAX));
                }
                None => recent.clear(),
            }
        }
        for output in outputs {
            if let Err(reason) = self.carry_out(output) {
                self.failed = Some(reason);
                break;
            }
        }
        *leading = if self.failed.is_none() {
            self.replica.leader_epoch()
        } else {
            None
        };
        let commit = Commit {
            leading: *leading,
            high_watermark: self.replica.high_watermark(),
        };
        drop(leading);
        if commit.leading.is_some() && self.shared.commit.borrow().leading.is_none() {
            self.context.metrics.replica_leaderships.inc();
            tracing::info!(stream = %self.stream, partition = self.partition.id, epoch = commit.leading, "leading");
        }
        *self
            .shared
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.replica.follower_progress();
        *self
            .shared
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.replica.new_set_holds_committed();
        self.shared.quorum_contact_age_ms.store(
            self.replica.quorum_contact_age_ms().unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.shared.commit.send_if_modified(|c| {
            let changed = *c != commit;
            *c = commit;
            changed
        });
    }

    fn carry_out(&mut self, output: Output<WireBatch>) -> Result<(), String> {
        let log = &self.partition.log;
        match output {
            Output::PersistEpoch(epoch) => {
                let path = self.promise_path.clone();
                blocking(|| crate::catalog::write_atomically(&path, epoch.to_string().as_bytes()))
                    .map_err(|e| format!("persisting the promise of epoch {epoch}: {e:#}"))?;
            }
            Output::Send { to, message } => {
                let wire = to_wire(&self.stream, PartitionId::new(self.partition.id), message);
                self.context.peers.send(BrokerId::new(to), &wire);
            }
            Output::Write(batches) => {
                for batch in batches {
                    log.append_replicated(batch.bytes())
                        .map_err(|e| format!("appending a replicated batch: {e}"))?;
                }
            }
            Output::Truncate(to) => {
                self.shared.recent().clear();
                blocking(|| log.truncate(Offset::new(to)))
                    .map_err(|e| format!("truncating at {to}: {e}"))?;
                self.context.metrics.replica_truncations.inc();
                tracing::info!(stream = %self.stream, partition = self.partition.id, to, "truncated a tail the leader does not hold");
            }
            Output::Reset { start, base_epoch } => {
                self.shared.recent().clear();
                // The leader's local log starts above where the two logs agree: everything
                // below `start` is committed and in object storage.
                blocking(|| log.reset(Offset::new(start), base_epoch))
                    .map_err(|e| format!("resetting the log to start at {start}: {e}"))?;
                self.context.metrics.replica_resets.inc();
                tracing::warn!(stream = %self.stream, partition = self.partition.id, start, "reset the log to the leader's start");
            }
            Output::HighWatermark(_) => {}
            Output::MarkEpochStart { epoch } => {
                // Under the append lock (this is a step): before any producer's append.
                let (appended, batch) = log
                    .append_control(ControlKind::EpochStart, epoch, crate::tiering::now_ms())
                    .map_err(|e| format!("appending the start of epoch {epoch}: {e}"))?;
                if !self.replica.follower_progress().is_empty() {
                    self.shared
                        .recent()
                        .push_appended(&batch, appended.base_offset, epoch);
                }
                // The next step tells the state machine, which ships it.
                self.shared.appended.notify_one();
                tracing::info!(stream = %self.stream, partition = self.partition.id, epoch, offset = %appended.base_offset, "marked the start of the epoch to commit the tail it inherited");
            }
            Output::Report {
                epoch,
                last_epoch,
                end,
            } => self.report(
                epoch,
                ElectionOutcome::Reported {
                    last_epoch: u64::from(last_epoch),
                    end,
                },
            ),
            Output::Refused { epoch } => {
                let promised = u64::from(self.replica.promised_epoch());
                self.report(epoch, ElectionOutcome::Refused { promised });
            }
            Output::Deposed { epoch } => {
                tracing::info!(stream = %self.stream, partition = self.partition.id, epoch, "no longer the leader");
            }
        }
        Ok(())
    }

    /// Sends an election answer to the controlplane in the background, with a few retries
    /// (a lost one costs an election timeout, never safety).
    fn report(&self, epoch: u32, outcome: ElectionOutcome) {
        let Ok(stream) = StreamName::new(self.partition.stream.clone()) else {
            return;
        };
        let report = ElectionReport {
            stream,
            partition: PartitionId::new(self.partition.id),
            epoch: u64::from(epoch),
            outcome,
        };
        let controlplane = self.context.controlplane.clone();
        let me = self.context.me;
        tracing::info!(stream = %report.stream, partition = report.partition.get(), epoch, ?outcome, "election answer");
        tokio::spawn(async move {
            for _ in 0..5 {
                match controlplane.report_election(me, &report).await {
                    Ok(()) => return,
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "election answer failed; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "election answer refused");
                        return;
                    }
                }
            }
        });
    }

    /// Stores the high watermark the state machine allows, when it moved and a second passed.
    fn checkpoint(&mut self) {
        let checkpoint = self.replica.checkpoint_high_watermark();
        if checkpoint <= self.checkpointed || self.last_checkpoint.elapsed() < CHECKPOINT_EVERY {
            return;
        }
        let log = &self.partition.log;
        match blocking(|| log.store_high_watermark(Offset::new(checkpoint))) {
            Ok(()) => {
                self.checkpointed = checkpoint;
                self.last_checkpoint = Instant::now();
            }
            Err(e) => self.failed = Some(format!("checkpointing the high watermark: {e}")),
        }
    }
}

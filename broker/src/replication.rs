//! The replication driver: one task per partition replica that feeds the replication state
//! machine ([`floe_replication::Replica`]) with what happens — the controlplane's
//! assignments, peers' messages, the producer's appends, the log's syncs, the time — and
//! carries out its outputs in order against the partition's hot log, the peer port and the
//! controlplane, under the contract written on [`floe_replication::Output`].
//!
//! Below it sit the partition and its replica's shared state (`crate::partition::replica`),
//! which producers and consumers use; above it, the controlplane session assigns, and the
//! peer port delivers.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use floe_client::rest::Controlplane;
use floe_replication::{Config, Message, Output, Replica, WireBatch, log_view, to_wire};
use floe_wire::admin::{ElectionOutcome, ElectionReport};
use floe_wire::{BrokerId, ControlKind, LeaderEpoch, Offset, PartitionId, StreamName};

use crate::clock;
use crate::partition::Partition;
use crate::partition::recent::ShippingLog;
use crate::partition::replica::{
    self, Assignment, Commit, DriverInbox, Event, ReplicaHandle, Shared,
};
use crate::partitions::Partitions;
use crate::peer::{self, Peers};
use floe_wire::ErrorChain;

/// File in the partition's directory holding the newest epoch this replica promised.
const PROMISE_FILE: &str = "replica-promise";
/// How often the leader's heartbeats and retries are checked.
const TICK: Duration = Duration::from_millis(10);
/// How often the high watermark is checkpointed to disk when it moved.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// How long a replica stopped by a full disk waits before it recovers from its log and
/// tries again.
const DISK_FULL_PAUSE: Duration = Duration::from_secs(1);

/// What every replica driver of this broker shares, and the way to start one: a partition's
/// replica is started on its first assignment.
#[derive(Debug, Clone)]
pub(crate) struct Replication {
    me: BrokerId,
    metrics: Arc<crate::metrics::Metrics>,
    peers: Arc<Peers>,
    controlplane: Controlplane,
    partitions: Arc<Partitions>,
}

impl Replication {
    pub(crate) fn new(
        me: BrokerId,
        metrics: Arc<crate::metrics::Metrics>,
        peers: Arc<Peers>,
        controlplane: Controlplane,
        partitions: Arc<Partitions>,
    ) -> Replication {
        Replication {
            me,
            metrics,
            peers,
            controlplane,
            partitions,
        }
    }

    /// The peers, for the client endpoints of other brokers.
    pub(crate) fn peers(&self) -> &Peers {
        &self.peers
    }

    /// `partition`'s replica, its driver started now when it was not.
    pub(crate) fn start<'p>(&self, partition: &'p Arc<Partition>) -> &'p ReplicaHandle {
        partition.replica_or_start(|| {
            let (handle, inbox) = replica::channel();
            tokio::spawn(run(partition.clone(), inbox, self.clone()));
            handle
        })
    }
}

impl peer::Inbox for Replication {
    /// Hands a peer's message to the replica of its partition; dropped when this broker
    /// holds no replica of it.
    fn deliver(
        &self,
        from: BrokerId,
        stream: &StreamName,
        partition: PartitionId,
        message: Message<WireBatch>,
    ) {
        match self.partitions.get(stream.as_str(), partition.get()) {
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
}

/// Why a replica's driver stopped: a fault it cannot carry out. The replica takes no
/// further part until the partition is opened again, the others going on without it; a
/// full disk only pauses it ([`Fault::is_disk_full`]).
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("cannot read the replica's promise {path}")]
    ReadPromise {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the replica's promise {path} holds `{text}`, not an epoch")]
    BadPromise { path: PathBuf, text: String },
    #[error("persisting the promise of epoch {epoch}")]
    PersistPromise {
        epoch: LeaderEpoch,
        #[source]
        source: crate::state_file::StateFileError,
    },
    #[error("cannot {op}")]
    Log {
        op: String,
        #[source]
        source: floe_hot_log::LogError,
    },
}

impl Fault {
    /// A full disk, which changed nothing: the log stays writable (an append or a state
    /// file refused before it was replaced), so the replica can recover from it in place
    /// once space is freed, as after a restart. Any other fault, a full disk part-way
    /// through a truncation or reset included (the log then refuses writes until it is
    /// reopened), stops the replica until the partition is opened again.
    fn is_disk_full(&self) -> bool {
        match self {
            Fault::Log { source, .. } => matches!(source, floe_hot_log::LogError::DiskFull { .. }),
            Fault::PersistPromise { source, .. } => source.is_disk_full(),
            Fault::ReadPromise { .. } | Fault::BadPromise { .. } => false,
        }
    }
}

fn log_fault(op: impl Into<String>) -> impl FnOnce(floe_hot_log::LogError) -> Fault {
    let op = op.into();
    move |source| Fault::Log { op, source }
}

/// Reads the promise file; 0 when there is none yet.
fn read_promise(path: &PathBuf) -> Result<LeaderEpoch, Fault> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .trim()
            .parse()
            .map(LeaderEpoch::new)
            .map_err(|_| Fault::BadPromise {
                path: path.clone(),
                text: text.trim().to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LeaderEpoch::ZERO),
        Err(source) => Err(Fault::ReadPromise {
            path: path.clone(),
            source,
        }),
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

struct Driver {
    partition: Arc<Partition>,
    shared: Arc<Shared>,
    context: Replication,
    replica: Replica,
    promise_path: PathBuf,
    stream: StreamName,
    checkpointed: u64,
    last_checkpoint: Instant,
    /// A fault the driver cannot carry out; the replica stops taking part.
    failed: Option<Fault>,
}

/// Runs a partition's replica until it is stopped or meets a fault. A full disk pauses it:
/// it waits, then recovers from its log (as a restarted broker would, in a new incarnation)
/// and takes up the controlplane's latest assignment again, until space is freed.
async fn run(partition: Arc<Partition>, inbox: DriverInbox, context: Replication) {
    let DriverInbox { mut events, shared } = inbox;
    // The controlplane's latest word on the partition, applied again after a pause.
    let mut assignment = None;
    loop {
        let Some(mut driver) = recover(partition.clone(), shared.clone(), context.clone()).await
        else {
            break;
        };
        if let Some(assignment) = &assignment {
            driver.assign(assignment);
        }
        let fault = driver.serve(&mut events, &mut assignment).await;
        stand_down(&shared);
        match fault {
            None => return,
            Some(reason) if reason.is_disk_full() => {
                tracing::warn!(stream = %driver.stream, partition = partition.id(), reason = %ErrorChain(&reason), "replica paused: the disk is full; it recovers from its log once space is freed");
                context.metrics.replica_disk_full_pauses.inc();
                if !pause(&mut events, &mut assignment, &shared).await {
                    return;
                }
            }
            Some(reason) => {
                tracing::error!(stream = %driver.stream, partition = partition.id(), reason = %ErrorChain(&reason), "replica stopped");
                return;
            }
        }
    }
    stand_down(&shared);
}

/// What producers, consumers and heartbeats see of a replica that takes no part: it leads
/// nothing, and waiting acks fail.
fn stand_down(shared: &Shared) {
    *shared.lock() = None;
    shared
        .quorum_contact_age_ms
        .store(u64::MAX, Ordering::Relaxed);
    shared.commit.send_modify(|c| c.leading = None);
}

/// Waits [`DISK_FULL_PAUSE`], keeping the latest assignment and dropping peer messages (the
/// leader sends again). False when the replica is stopped meanwhile.
async fn pause(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>,
    assignment: &mut Option<Assignment>,
    shared: &Shared,
) -> bool {
    let until = tokio::time::Instant::now() + DISK_FULL_PAUSE;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                None | Some(Event::Stop) => return false,
                Some(Event::Assign(latest)) => *assignment = Some(latest),
                Some(Event::Peer { bytes, .. }) => shared.peer_budget.release(bytes),
            },
            () = tokio::time::sleep_until(until) => return true,
        }
    }
}

/// Builds the state machine from the durable log and the promise file.
async fn recover(
    partition: Arc<Partition>,
    shared: Arc<Shared>,
    context: Replication,
) -> Option<Driver> {
    let log = partition.log();
    let promise_path = log.dir().join(PROMISE_FILE);
    let Ok(stream) = StreamName::new(partition.stream().to_string()) else {
        return None;
    };
    // The state machine takes the recovered log as durable: sync it first.
    if let Err(e) = log.wait_synced(log.log_end()).await {
        tracing::error!(%stream, partition = partition.id(), error = %e, "cannot sync the log to start replicating");
        return None;
    }
    let promised = match read_promise(&promise_path) {
        Ok(promised) => promised,
        Err(e) => {
            tracing::error!(%stream, partition = partition.id(), error = %ErrorChain(&e), "cannot read the replica's promise");
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
        clock::now_ms_unsigned(),
    );
    shared.commit.send_replace(Commit {
        leading: None,
        high_watermark: replica.high_watermark(),
    });
    tracing::info!(%stream, partition = partition.id(), %promised, log_end = %log.log_end(), "replica recovered");
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
    /// Feeds the state machine until the replica is stopped (`None`) or meets a fault,
    /// keeping the latest assignment in `assignment`.
    async fn serve(
        &mut self,
        events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>,
        assignment: &mut Option<Assignment>,
    ) -> Option<Fault> {
        let mut synced = self.partition.log().sync_status();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shared = self.shared.clone();
        while self.failed.is_none() {
            tokio::select! {
                event = events.recv() => match event {
                    None | Some(Event::Stop) => return None,
                    Some(Event::Assign(latest)) => {
                        self.assign(&latest);
                        *assignment = Some(latest);
                    }
                    Some(Event::Peer { from, message, bytes }) => {
                        shared.peer_budget.release(bytes);
                        self.step(|replica, log| replica.on_message(from, message, log));
                    }
                },
                () = shared.appended.notified() => self.step(|_, _| Vec::new()),
                changed = synced.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    let end = self.partition.log().synced_end().get();
                    self.step(|replica, _| replica.on_synced(end));
                }
                _ = tick.tick() => {
                    let now = clock::now_ms_unsigned();
                    self.step(|replica, log| replica.tick(now, log));
                    self.checkpoint();
                }
            }
        }
        self.failed.take()
    }

    fn assign(&mut self, assignment: &Assignment) {
        let epoch = assignment.epoch;
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
        let outputs = self.feed(&shared, event);
        self.carry_out_all(outputs);
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
        self.publish(commit);
    }

    /// The state machine's outputs for the producer appends it has not seen and for `event`;
    /// the leader's appends in memory trimmed to what followers still need. Under the
    /// append lock.
    fn feed(
        &mut self,
        shared: &Shared,
        event: impl FnOnce(&mut Replica, &ShippingLog<'_>) -> Vec<Output<WireBatch>>,
    ) -> Vec<Output<WireBatch>> {
        let log = self.partition.log();
        let end = log.log_end().get();
        // Local retention dropped tiered segments (committed data only).
        let start = log.log_start().get();
        if start > self.replica.log().start && start <= self.replica.high_watermark() {
            self.replica.on_log_start(start);
        }
        let mut outputs = Vec::new();
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
        outputs
    }

    /// Carries out `outputs` in order, up to the first fault, which stops the replica.
    fn carry_out_all(&mut self, outputs: Vec<Output<WireBatch>>) {
        for output in outputs {
            if let Err(reason) = self.carry_out(output) {
                self.failed = Some(reason);
                break;
            }
        }
    }

    /// Publishes what a step changed in the replica's shared state (the commit producers and
    /// consumers watch, what heartbeats report), once the append lock is released.
    fn publish(&self, commit: Commit) {
        if commit.leading.is_some() && self.shared.commit.borrow().leading.is_none() {
            self.context.metrics.replica_leaderships.inc();
            tracing::info!(stream = %self.stream, partition = self.partition.id(), epoch = commit.leading.map(LeaderEpoch::get), "leading");
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

    fn carry_out(&mut self, output: Output<WireBatch>) -> Result<(), Fault> {
        let log = self.partition.log();
        match output {
            Output::PersistEpoch(epoch) => {
                let path = self.promise_path.clone();
                blocking(|| {
                    crate::state_file::write_atomically(&path, epoch.to_string().as_bytes())
                })
                .map_err(|source| Fault::PersistPromise { epoch, source })?;
            }
            Output::Send { to, message } => {
                let wire = to_wire(&self.stream, PartitionId::new(self.partition.id()), message);
                self.context.peers.send(BrokerId::new(to), &wire);
            }
            Output::Write(batches) => {
                for batch in batches {
                    log.append_replicated(batch.bytes())
                        .map_err(log_fault("append a replicated batch"))?;
                }
            }
            Output::Truncate(to) => {
                self.shared.recent().clear();
                blocking(|| log.truncate(Offset::new(to)))
                    .map_err(log_fault(format!("truncate at {to}")))?;
                self.context.metrics.replica_truncations.inc();
                tracing::info!(stream = %self.stream, partition = self.partition.id(), to, "truncated a tail the leader does not hold");
            }
            Output::Reset { start, base_epoch } => {
                self.shared.recent().clear();
                // The leader's local log starts above where the two logs agree: everything
                // below `start` is committed and in object storage.
                blocking(|| log.reset(Offset::new(start), base_epoch))
                    .map_err(log_fault(format!("reset the log to start at {start}")))?;
                self.context.metrics.replica_resets.inc();
                tracing::warn!(stream = %self.stream, partition = self.partition.id(), start, "reset the log to the leader's start");
            }
            Output::HighWatermark(_) => {}
            Output::MarkEpochStart { epoch } => {
                // Under the append lock (this is a step): before any producer's append.
                let (appended, batch) = log
                    .append_control(ControlKind::EpochStart, epoch, clock::now_ms())
                    .map_err(log_fault(format!("append the start of epoch {epoch}")))?;
                if !self.replica.follower_progress().is_empty() {
                    self.shared
                        .recent()
                        .push_appended(&batch, appended.base_offset, epoch);
                }
                // The next step tells the state machine, which ships it.
                self.shared.appended.notify_one();
                tracing::info!(stream = %self.stream, partition = self.partition.id(), %epoch, offset = %appended.base_offset, "marked the start of the epoch to commit the tail it inherited");
            }
            Output::Report {
                epoch,
                last_epoch,
                end,
            } => self.report(epoch, ElectionOutcome::Reported { last_epoch, end }),
            Output::Refused { epoch } => {
                let promised = self.replica.promised_epoch();
                self.report(epoch, ElectionOutcome::Refused { promised });
            }
            Output::Deposed { epoch } => {
                tracing::info!(stream = %self.stream, partition = self.partition.id(), %epoch, "no longer the leader");
            }
        }
        Ok(())
    }

    /// Sends an election answer to the controlplane in the background, with a few retries
    /// (a lost one costs an election timeout, never safety).
    fn report(&self, epoch: LeaderEpoch, outcome: ElectionOutcome) {
        let Ok(stream) = StreamName::new(self.partition.stream().to_string()) else {
            return;
        };
        let report = ElectionReport {
            stream,
            partition: PartitionId::new(self.partition.id()),
            epoch,
            outcome,
        };
        let controlplane = self.context.controlplane.clone();
        let me = self.context.me;
        tracing::info!(stream = %report.stream, partition = report.partition.get(), %epoch, ?outcome, "election answer");
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
        let log = self.partition.log();
        match blocking(|| log.store_high_watermark(Offset::new(checkpoint))) {
            Ok(()) => {
                self.checkpointed = checkpoint;
                self.last_checkpoint = Instant::now();
            }
            // The checkpoint only spares a restart some catching up, and the older one is
            // untouched: try again in a while.
            Err(floe_hot_log::LogError::DiskFull { .. }) => {
                tracing::debug!(stream = %self.stream, partition = self.partition.id(), "no space to checkpoint the high watermark");
                self.last_checkpoint = Instant::now();
            }
            Err(e) => self.failed = Some(log_fault("checkpoint the high watermark")(e)),
        }
    }
}

//! The state the API handlers and the leader's loops share: the store, the settings, this
//! controlplane's role, the assignment version brokers long-poll on, the lock that
//! serialises writes, the flag that asks for a placement repair, the ballots of running
//! partition elections, the brokers' history reads and the metrics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{MutexGuard as BallotsGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floe_wire::admin::{CorruptReplica, CorruptReport, Role, StreamDescription};
use floe_wire::{BrokerId, PartitionId, StreamName};
use tokio::sync::{Mutex, MutexGuard, Notify, mpsc, watch};

use crate::api::PendingCommit;
use crate::auth::Auth;
use crate::config::Config;
use crate::groups::Coordinator;
use crate::metrics::Metrics;
use crate::partition_election::Ballots;
use crate::store::{Store, StoreError};

/// Commit requests waiting for the writer; more wait for room (the HTTP layer holds them).
const COMMITS_QUEUED: usize = 4096;

/// Shared by every handler and loop of one controlplane.
#[derive(Debug)]
pub(crate) struct Cluster<S> {
    pub(crate) store: S,
    pub(crate) config: Config,
    /// Who callers are; `None` without authentication.
    pub(crate) auth: Option<Auth>,
    role: watch::Sender<Role>,
    /// The latest assignment version. Only the leader writes, so its own writes are all
    /// there is to notice; a new leader reloads it from the store before it serves.
    versions: watch::Sender<u64>,
    /// Held across every read-modify-write of the store (placement reads loads, then writes).
    writes: Mutex<()>,
    repair_needed: AtomicBool,
    /// When a replica set next becomes due for the replacement of a dead member (ms since
    /// the Unix epoch; `u64::MAX`: none known). In memory: a controlplane that takes over
    /// repairs at once.
    replacement_due_ms: AtomicU64,
    wake_reconciler: Notify,
    /// Reports of running partition elections. Held only without awaiting, and only
    /// together with `writes`, so that a report and the store's state agree.
    ballots: std::sync::Mutex<Ballots>,
    /// Set on taking over: the next reconciler pass starts every running election again,
    /// since the reports sent to an earlier leader are lost.
    elections_lost: AtomicBool,
    /// Asks the reconciler to look for partitions without a live leader on its next pass.
    election_check: AtomicBool,
    /// Each broker's last reported history reads (bytes per second it served from the
    /// tier itself): the autoscaler's demand signal. Load data, kept in memory only; a new
    /// leader learns it with the next heartbeats.
    history_reads: std::sync::Mutex<HashMap<BrokerId, u64>>,
    /// The partitions each broker last reported in the `corrupt` state. In memory, like
    /// load data: every heartbeat carries the whole list.
    corrupt: std::sync::Mutex<HashMap<BrokerId, Vec<CorruptReport>>>,
    /// Consumer groups' live members and who reads what. In memory, on the leader only.
    pub(crate) groups: Coordinator,
    /// Offset commits waiting to be written together ([`crate::api::commit_offsets_loop`]).
    pub(crate) commits: mpsc::Sender<PendingCommit>,
    commits_queued: std::sync::Mutex<Option<mpsc::Receiver<PendingCommit>>>,
    /// What `GET /metrics` serves.
    pub(crate) metrics: Metrics,
    /// Turns true when the controlplane stops; cuts long-polls short.
    shutdown: watch::Receiver<bool>,
}

impl<S: Store> Cluster<S> {
    pub(crate) fn new(store: S, config: Config, shutdown: watch::Receiver<bool>) -> Cluster<S> {
        let (commits, queued) = mpsc::channel(COMMITS_QUEUED);
        Cluster {
            store,
            auth: config.auth.as_ref().map(Auth::new),
            config,
            role: watch::Sender::new(Role::Standby),
            versions: watch::Sender::new(0),
            writes: Mutex::new(()),
            repair_needed: AtomicBool::new(false),
            replacement_due_ms: AtomicU64::new(u64::MAX),
            wake_reconciler: Notify::new(),
            ballots: std::sync::Mutex::new(Ballots::default()),
            elections_lost: AtomicBool::new(false),
            election_check: AtomicBool::new(false),
            history_reads: std::sync::Mutex::new(HashMap::new()),
            corrupt: std::sync::Mutex::new(HashMap::new()),
            groups: Coordinator::default(),
            commits,
            commits_queued: std::sync::Mutex::new(Some(queued)),
            metrics: Metrics::new(),
            shutdown,
        }
    }

    pub(crate) fn role(&self) -> Role {
        *self.role.borrow()
    }

    pub(crate) fn watch_role(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// Becomes the leader: reload what the previous leader may have changed, then serve.
    ///
    /// Every live broker's lease is counted afresh from now: the previous leader's clock
    /// wrote the expiries, and this one may run ahead of it (another machine, or this one
    /// after its clock was stepped while the controlplane was down). A broker counts its
    /// lease from the heartbeat the previous leader answered, so it has stopped writing
    /// before this leader can declare it dead.
    pub(crate) async fn take_over(&self) -> Result<(), StoreError> {
        let lease_ms = u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX);
        self.store
            .extend_leases(now_ms().saturating_add(lease_ms))
            .await?;
        let version = self.store.assignment_version().await?;
        self.versions.send_replace(version);
        self.ballots().clear();
        self.groups.clear();
        self.elections_lost.store(true, Ordering::SeqCst);
        self.request_repair();
        self.role.send_replace(Role::Leader);
        self.metrics.leader.set(1);
        Ok(())
    }

    pub(crate) fn step_down(&self) {
        self.role.send_replace(Role::Standby);
        self.groups.clear();
        self.metrics.leader.set(0);
    }

    pub(crate) async fn write_lock(&self) -> MutexGuard<'_, ()> {
        self.writes.lock().await
    }

    /// Publishes a new assignment version to long-polling brokers.
    pub(crate) fn announce(&self, version: u64) {
        self.versions.send_if_modified(|current| {
            let newer = version > *current;
            if newer {
                *current = version;
            }
            newer
        });
    }

    pub(crate) fn version(&self) -> u64 {
        *self.versions.borrow()
    }

    /// Waits until the assignment version exceeds `after`, `timeout` passes or the
    /// controlplane stops.
    pub(crate) async fn wait_version_after(&self, after: u64, timeout: Duration) {
        let mut versions = self.versions.subscribe();
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = versions.wait_for(|version| *version > after) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
            () = tokio::time::sleep(timeout) => {}
        }
    }

    /// Asks the reconciler to look for misplaced partitions soon.
    pub(crate) fn request_repair(&self) {
        self.repair_needed.store(true, Ordering::SeqCst);
        self.wake_reconciler.notify_one();
    }

    /// Whether a replacement of a dead replica-set member is due by `now_ms`.
    pub(crate) fn replacement_due(&self, now_ms: u64) -> bool {
        now_ms >= self.replacement_due_ms.load(Ordering::SeqCst)
    }

    /// When the next replacement becomes due, as the last repair found (`u64::MAX`: none).
    pub(crate) fn set_replacement_due(&self, at_ms: u64) {
        self.replacement_due_ms.store(at_ms, Ordering::SeqCst);
    }

    pub(crate) fn take_repair_request(&self) -> bool {
        self.repair_needed.swap(false, Ordering::SeqCst)
    }

    /// The ballots of running partition elections; never held across an await.
    pub(crate) fn ballots(&self) -> BallotsGuard<'_, Ballots> {
        // A panic while holding them leaves at worst a partial ballot: still usable.
        self.ballots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether running elections' reports were lost since the last call (this controlplane
    /// took over); the caller puts it back with [`Cluster::lose_elections`] if it fails.
    pub(crate) fn take_elections_lost(&self) -> bool {
        self.elections_lost.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn lose_elections(&self) {
        self.elections_lost.store(true, Ordering::SeqCst);
    }

    /// Asks the reconciler to look for elections to start on its next pass (new electing
    /// partitions, whose timeout it must start counting).
    pub(crate) fn request_election_check(&self) {
        self.election_check.store(true, Ordering::SeqCst);
    }

    pub(crate) fn take_election_check(&self) -> bool {
        self.election_check.swap(false, Ordering::SeqCst)
    }

    /// Records what broker `id` reported of its history reads.
    pub(crate) fn record_history_reads(&self, id: BrokerId, bytes_per_second: u64) {
        let mut reads = self
            .history_reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if bytes_per_second == 0 {
            reads.remove(&id);
        } else {
            reads.insert(id, bytes_per_second);
        }
    }

    /// Records the partitions broker `id` holds in the `corrupt` state (all of them); true
    /// when one of them was not reported before.
    pub(crate) fn record_corrupt(&self, id: BrokerId, reports: &[CorruptReport]) -> bool {
        let mut corrupt = self.corrupt.lock().unwrap_or_else(PoisonError::into_inner);
        let known = |r: &CorruptReport, before: &[CorruptReport]| {
            before
                .iter()
                .any(|b| b.stream == r.stream && b.partition == r.partition)
        };
        let before = corrupt.get(&id).map(Vec::as_slice).unwrap_or_default();
        let new = reports.iter().any(|r| !known(r, before));
        if reports.is_empty() {
            corrupt.remove(&id);
        } else {
            corrupt.insert(id, reports.to_vec());
        }
        new
    }

    /// Every replica its broker last reported corrupt: `(broker, stream, partition)`.
    pub(crate) fn corrupt_members(&self) -> Vec<(BrokerId, StreamName, PartitionId)> {
        let corrupt = self.corrupt.lock().unwrap_or_else(PoisonError::into_inner);
        corrupt
            .iter()
            .flat_map(|(broker, reports)| {
                reports
                    .iter()
                    .map(|r| (*broker, r.stream.clone(), r.partition))
            })
            .collect()
    }

    /// Adds to `description` the replicas its brokers last reported corrupt.
    pub(crate) fn add_corrupt(&self, description: &mut StreamDescription) {
        let corrupt = self.corrupt.lock().unwrap_or_else(PoisonError::into_inner);
        for (broker, reports) in corrupt.iter() {
            for report in reports.iter().filter(|r| r.stream == description.name) {
                if let Some(partition) = description
                    .partitions
                    .iter_mut()
                    .find(|p| p.partition == report.partition)
                {
                    partition.corrupt.push(CorruptReplica {
                        broker_id: *broker,
                        segment: report.segment.clone(),
                        position: report.position,
                        damaged_start: report.damaged_start,
                        damaged_end: report.damaged_end,
                        reason: report.reason.clone(),
                    });
                    partition.corrupt.sort_by_key(|c| c.broker_id);
                }
            }
        }
    }

    /// The brokers' last reported history reads, per broker.
    pub(crate) fn history_reads(&self) -> HashMap<BrokerId, u64> {
        self.history_reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The queue of offset commits, for the one task that writes them; `None` after the
    /// first call.
    pub(crate) fn take_commit_queue(&self) -> Option<mpsc::Receiver<PendingCommit>> {
        self.commits_queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Waits until the controlplane stops, or `timeout` passes.
    pub(crate) async fn stopped_within(&self, timeout: Duration) -> bool {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => true,
            () = tokio::time::sleep(timeout) => false,
        }
    }

    pub(crate) async fn reconciler_woken(&self) {
        self.wake_reconciler.notified().await;
    }
}

/// Milliseconds since the Unix epoch: the shell's only clock. The wall clock is read once,
/// when this process first asks, and advanced by the monotonic clock from then on, so that a
/// step of the system clock never reaches it: a forward jump would otherwise expire every
/// broker's lease at once, before the brokers — which count their leases on their own
/// monotonic clocks — have stopped writing (`docs/controlplane.md`, "Fencing partitions
/// without replicas"). It parts from the wall clock only by the steps made since.
pub(crate) fn now_ms() -> u64 {
    static START: OnceLock<(u64, Instant)> = OnceLock::new();
    let (wall_ms, at) = START.get_or_init(|| {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            });
        (wall_ms, Instant::now())
    });
    let elapsed = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
    wall_ms.saturating_add(elapsed)
}

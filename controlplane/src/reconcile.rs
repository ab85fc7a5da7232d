//! The leader's loop: brokers and read replicas whose lease lapsed are declared dead (dead
//! read replicas are forgotten after a while); replicated partitions whose leader is not
//! live get an election (see [`crate::partition_election`]); unreplicated partitions
//! with their replica on a broker that is not live, or partitions with too few replicas,
//! are re-placed through [`crate::placement::repair`]; and replicated partitions with a
//! member on a broker dead for `replace_dead_after`, or draining, have it replaced
//! ([`replace_members`]).
//!
//! Leases decide only *when* replicas move or elections start, never whether data is
//! committed: both bump the partition's epoch (compare-and-set), which fences the old leader.
//! A replicated partition's set changes in two steps (see `docs/replication.md`): an
//! election over the old and the new set together, then — once the leader reports that a
//! majority of the new set holds everything committed — the new set alone.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use floe_wire::admin::{BrokerInfo, BrokerState, Role};
use floe_wire::{BrokerId, PartitionId, StreamName};
use tokio::sync::watch;

use crate::cluster::{Cluster, now_ms};
use crate::partition_election;
use crate::placement::{self, Candidate, Placer};
use crate::store::{MisplacedPartition, Reassignment, Store, StoreError};

/// Runs until `shutdown` turns true. Acts only while this controlplane leads. Besides every
/// `reconcile_interval`, it wakes when asked and just after the earliest lease expires, so
/// that a lapsed leader's partitions get their election at once.
pub(crate) async fn run<S: Store>(cluster: Arc<Cluster<S>>, mut shutdown: watch::Receiver<bool>) {
    let interval = cluster.config.reconcile_interval;
    let mut wait = interval;
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(wait) => {}
            () = cluster.reconciler_woken() => {}
        }
        wait = interval;
        if cluster.role() != Role::Leader {
            continue;
        }
        match tick(&cluster).await {
            Ok(Some(expiry)) => {
                // Just past it: `expire_leases` takes leases that expired at or before now.
                let until = expiry.saturating_add(1).saturating_sub(now_ms());
                wait = interval.min(Duration::from_millis(until));
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(error = %floe_wire::ErrorChain(&error), "reconciliation failed; retrying");
                cluster.request_repair();
            }
        }
    }
}

/// One pass: expire lapsed leases, repair placement if anything asked for it, then start
/// the elections that are due. Returns the next lease expiry.
///
/// Elections are looked for only when something may have made one due: a broker died, was
/// drained or registered, a stream was created, this controlplane took over, or a running
/// election reached its timeout. So a cluster with many partitions electing for a while
/// (brokers slow to report) is read once per timeout, not on every pass.
pub(crate) async fn tick<S: Store>(cluster: &Cluster<S>) -> Result<Option<u64>, StoreError> {
    let _writes = cluster.write_lock().await;
    let now = now_ms();
    let expired = cluster.store.expire_leases(now).await?;
    if !expired.is_empty() {
        tracing::info!(brokers = ?expired, "lease lapsed; broker declared dead");
        cluster
            .metrics
            .broker_leases_expired
            .inc_by(expired.len() as u64);
    }
    expire_read_replicas(cluster, now).await?;
    let changed = cluster.take_repair_request() || !expired.is_empty();
    if changed || cluster.replacement_due(now) {
        repair(cluster, now).await?;
    }
    let timeout_ms = millis(cluster.config.partition_election_timeout);
    // Every flag is taken before reading, so a request made during the read is kept.
    let lost = cluster.take_elections_lost();
    let asked = cluster.take_election_check();
    let timed_out = cluster.ballots().any_timed_out(now, timeout_ms);
    if (changed || lost || asked || timed_out)
        && let Err(error) = elect(cluster, lost, timeout_ms).await
    {
        cluster.request_election_check();
        if lost {
            cluster.lose_elections();
        }
        return Err(error);
    }
    cluster.store.next_lease_expiry().await
}

/// Read replicas whose lease lapsed are declared dead (clients stop routing to them; the
/// autoscaler replaces them); dead ones are forgotten `read_replica_forget_after` later.
async fn expire_read_replicas<S: Store>(cluster: &Cluster<S>, now: u64) -> Result<(), StoreError> {
    let expired = cluster.store.expire_read_replica_leases(now).await?;
    if !expired.is_empty() {
        tracing::info!(replicas = ?expired, "lease lapsed; read replica declared dead");
        cluster
            .metrics
            .read_replica_leases_expired
            .inc_by(expired.len() as u64);
    }
    let forget_ms = millis(cluster.config.read_replica_forget_after);
    let forgotten = cluster
        .store
        .forget_dead_read_replicas(now.saturating_sub(forget_ms))
        .await?;
    if !forgotten.is_empty() {
        tracing::info!(replicas = ?forgotten, "dead read replicas forgotten");
    }
    Ok(())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Starts the elections [`partition_election::plan`] finds due.
async fn elect<S: Store>(
    cluster: &Cluster<S>,
    lost: bool,
    timeout_ms: u64,
) -> Result<(), StoreError> {
    let leaderless = cluster.store.leaderless_partitions().await?;
    let starts = partition_election::plan(
        &leaderless,
        &mut cluster.ballots(),
        lost,
        now_ms(),
        timeout_ms,
    );
    if starts.is_empty() {
        return Ok(());
    }
    let version = cluster.store.start_elections(&starts).await?;
    tracing::info!(
        partitions = starts.len(),
        version,
        "started partition elections"
    );
    cluster.announce(version);
    Ok(())
}

/// Whether [`crate::placement::repair`] may re-place a partition, with `live_brokers` live.
/// An unreplicated one, yes, unless its broker is draining: the records it has not tiered
/// yet exist only on that broker, and a new owner would start from the tier's end without
/// them. It stays, and moves only if its broker dies, like any unreplicated partition. A
/// replicated one only while it has no replica at all, and then only once a full set of
/// brokers is live, rather than settling on the first broker to register. A replicated
/// partition with members changes them only through [`replace_members`].
pub(crate) fn replaceable(partition: &MisplacedPartition, live_brokers: usize) -> bool {
    if partition.replication_factor <= 1 {
        return !partition
            .replicas
            .iter()
            .any(|&(_, state)| state == BrokerState::Draining);
    }
    partition.replicas.is_empty() && live_brokers >= partition.replication_factor as usize
}

/// What to do about one replicated partition's members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replacement {
    /// Change the set: an election over the old and the new set starts with it.
    Now(Reassignment),
    /// A member is dead but not for long enough yet: look again at this time.
    Later(u64),
    /// Nothing to replace, or it cannot be done now (a change or an election is running,
    /// the leader is not live, too few members are live to elect over both sets, or no
    /// live broker can take a new member).
    No,
}

/// The change of a replicated partition's replica set that replaces its members on brokers
/// dead for `replace_after_ms` by `now_ms` (or draining), keeping every other member and
/// the leader, and that grows a set smaller than the replication factor when brokers are
/// free. `dead_since` gives the time a broker was declared dead (`None`: unknown
/// broker, dead for good). The new members are chosen by `placer` (live brokers only).
///
/// Only while the partition has a live leader and no change runs, so that one change is
/// in flight at a time and the election over both sets can succeed: the live members kept
/// must be a majority of the old set (they must also be a majority of the new one, which
/// holds them plus the newcomers, so that holds too whenever enough brokers are live).
pub(crate) fn replace_members(
    placer: &mut Placer,
    partition: &MisplacedPartition,
    dead_since: impl Fn(BrokerId) -> Option<u64>,
    now_ms: u64,
    replace_after_ms: u64,
) -> Replacement {
    let Some(leader) = changeable_leader(partition) else {
        return Replacement::No;
    };
    let (out, nothing_now) = members_due(partition, leader, dead_since, now_ms, replace_after_ms);
    // A set smaller than its factor (the partition was created while too few brokers were
    // live) grows once brokers are free, through the same two-step change.
    let factor = partition.replication_factor as usize;
    let short = partition.replicas.len() < factor;
    if out.is_empty() && !short {
        return nothing_now;
    }
    new_set(placer, partition, leader, &out, nothing_now)
}

/// The leader of a replicated partition whose members may change now: it has members, no
/// change runs, and its leader is live. `None` otherwise.
fn changeable_leader(partition: &MisplacedPartition) -> Option<BrokerId> {
    if partition.replication_factor <= 1
        || partition.replicas.is_empty()
        || !partition.previous.is_empty()
    {
        return None;
    }
    let leader = partition.leader?;
    partition
        .replicas
        .iter()
        .any(|&(id, state)| id == leader && state == BrokerState::Live)
        .then_some(leader)
}

/// The members other than `leader` to replace now (draining, or dead for
/// `replace_after_ms`), and the answer when nothing changes now: look again when the next
/// dead member falls due, or [`Replacement::No`] if none will.
fn members_due(
    partition: &MisplacedPartition,
    leader: BrokerId,
    dead_since: impl Fn(BrokerId) -> Option<u64>,
    now_ms: u64,
    replace_after_ms: u64,
) -> (Vec<BrokerId>, Replacement) {
    let mut later = u64::MAX;
    let mut out = Vec::new();
    for &(id, state) in &partition.replicas {
        if id == leader {
            continue;
        }
        match state {
            BrokerState::Live => {}
            BrokerState::Draining => out.push(id),
            BrokerState::Dead => {
                let due = dead_since(id).map_or(0, |at| at.saturating_add(replace_after_ms));
                if due <= now_ms {
                    out.push(id);
                } else {
                    later = later.min(due);
                }
            }
        }
    }
    let nothing_now = if later == u64::MAX {
        Replacement::No
    } else {
        Replacement::Later(later)
    };
    (out, nothing_now)
}

/// The change that replaces `out`: the live members kept (a majority of the old set, else
/// [`Replacement::No`]), completed by `placer` with newcomers, plus the dead members not due
/// yet. `nothing_now` when no member is out and no broker is free to grow a short set.
fn new_set(
    placer: &mut Placer,
    partition: &MisplacedPartition,
    leader: BrokerId,
    out: &[BrokerId],
    nothing_now: Replacement,
) -> Replacement {
    let old: Vec<BrokerId> = partition.replicas.iter().map(|(id, _)| *id).collect();
    let live_kept: Vec<BrokerId> = partition
        .replicas
        .iter()
        .filter(|&&(id, state)| state == BrokerState::Live && placer.contains(id))
        .map(|&(id, _)| id)
        .collect();
    // The election over both sets needs the live members kept to be a majority of the old
    // one (see `replace_members`).
    if live_kept.len() < partition_election::majority(old.len()) {
        return Replacement::No;
    }
    let factor = partition.replication_factor as usize;
    // Dead members not due yet stay; the placer completes the live ones with newcomers.
    let waiting: Vec<BrokerId> = old
        .iter()
        .copied()
        .filter(|id| !out.contains(id) && !live_kept.contains(id))
        .collect();
    let target = u32::try_from(old.len().max(factor) - waiting.len()).unwrap_or(u32::MAX);
    // A member replaced is never placed again in its own stead (a live broker holding the
    // partition corrupt is one).
    let placement = placer.place_excluding(&live_kept, Some(leader), target, out);
    let size = placement.replicas.len() + waiting.len();
    if size < old.len() {
        // Not enough live brokers outside the set: stay as it is rather than shrink.
        return Replacement::No;
    }
    if out.is_empty() && size == old.len() {
        // Short of its factor, and still no broker free to add.
        return nothing_now;
    }
    let mut replicas = placement.replicas;
    replicas.extend(waiting);
    Replacement::Now(Reassignment {
        stream: partition.stream.clone(),
        partition: partition.partition,
        expected_epoch: partition.epoch,
        replicas,
        leader: None,
        previous: old,
    })
}

async fn repair<S: Store>(cluster: &Cluster<S>, now: u64) -> Result<(), StoreError> {
    cluster.set_replacement_due(u64::MAX);
    let misplaced = cluster.store.misplaced_partitions().await?;
    if misplaced.is_empty() && cluster.corrupt_members().is_empty() {
        return Ok(());
    }
    let brokers = cluster.store.brokers().await?;
    let live = brokers
        .iter()
        .filter(|broker| broker.state == BrokerState::Live)
        .count();
    let mut placer = live_placer(&brokers);
    let (mut members, mut misplaced): (Vec<_>, Vec<_>) = misplaced
        .into_iter()
        .partition(|p| p.replication_factor > 1 && !p.replicas.is_empty());
    let corrupt = add_corrupt_members(cluster, &mut members).await?;
    let dead_since = |id: BrokerId| {
        brokers
            .iter()
            .find(|b| b.broker_id == id)
            .map(|b| b.lease_expires_at_ms)
    };
    let replace_after = millis(cluster.config.replace_dead_after);
    let mut replacements = Vec::new();
    let mut next_due = u64::MAX;
    if corrupt
        .iter()
        .any(|(s, p)| !members.iter().any(|m| &m.stream == s && m.partition == *p))
    {
        // A partition with a corrupt member is electing: look again shortly.
        next_due = next_due.min(now.saturating_add(CORRUPT_RETRY_MS));
    }
    for partition in &members {
        match replace_members(&mut placer, partition, dead_since, now, replace_after) {
            Replacement::Now(change) => replacements.push(change),
            Replacement::Later(at) => next_due = next_due.min(at),
            // A corrupt member waits for an election, or for a broker to copy to: look again.
            Replacement::No
                if corrupt.contains(&(partition.stream.clone(), partition.partition)) =>
            {
                next_due = next_due.min(now.saturating_add(CORRUPT_RETRY_MS));
            }
            Replacement::No => {}
        }
    }
    cluster.set_replacement_due(next_due);
    misplaced.retain(|partition| replaceable(partition, live));
    let replicated: HashSet<(&StreamName, PartitionId)> = misplaced
        .iter()
        .filter(|p| p.replication_factor > 1)
        .map(|p| (&p.stream, p.partition))
        .collect();
    let mut changes = placement::repair(&mut placer, &misplaced);
    for change in &mut changes {
        if replicated.contains(&(&change.stream, change.partition)) {
            // Its first leader is elected like any other, by `elect` on this same pass.
            change.leader = None;
        }
    }
    for change in &replacements {
        tracing::info!(stream = %change.stream, partition = change.partition.get(), from = ?change.previous, to = ?change.replicas, "changing a replica set: members on dead or draining brokers replaced, or a short set grown");
    }
    changes.extend(replacements);
    if changes.is_empty() {
        return Ok(());
    }
    let version = cluster.store.reassign(&changes).await?;
    tracing::info!(partitions = changes.len(), version, "re-placed partitions");
    cluster.announce(version);
    let replaced = changes.iter().filter(|c| !c.previous.is_empty()).count();
    if replaced > 0 {
        cluster.metrics.replica_replacements.inc_by(replaced as u64);
        // A change of a replica set starts its election: look for it on this same pass.
        cluster.request_election_check();
    }
    Ok(())
}

/// Adds to `members` the replicated partitions with a member its live broker reported
/// corrupt, that member marked out (as if draining), so that [`replace_members`] replaces
/// it by a copy made from the other replicas. Its own broker cannot be trusted to copy the
/// damaged range back itself: cutting one replica's log could lose what a majority
/// acknowledged, were that replica counted in an election before it caught up.
///
/// Returns the partitions that have such a member.
async fn add_corrupt_members<S: Store>(
    cluster: &Cluster<S>,
    members: &mut Vec<MisplacedPartition>,
) -> Result<HashSet<(StreamName, PartitionId)>, StoreError> {
    let mut corrupt = HashSet::new();
    for (broker, stream, partition) in cluster.corrupt_members() {
        let at = members
            .iter()
            .position(|m| m.stream == stream && m.partition == partition);
        let at = match at {
            Some(at) => at,
            None => {
                let leadership = match cluster.store.partition_leadership(&stream, partition).await
                {
                    Ok(leadership) => leadership,
                    Err(
                        StoreError::StreamNotFound { .. } | StoreError::PartitionNotFound { .. },
                    ) => {
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if leadership.replication_factor <= 1 {
                    continue;
                }
                if leadership.electing {
                    // Replaced once led: look again then.
                    corrupt.insert((stream.clone(), partition));
                    continue;
                }
                members.push(MisplacedPartition {
                    stream: leadership.stream,
                    partition: leadership.partition,
                    replication_factor: leadership.replication_factor,
                    epoch: leadership.epoch,
                    leader: leadership.leader,
                    replicas: leadership.replicas,
                    previous: leadership.previous,
                });
                members.len() - 1
            }
        };
        for member in &mut members[at].replicas {
            if member.0 == broker && member.1 == BrokerState::Live {
                member.1 = BrokerState::Draining;
                corrupt.insert((stream.clone(), partition));
            }
        }
    }
    Ok(corrupt)
}

/// How soon a replica-set change that a corrupt member needs, and that could not start, is
/// tried again.
const CORRUPT_RETRY_MS: u64 = 1_000;

/// A placer over the live brokers, with their current loads.
pub(crate) fn live_placer(brokers: &[BrokerInfo]) -> Placer {
    Placer::new(
        brokers
            .iter()
            .filter(|broker| broker.state == BrokerState::Live)
            .map(|broker| Candidate {
                id: broker.broker_id,
                zone: broker.zone.clone(),
                replicas: broker.replicas,
                leaders: broker.leaders,
            }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: BrokerState = BrokerState::Live;
    const DEAD: BrokerState = BrokerState::Dead;

    fn id(n: u32) -> BrokerId {
        BrokerId::new(n)
    }

    fn placer(live: &[u32]) -> Placer {
        Placer::new(live.iter().map(|&n| Candidate {
            id: id(n),
            zone: None,
            replicas: 1,
            leaders: 0,
        }))
    }

    fn partition(members: &[(u32, BrokerState)], leader: u32) -> MisplacedPartition {
        MisplacedPartition {
            stream: StreamName::new("orders").expect("name"),
            partition: PartitionId::new(0),
            replication_factor: u32::try_from(members.len()).expect("small"),
            epoch: floe_wire::LeaderEpoch::new(4),
            leader: Some(id(leader)),
            replicas: members.iter().map(|&(n, s)| (id(n), s)).collect(),
            previous: Vec::new(),
        }
    }

    /// Broker 3 died at 1,000; members are replaced 5,000 ms after their broker died.
    fn decide(p: &MisplacedPartition, live: &[u32], now: u64) -> Replacement {
        replace_members(&mut placer(live), p, |_| Some(1_000), now, 5_000)
    }

    #[test]
    fn an_unreplicated_partition_stays_on_a_draining_broker_and_leaves_a_dead_one() {
        let on_draining = partition(&[(1, BrokerState::Draining)], 1);
        assert!(
            !replaceable(&on_draining, 3),
            "its untiered records are only there"
        );
        assert!(replaceable(&partition(&[(1, DEAD)], 1), 3));
        let mut unplaced = partition(&[], 1);
        unplaced.replication_factor = 1;
        assert!(replaceable(&unplaced, 3));
        // A replicated partition's draining member is replaced through the two-step change.
        let replicated = partition(&[(1, LIVE), (2, BrokerState::Draining), (3, LIVE)], 1);
        assert!(!replaceable(&replicated, 3));
    }

    #[test]
    fn a_dead_member_is_replaced_after_the_grace_period() {
        let p = partition(&[(1, LIVE), (2, LIVE), (3, DEAD)], 1);
        assert_eq!(decide(&p, &[1, 2, 4], 5_999), Replacement::Later(6_000));
        let Replacement::Now(change) = decide(&p, &[1, 2, 4], 6_000) else {
            panic!("due");
        };
        assert_eq!(change.previous, vec![id(1), id(2), id(3)]);
        assert_eq!(change.replicas, vec![id(1), id(2), id(4)], "leader first");
        assert_eq!(
            (change.leader, change.expected_epoch),
            (None, floe_wire::LeaderEpoch::new(4))
        );
    }

    #[test]
    fn nothing_is_replaced_without_a_live_leader_a_majority_or_a_spare_broker() {
        let dead_leader = partition(&[(1, DEAD), (2, LIVE), (3, DEAD)], 1);
        assert_eq!(decide(&dead_leader, &[2, 4, 5], 9_000), Replacement::No);
        let no_spare = partition(&[(1, LIVE), (2, LIVE), (3, DEAD)], 1);
        assert_eq!(decide(&no_spare, &[1, 2], 9_000), Replacement::No);
        let mut changing = partition(&[(1, LIVE), (2, LIVE), (4, LIVE)], 1);
        changing.previous = vec![id(1), id(2), id(3)];
        assert_eq!(decide(&changing, &[1, 2, 4, 5], 9_000), Replacement::No);
        // Five members, three dead: the two live ones are no majority of the old set.
        let minority = partition(&[(1, LIVE), (2, LIVE), (3, DEAD), (4, DEAD), (5, DEAD)], 1);
        assert_eq!(decide(&minority, &[1, 2, 6, 7, 8], 9_000), Replacement::No);
    }

    #[test]
    fn a_set_short_of_its_factor_grows_when_a_broker_is_free() {
        // Created with factor 3 while only brokers 1 and 2 were live.
        let mut short = partition(&[(1, LIVE), (2, LIVE)], 1);
        short.replication_factor = 3;
        assert_eq!(decide(&short, &[1, 2], 9_000), Replacement::No);
        let Replacement::Now(change) = decide(&short, &[1, 2, 3], 9_000) else {
            panic!("broker 3 is free");
        };
        assert_eq!(change.previous, vec![id(1), id(2)]);
        assert_eq!(change.replicas, vec![id(1), id(2), id(3)]);
        // Short, with a member dead but not due: the dead one waits, the set still grows.
        let mut waiting = partition(&[(1, LIVE), (2, LIVE), (3, DEAD)], 1);
        waiting.replication_factor = 5;
        let Replacement::Now(change) = decide(&waiting, &[1, 2, 4, 5], 2_000) else {
            panic!("brokers 4 and 5 are free");
        };
        assert_eq!(change.replicas, vec![id(1), id(2), id(4), id(5), id(3)]);
        // Full sets do not change.
        let full = partition(&[(1, LIVE), (2, LIVE), (3, LIVE)], 1);
        assert_eq!(decide(&full, &[1, 2, 3, 4], 9_000), Replacement::No);
    }

    #[test]
    fn members_not_yet_due_stay_while_due_ones_go() {
        let p = partition(&[(1, LIVE), (2, LIVE), (3, LIVE), (4, DEAD), (5, DEAD)], 1);
        let dead_since = |b: BrokerId| Some(if b == id(4) { 1_000 } else { 8_000 });
        let change = replace_members(&mut placer(&[1, 2, 3, 6]), &p, dead_since, 6_000, 5_000);
        let Replacement::Now(change) = change else {
            panic!("4 is due");
        };
        assert_eq!(change.replicas, vec![id(1), id(2), id(3), id(6), id(5)]);
    }
}

//! The leader's loop: brokers and read replicas whose lease lapsed are declared dead (dead
//! read replicas are forgotten after a while); replicated partitions whose leader is not
//! live get an election (see [`crate::partition_election`]); and unreplicated partitions
//! with their replica on a broker that is not live, or partitions with too few replicas,
//! are re-placed through [`crate::placement::repair`].
//!
//! Leases decide only *when* replicas move or elections start, never whether data is
//! committed: both bump the partition's epoch (compare-and-set), which fences the old leader.
//! Replicated partitions keep their replica set (see [`replaceable`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use floe_wire::admin::{BrokerInfo, BrokerState, Role};
use floe_wire::{PartitionId, StreamName};
use tokio::sync::watch;

use crate::cluster::{Cluster, now_ms};
use crate::partition_election;
use crate::placement::{self, Candidate, Placer};
use crate::store::{MisplacedPartition, Store, StoreError};

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
                tracing::warn!(%error, "reconciliation failed; retrying");
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
    }
    expire_read_replicas(cluster, now).await?;
    let changed = cluster.take_repair_request() || !expired.is_empty();
    if changed {
        repair(cluster).await?;
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

/// Whether the reconciler may change a partition's replica set, with `live_brokers` live.
/// An unreplicated one, yes. A replicated one only while it has no replica at all:
/// changing the members of a replicated partition, especially together with its leader,
/// could lose committed records unless elections also required a majority of the old set.
/// Until they do, a replicated partition keeps its members, dead or draining ones included,
/// and stays under-replicated. Since its first members are then its members for good, a
/// replicated partition without replicas waits until a full set of brokers is live,
/// rather than settling on the first broker to register.
pub(crate) fn replaceable(partition: &MisplacedPartition, live_brokers: usize) -> bool {
    partition.replication_factor <= 1
        || (partition.replicas.is_empty() && live_brokers >= partition.replication_factor as usize)
}

async fn repair<S: Store>(cluster: &Cluster<S>) -> Result<(), StoreError> {
    let mut misplaced = cluster.store.misplaced_partitions().await?;
    if misplaced.is_empty() {
        return Ok(());
    }
    let brokers = cluster.store.brokers().await?;
    let live = brokers
        .iter()
        .filter(|broker| broker.state == BrokerState::Live)
        .count();
    misplaced.retain(|partition| replaceable(partition, live));
    if misplaced.is_empty() {
        return Ok(());
    }
    let mut placer = live_placer(&brokers);
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
    if changes.is_empty() {
        return Ok(());
    }
    let version = cluster.store.reassign(&changes).await?;
    tracing::info!(partitions = changes.len(), version, "re-placed partitions");
    cluster.announce(version);
    Ok(())
}

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

//! The leader's loop: brokers whose lease lapsed are declared dead, and partitions with
//! replicas on brokers that are not live (dead or draining) or with too few replicas are
//! re-placed through [`crate::placement::repair`].
//!
//! Leases decide only *when* replicas move, never whether data is committed: a re-placement
//! bumps the partition's epoch (compare-and-set), which fences the old leader.

use std::sync::Arc;

use floe_wire::admin::{BrokerInfo, BrokerState, Role};
use tokio::sync::watch;

use crate::cluster::{Cluster, now_ms};
use crate::placement::{self, Candidate, Placer};
use crate::store::{Store, StoreError};

/// Runs until `shutdown` turns true. Acts only while this controlplane leads.
pub(crate) async fn run<S: Store>(cluster: Arc<Cluster<S>>, mut shutdown: watch::Receiver<bool>) {
    let interval = cluster.config.reconcile_interval;
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(interval) => {}
            () = cluster.reconciler_woken() => {}
        }
        if cluster.role() != Role::Leader {
            continue;
        }
        if let Err(error) = tick(&cluster).await {
            tracing::warn!(%error, "reconciliation failed; retrying");
            cluster.request_repair();
        }
    }
}

/// One pass: expire lapsed leases, then repair placement if anything asked for it.
pub(crate) async fn tick<S: Store>(cluster: &Cluster<S>) -> Result<(), StoreError> {
    let _writes = cluster.write_lock().await;
    let expired = cluster.store.expire_leases(now_ms()).await?;
    if !expired.is_empty() {
        tracing::info!(brokers = ?expired, "lease lapsed; broker declared dead");
    }
    if cluster.take_repair_request() || !expired.is_empty() {
        repair(cluster).await?;
    }
    Ok(())
}

async fn repair<S: Store>(cluster: &Cluster<S>) -> Result<(), StoreError> {
    let misplaced = cluster.store.misplaced_partitions().await?;
    if misplaced.is_empty() {
        return Ok(());
    }
    let brokers = cluster.store.brokers().await?;
    let mut placer = live_placer(&brokers);
    let changes = placement::repair(&mut placer, &misplaced);
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

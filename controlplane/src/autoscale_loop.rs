//! The autoscaler's shell: on the leader, every `autoscale_interval`, read the scaling
//! policy, the read replicas and the brokers' history reads, ask the pure
//! [`Autoscaler`](crate::autoscale::Autoscaler) for a decision, and carry it out: mark the
//! replicas to drain `draining` in the store (clients stop sending them new readers), stop
//! the drained ones through the driver, start new ones. Every decision that does something
//! is logged.

use std::sync::Arc;

use floe_wire::ErrorChain;
use floe_wire::admin::{BrokerState, ReadReplicaState, Role};
use tokio::sync::watch;

use crate::autoscale::{Autoscaler, Decision, Observation, ReplicaLoad};
use crate::cluster::{Cluster, now_ms};
use crate::driver::{DriverError, ReadReplicaDriver};
use crate::store::{Store, StoreError};

/// Why one pass did not complete; the next pass decides again.
#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// Runs until `shutdown` turns true, acting only while this controlplane leads; then shuts
/// the driver down (local replica processes end with the controlplane).
pub(crate) async fn run<S: Store, D: ReadReplicaDriver>(
    cluster: Arc<Cluster<S>>,
    mut driver: D,
    mut shutdown: watch::Receiver<bool>,
) {
    let interval = cluster.config.autoscale_interval;
    // A new leader starts afresh: it adopts the count of replicas it finds.
    let mut autoscaler: Option<Autoscaler> = None;
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            () = tokio::time::sleep(interval) => {}
        }
        if cluster.role() != Role::Leader {
            autoscaler = None;
            continue;
        }
        let autoscaler = autoscaler.get_or_insert_with(Autoscaler::new);
        if let Err(error) = pass(&cluster, &mut driver, autoscaler).await {
            if matches!(error, PassError::Driver(_)) {
                cluster.metrics.driver_errors.inc();
            }
            tracing::warn!(error = %ErrorChain(&error), "autoscaler pass failed; deciding again next interval");
        }
    }
    driver.shutdown().await;
}

/// One decision, carried out.
async fn pass<S: Store, D: ReadReplicaDriver>(
    cluster: &Cluster<S>,
    driver: &mut D,
    autoscaler: &mut Autoscaler,
) -> Result<(), PassError> {
    let policy = cluster.store.scaling_policy().await?;
    cluster
        .metrics
        .min_replicas
        .set(i64::from(policy.min_replicas));
    cluster
        .metrics
        .max_replicas
        .set(i64::from(policy.max_replicas));
    let replicas = cluster.store.read_replicas().await?;
    let brokers = cluster.store.brokers().await?;
    let reads = cluster.history_reads();
    let history_read_bytes_per_second = brokers
        .iter()
        .filter(|broker| broker.state != BrokerState::Dead)
        .filter_map(|broker| reads.get(&broker.broker_id))
        .fold(0u64, |sum, bytes| sum.saturating_add(*bytes));
    let loads: Vec<ReplicaLoad> = replicas
        .iter()
        .filter(|replica| replica.state != ReadReplicaState::Dead)
        .map(|replica| ReplicaLoad {
            id: replica.replica_id.clone(),
            state: replica.state,
            bytes_served_per_second: replica.bytes_served_per_second,
            consumers: replica.consumers,
        })
        .collect();
    let registered: Vec<String> = loads.iter().map(|load| load.id.clone()).collect();
    let starting = driver.starting(&registered).await?;
    let decision = autoscaler.decide(&Observation {
        policy,
        replicas: &loads,
        starting,
        history_read_bytes_per_second,
        now_ms: now_ms(),
        drain_timeout_ms: u64::try_from(cluster.config.read_replica_drain_timeout.as_millis())
            .unwrap_or(u64::MAX),
    });
    record(cluster, &decision, loads.len(), starting);
    for id in &decision.drain {
        let _writes = cluster.write_lock().await;
        match cluster.store.drain_read_replica(id).await {
            Ok(_) | Err(StoreError::ReadReplicaNotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
    if !decision.stop.is_empty() {
        cluster
            .metrics
            .replicas_stopped
            .inc_by(decision.stop.len() as u64);
        driver.stop(&decision.stop).await?;
    }
    if decision.start > 0 {
        cluster
            .metrics
            .replicas_started
            .inc_by(u64::from(decision.start));
        driver.start(decision.start).await?;
    }
    Ok(())
}

/// Logs a decision that does something and updates the metrics.
fn record<S: Store>(cluster: &Cluster<S>, decision: &Decision, registered: usize, starting: u32) {
    let metrics = &cluster.metrics;
    metrics.desired_replicas.set(i64::from(decision.desired));
    if let Some((direction, reason)) = decision.change {
        metrics
            .decisions
            .get_or_create(&crate::metrics::DirectionLabels {
                direction: direction.name(),
            })
            .inc();
        tracing::info!(
            direction = direction.name(),
            reason,
            desired = decision.desired,
            load_bytes_per_second = decision.load_bytes_per_second,
            load_consumers = decision.load_consumers,
            "autoscaler changed the desired read replica count"
        );
    }
    if !decision.is_idle() {
        tracing::info!(
            desired = decision.desired,
            registered,
            starting,
            start = decision.start,
            drain = ?decision.drain,
            stop = ?decision.stop,
            "autoscaler acts"
        );
    }
}

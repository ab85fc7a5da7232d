//! `POST /v1/brokers/{broker_id}/elections`: a replica's answer to the election of its
//! partition's leader. The report that completes a majority decides the election here, in
//! the request, so that failover does not wait for the reconciler.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use floe_wire::admin::{BrokerState, ElectionReport};
use floe_wire::{BrokerId, LeaderEpoch, PartitionId, StreamName};

use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::cluster::{Cluster, now_ms};
use crate::partition_election::{self, Verdict};
use crate::store::{ElectionResult, ElectionStart, PartitionLeadership, Store, StoreError};

/// Answers 204 whether the report was recorded, decided the election, started a new one or
/// was ignored (an older epoch, no election running): the broker has nothing to retry and
/// learns the outcome from its assignments.
pub(super) async fn report<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<u32>,
    Body(report): Body<ElectionReport>,
) -> Result<StatusCode, Failure> {
    let reporter = BrokerId::new(id);
    let _writes = cluster.write_lock().await;
    let partition = cluster
        .store
        .partition_leadership(&report.stream, report.partition)
        .await?;
    let verdict = partition_election::judge(&partition, reporter, &report).map_err(|_| {
        Failure::NotReplica {
            broker: id,
            stream: report.stream.to_string(),
            partition: report.partition.get(),
        }
    })?;
    match verdict {
        Verdict::Ignore => {}
        Verdict::Record(position) => {
            let winner = {
                let key = (partition.stream.clone(), partition.partition);
                let mut ballots = cluster.ballots();
                let reports = ballots.record(&key, partition.epoch, reporter, position, now_ms());
                partition_election::pick_leader(&partition.replicas, &partition.previous, reports)
            };
            if let Some(leader) = winner {
                elect(&cluster, &partition, leader).await?;
            }
        }
        Verdict::Restart { epoch } => restart(&cluster, &partition, epoch).await?,
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Persists the winner, then tells the long-polling brokers.
async fn elect<S: Store>(
    cluster: &Cluster<S>,
    partition: &PartitionLeadership,
    leader: BrokerId,
) -> Result<(), Failure> {
    let result = ElectionResult {
        stream: partition.stream.clone(),
        partition: partition.partition,
        epoch: partition.epoch,
        leader,
    };
    let version = cluster.store.elect_leader(&result).await?;
    cluster
        .ballots()
        .close(&(partition.stream.clone(), partition.partition));
    tracing::info!(
        stream = %partition.stream,
        partition = partition.partition.get(),
        epoch = partition.epoch.get(),
        leader = leader.get(),
        "elected a partition leader"
    );
    cluster.announce(version);
    if partition
        .replicas
        .iter()
        .any(|(_, state)| *state != BrokerState::Live)
    {
        // Members on dead or draining brokers are replaced only under a live leader: now
        // there is one (a draining leader's partitions get here first).
        cluster.request_repair();
    }
    Ok(())
}

/// Starts the election again at `epoch` (a replica refused the current one).
async fn restart<S: Store>(
    cluster: &Cluster<S>,
    partition: &PartitionLeadership,
    epoch: LeaderEpoch,
) -> Result<(), Failure> {
    let start = ElectionStart {
        stream: partition.stream.clone(),
        partition: partition.partition,
        expected_epoch: partition.epoch,
        epoch,
    };
    let version = cluster.store.start_elections(&[start]).await?;
    cluster.ballots().open(
        &(partition.stream.clone(), partition.partition),
        epoch,
        now_ms(),
    );
    tracing::info!(
        stream = %partition.stream,
        partition = partition.partition.get(),
        epoch = epoch.get(),
        "a replica refused; election started again"
    );
    cluster.announce(version);
    Ok(())
}

/// Why a leader is deposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deposed {
    /// It lost contact with a majority of its replicas.
    CutOff,
    /// Its copy of the partition is corrupt: it cannot serve it.
    Corrupt,
}

/// Replaces the leader of `stream`'s `partition` in `epoch`, `reporter`, when it says it
/// has lost contact with a majority of its replicas or holds the partition corrupt (see
/// [`partition_election::depose`]): starts an election at the next epoch in which its own
/// report does not count. Called under the write lock.
pub(super) async fn depose_leader<S: Store>(
    cluster: &Cluster<S>,
    reporter: BrokerId,
    (stream, partition, epoch): (&StreamName, PartitionId, LeaderEpoch),
    why: Deposed,
) -> Result<(), Failure> {
    let leadership = match cluster.store.partition_leadership(stream, partition).await {
        Ok(leadership) => leadership,
        // Deleted meanwhile: nothing to lead.
        Err(StoreError::StreamNotFound { .. } | StoreError::PartitionNotFound { .. }) => {
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let Some(start) = partition_election::depose(&leadership, reporter, epoch) else {
        return Ok(());
    };
    let version = cluster
        .store
        .start_elections(std::slice::from_ref(&start))
        .await?;
    cluster.ballots().open_excluding(
        &(start.stream.clone(), start.partition),
        start.epoch,
        now_ms(),
        reporter,
    );
    let (counter, why) = match why {
        Deposed::CutOff => (
            &cluster.metrics.leaders_cut_off,
            "it lost contact with a majority of its replicas",
        ),
        Deposed::Corrupt => (
            &cluster.metrics.leaders_corrupt,
            "it holds the partition corrupt",
        ),
    };
    counter.inc();
    tracing::warn!(
        stream = %start.stream,
        partition = start.partition.get(),
        leader = reporter.get(),
        epoch = start.epoch.get(),
        why,
        "deposing the leader; electing another among its replicas"
    );
    cluster.announce(version);
    Ok(())
}

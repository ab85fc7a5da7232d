//! Partition leadership in SQL: partitions without a live leader, one partition's
//! leadership, and the compare-and-set writes that start and end elections.

use floe_wire::admin::BrokerState;
use floe_wire::{BrokerId, PartitionId, StreamName};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::{
    SqlStore, broker_from_db, broker_state_from_db, brokers_from_db, bump_version, epoch_from_db,
    epoch_to_db, from_db, name_from_db, u32_from_db,
};
use crate::store::{ElectionResult, ElectionStart, PartitionLeadership, StoreError};

/// Replicated partitions with replicas and no leader (electing, or never led), or whose
/// leader's broker is not live; one row per replica. Both halves are index lookups on
/// `partitions_by_leader`, so the reconciler can afford it on every pass.
const LEADERLESS_QUERY: &str = "WITH leaderless AS ( \
       SELECT p.stream, p.partition FROM partitions p \
       WHERE p.leader IS NULL AND p.replica_count > 0 \
       UNION \
       SELECT p.stream, p.partition FROM brokers b JOIN partitions p ON p.leader = b.id \
       WHERE b.state <> 'live' \
     ) \
     SELECT p.stream, p.partition, s.replication_factor, p.epoch, p.leader, p.electing, \
            p.previous_replicas, r.broker_id, b.state \
     FROM leaderless l \
     JOIN partitions p ON p.stream = l.stream AND p.partition = l.partition \
     JOIN streams s ON s.name = p.stream \
     JOIN partition_replicas r ON r.stream = p.stream AND r.partition = p.partition \
     LEFT JOIN brokers b ON b.id = r.broker_id \
     WHERE s.replication_factor > 1 \
     ORDER BY p.stream, p.partition, r.position";

pub(super) async fn leaderless(store: &SqlStore) -> Result<Vec<PartitionLeadership>, StoreError> {
    let rows = sqlx::query(LEADERLESS_QUERY).fetch_all(&store.pool).await?;
    let mut partitions: Vec<PartitionLeadership> = Vec::new();
    for row in &rows {
        let stream = name_from_db("partitions.stream", row.try_get(0)?)?;
        let partition = PartitionId::new(u32_from_db("partitions.partition", row.try_get(1)?)?);
        let same = partitions
            .last()
            .is_some_and(|last| last.stream == stream && last.partition == partition);
        if !same {
            partitions.push(leadership_from_row(stream, partition, row, 2)?);
        }
        if let Some(last) = partitions.last_mut() {
            last.replicas.push(replica_from_row(row, 7)?);
        }
    }
    Ok(partitions)
}

/// The leadership columns `replication_factor, epoch, leader, electing, previous_replicas`
/// from `first` on.
fn leadership_from_row(
    stream: StreamName,
    partition: PartitionId,
    row: &AnyRow,
    first: usize,
) -> Result<PartitionLeadership, StoreError> {
    let leader: Option<i64> = row.try_get(first + 2)?;
    let electing: i64 = row.try_get(first + 3)?;
    Ok(PartitionLeadership {
        stream,
        partition,
        replication_factor: u32_from_db("replication_factor", row.try_get(first)?)?,
        epoch: epoch_from_db("partitions.epoch", row.try_get(first + 1)?)?,
        leader: leader
            .map(|id| broker_from_db("partitions.leader", id))
            .transpose()?,
        electing: electing != 0,
        replicas: Vec::new(),
        previous: brokers_from_db("partitions.previous_replicas", row.try_get(first + 4)?)?,
    })
}

/// The replica columns `broker_id, state` from `first` on; an unknown broker is dead.
fn replica_from_row(row: &AnyRow, first: usize) -> Result<(BrokerId, BrokerState), StoreError> {
    let id = broker_from_db("partition_replicas.broker_id", row.try_get(first)?)?;
    let state: Option<String> = row.try_get(first + 1)?;
    let state = match state {
        Some(state) => broker_state_from_db(&state)?,
        None => BrokerState::Dead,
    };
    Ok((id, state))
}

pub(super) async fn one(
    store: &SqlStore,
    stream: &StreamName,
    partition: PartitionId,
) -> Result<PartitionLeadership, StoreError> {
    let mut tx = store.read_tx().await?;
    let number = i64::from(partition.get());
    let row = sqlx::query(
        "SELECT s.replication_factor, p.epoch, p.leader, p.electing, p.previous_replicas \
         FROM partitions p \
         JOIN streams s ON s.name = p.stream WHERE p.stream = $1 AND p.partition = $2",
    )
    .bind(stream.as_str())
    .bind(number)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(missing(&mut tx, stream, partition).await?);
    };
    let mut leadership = leadership_from_row(stream.clone(), partition, &row, 0)?;
    let replicas = sqlx::query(
        "SELECT r.broker_id, b.state FROM partition_replicas r \
         LEFT JOIN brokers b ON b.id = r.broker_id \
         WHERE r.stream = $1 AND r.partition = $2 ORDER BY r.position",
    )
    .bind(stream.as_str())
    .bind(number)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    for row in &replicas {
        leadership.replicas.push(replica_from_row(row, 0)?);
    }
    Ok(leadership)
}

/// Why a partition was not found: its stream is missing, or only the partition.
async fn missing(
    tx: &mut AnyConnection,
    stream: &StreamName,
    partition: PartitionId,
) -> Result<StoreError, StoreError> {
    let exists = sqlx::query("SELECT 1 FROM streams WHERE name = $1")
        .bind(stream.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    Ok(match exists {
        Some(_) => StoreError::PartitionNotFound {
            stream: stream.clone(),
            partition,
        },
        None => StoreError::StreamNotFound {
            name: stream.clone(),
        },
    })
}

pub(super) async fn start(
    store: &SqlStore,
    elections: &[ElectionStart],
) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    for election in elections {
        let conflict = || StoreError::EpochConflict {
            stream: election.stream.clone(),
            partition: election.partition,
            expected: election.expected_epoch,
        };
        if election.epoch <= election.expected_epoch {
            return Err(conflict());
        }
        let updated = sqlx::query(
            "UPDATE partitions SET epoch = $1, leader = NULL, electing = 1 \
             WHERE stream = $2 AND partition = $3 AND epoch = $4",
        )
        .bind(epoch_to_db(election.epoch))
        .bind(election.stream.as_str())
        .bind(i64::from(election.partition.get()))
        .bind(epoch_to_db(election.expected_epoch))
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() != 1 {
            // Dropping the transaction rolls back every change made so far.
            return Err(conflict());
        }
    }
    let version = bump_version(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn elect(store: &SqlStore, result: &ElectionResult) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    let updated = sqlx::query(
        "UPDATE partitions SET leader = $1, electing = 0 \
         WHERE stream = $2 AND partition = $3 AND epoch = $4 AND electing = 1",
    )
    .bind(i64::from(result.leader.get()))
    .bind(result.stream.as_str())
    .bind(i64::from(result.partition.get()))
    .bind(epoch_to_db(result.epoch))
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() != 1 {
        return Err(StoreError::EpochConflict {
            stream: result.stream.clone(),
            partition: result.partition,
            expected: result.epoch,
        });
    }
    let version = bump_version(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn next_lease_expiry(store: &SqlStore) -> Result<Option<u64>, StoreError> {
    let row = sqlx::query("SELECT MIN(lease_expires_at_ms) FROM brokers WHERE state <> 'dead'")
        .fetch_one(&store.pool)
        .await?;
    let earliest: Option<i64> = row.try_get(0)?;
    earliest
        .map(|ms| from_db("brokers.lease_expires_at_ms", ms))
        .transpose()
}

//! Replica assignments, leaders and epochs in SQL: repair candidates, compare-and-set
//! reassignment, per-broker assignments and leaders' reports.

use std::collections::{BTreeMap, HashMap};

use floe_wire::admin::{
    Assignments, BrokerState, PartitionAssignment, PartitionReport, StreamAssignment,
};
use floe_wire::{BrokerId, LeaderEpoch, PartitionId};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AssertSqlSafe, Row};

use super::streams::{STREAM_COLUMNS, insert_replicas, stream_from_row};
use super::{
    SqlStore, broker_from_db, broker_state_from_db, brokers_from_db, brokers_to_db, bump_version,
    epoch_from_db, epoch_to_db, name_from_db, opt_to_db, read_version, to_db, u32_from_db,
};
use crate::store::{MisplacedPartition, Reassignment, StoreError};

pub(super) async fn report(
    store: &SqlStore,
    id: BrokerId,
    reports: &[PartitionReport],
) -> Result<Option<u64>, StoreError> {
    if reports.is_empty() {
        return Ok(None);
    }
    let mut tx = store.write_tx().await?;
    let mut completed = false;
    for report in reports {
        let (hot_start, hot_end) = split_range(report.hot.map(|r| (r.start, r.end)));
        let (tier_start, tier_end) = split_range(report.tier.map(|r| (r.start, r.end)));
        // Plain numbers: encoding cannot fail.
        let lag = (!report.replica_lag.is_empty())
            .then(|| serde_json::to_string(&report.replica_lag).ok())
            .flatten();
        sqlx::query(
            "UPDATE partitions SET hot_start = $1, hot_end = $2, tier_start = $3, \
             tier_end = $4, bytes = $5, upload_backlog_bytes = $6, high_watermark = $11, \
             replica_lag = $12 \
             WHERE stream = $7 AND partition = $8 AND leader = $9 AND epoch = $10",
        )
        .bind(opt_to_db("hot.start", hot_start)?)
        .bind(opt_to_db("hot.end", hot_end)?)
        .bind(opt_to_db("tier.start", tier_start)?)
        .bind(opt_to_db("tier.end", tier_end)?)
        .bind(to_db("bytes", report.bytes)?)
        .bind(to_db("upload_backlog_bytes", report.upload_backlog_bytes)?)
        .bind(report.stream.as_str())
        .bind(i64::from(report.partition.get()))
        .bind(i64::from(id.get()))
        .bind(epoch_to_db(report.epoch))
        .bind(opt_to_db("high_watermark", report.high_watermark)?)
        .bind(lag)
        .execute(&mut *tx)
        .await?;
        if !report.new_set_caught_up.is_empty() {
            completed |= complete_change(&mut tx, id, report).await?;
        }
    }
    let version = if completed {
        Some(bump_version(&mut tx).await?)
    } else {
        None
    };
    tx.commit().await?;
    Ok(version)
}

/// Completes the replica-set change of the reported partition if `id` leads it in the
/// report's epoch, the partition is changing, and the set the leader found caught up is the
/// partition's current one (a report about an earlier change never completes a later one).
async fn complete_change(
    tx: &mut sqlx::AnyConnection,
    id: BrokerId,
    report: &PartitionReport,
) -> Result<bool, StoreError> {
    let number = i64::from(report.partition.get());
    let row = sqlx::query(
        "SELECT previous_replicas FROM partitions          WHERE stream = $1 AND partition = $2 AND leader = $3 AND epoch = $4          AND previous_replicas IS NOT NULL",
    )
    .bind(report.stream.as_str())
    .bind(number)
    .bind(i64::from(id.get()))
    .bind(epoch_to_db(report.epoch))
    .fetch_optional(&mut *tx)
    .await?;
    if row.is_none() {
        return Ok(false);
    }
    let rows = sqlx::query(
        "SELECT broker_id FROM partition_replicas WHERE stream = $1 AND partition = $2",
    )
    .bind(report.stream.as_str())
    .bind(number)
    .fetch_all(&mut *tx)
    .await?;
    let mut current = rows
        .iter()
        .map(|row| broker_from_db("partition_replicas.broker_id", row.try_get(0)?))
        .collect::<Result<Vec<_>, _>>()?;
    current.sort_unstable();
    let mut reported = report.new_set_caught_up.clone();
    reported.sort_unstable();
    reported.dedup();
    if current != reported {
        return Ok(false);
    }
    sqlx::query(
        "UPDATE partitions SET previous_replicas = NULL          WHERE stream = $1 AND partition = $2 AND epoch = $3",
    )
    .bind(report.stream.as_str())
    .bind(number)
    .bind(epoch_to_db(report.epoch))
    .execute(&mut *tx)
    .await?;
    tracing::info!(stream = %report.stream, partition = report.partition.get(), replicas = ?current, "replica set change complete");
    Ok(true)
}

fn split_range(range: Option<(u64, u64)>) -> (Option<u64>, Option<u64>) {
    (range.map(|r| r.0), range.map(|r| r.1))
}

/// Partitions with a replica on a broker that is not live, or with fewer replicas than their
/// replication factor; one row per replica, or one null row for a partition without any.
/// Together the two cover "fewer live replicas than the factor, or any replica not live".
const MISPLACED_QUERY: &str = "WITH misplaced AS ( \
       SELECT r.stream, r.partition FROM partition_replicas r \
       LEFT JOIN brokers b ON b.id = r.broker_id \
       WHERE b.state IS NULL OR b.state <> 'live' \
       UNION \
       SELECT p.stream, p.partition FROM partitions p JOIN streams s ON s.name = p.stream \
       WHERE p.replica_count < s.replication_factor \
     ) \
     SELECT p.stream, p.partition, p.epoch, p.leader, s.replication_factor, \
            r.broker_id, b.state, p.previous_replicas \
     FROM misplaced m \
     JOIN partitions p ON p.stream = m.stream AND p.partition = m.partition \
     JOIN streams s ON s.name = p.stream \
     LEFT JOIN partition_replicas r ON r.stream = p.stream AND r.partition = p.partition \
     LEFT JOIN brokers b ON b.id = r.broker_id \
     ORDER BY p.stream, p.partition, r.position";

pub(super) async fn misplaced(store: &SqlStore) -> Result<Vec<MisplacedPartition>, StoreError> {
    let rows = sqlx::query(MISPLACED_QUERY).fetch_all(&store.pool).await?;
    let mut partitions: Vec<MisplacedPartition> = Vec::new();
    for row in &rows {
        let stream = name_from_db("partitions.stream", row.try_get(0)?)?;
        let partition = PartitionId::new(u32_from_db("partitions.partition", row.try_get(1)?)?);
        let same = partitions
            .last()
            .is_some_and(|last| last.stream == stream && last.partition == partition);
        if !same {
            let leader: Option<i64> = row.try_get(3)?;
            partitions.push(MisplacedPartition {
                stream,
                partition,
                epoch: epoch_from_db("partitions.epoch", row.try_get(2)?)?,
                leader: leader
                    .map(|id| broker_from_db("partitions.leader", id))
                    .transpose()?,
                replication_factor: u32_from_db("replication_factor", row.try_get(4)?)?,
                replicas: Vec::new(),
                previous: brokers_from_db("partitions.previous_replicas", row.try_get(7)?)?,
            });
        }
        let broker: Option<i64> = row.try_get(5)?;
        if let (Some(broker), Some(last)) = (broker, partitions.last_mut()) {
            let state: Option<String> = row.try_get(6)?;
            let state = match state {
                Some(state) => broker_state_from_db(&state)?,
                None => BrokerState::Dead,
            };
            last.replicas.push((
                broker_from_db("partition_replicas.broker_id", broker)?,
                state,
            ));
        }
    }
    Ok(partitions)
}

pub(super) async fn reassign(
    store: &SqlStore,
    changes: &[Reassignment],
) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    for change in changes {
        // A change of a replicated partition's set elects its leader over both sets.
        let changing = !change.previous.is_empty();
        let updated = sqlx::query(
            "UPDATE partitions SET leader = $1, epoch = epoch + 1, replica_count = $5, \
             electing = $6, previous_replicas = $7 \
             WHERE stream = $2 AND partition = $3 AND epoch = $4 AND epoch < $8",
        )
        .bind(
            change
                .leader
                .filter(|_| !changing)
                .map(|id| i64::from(id.get())),
        )
        .bind(change.stream.as_str())
        .bind(i64::from(change.partition.get()))
        .bind(epoch_to_db(change.expected_epoch))
        .bind(to_db("replica_count", change.replicas.len() as u64)?)
        .bind(i64::from(changing))
        .bind(brokers_to_db(&change.previous))
        // An epoch never wraps: a partition at the last one cannot be reassigned.
        .bind(epoch_to_db(LeaderEpoch::MAX))
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() != 1 {
            // Dropping the transaction rolls back every change made so far.
            return Err(StoreError::EpochConflict {
                stream: change.stream.clone(),
                partition: change.partition,
                expected: change.expected_epoch,
            });
        }
        sqlx::query("DELETE FROM partition_replicas WHERE stream = $1 AND partition = $2")
            .bind(change.stream.as_str())
            .bind(i64::from(change.partition.get()))
            .execute(&mut *tx)
            .await?;
    }
    let sets: Vec<(&str, u32, &[BrokerId])> = changes
        .iter()
        .map(|c| (c.stream.as_str(), c.partition.get(), c.replicas.as_slice()))
        .collect();
    insert_replicas(&mut tx, &sets).await?;
    let version = bump_version(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn for_broker(store: &SqlStore, id: BrokerId) -> Result<Assignments, StoreError> {
    let mut tx = store.read_tx().await?;
    let broker = i64::from(id.get());
    let known = sqlx::query("SELECT 1 FROM brokers WHERE id = $1")
        .bind(broker)
        .fetch_optional(&mut *tx)
        .await?;
    if known.is_none() {
        return Err(StoreError::BrokerNotFound { id });
    }
    let version = read_version(&mut tx).await?;
    let rows = read_broker_rows(&mut tx, broker).await?;
    tx.commit().await?;

    let mut replicas = replica_sets(&rows.replicas)?;
    let mut by_stream = partitions_by_stream(&rows.partitions, &mut replicas)?;
    let mut streams = Vec::with_capacity(rows.streams.len());
    for row in &rows.streams {
        let info = stream_from_row(row)?;
        let partitions = by_stream.remove(info.name.as_str()).unwrap_or_default();
        streams.push(StreamAssignment {
            name: info.name,
            config: info.config,
            created_at_ms: info.created_at_ms,
            partitions,
        });
    }
    Ok(Assignments {
        broker_id: id,
        version,
        streams,
    })
}

/// The rows a broker's assignments are built from, all read in one transaction.
struct BrokerRows {
    /// The streams with a replica on the broker, by name.
    streams: Vec<AnyRow>,
    /// Its partitions, by stream and partition.
    partitions: Vec<AnyRow>,
    /// Every member of its partitions' replica sets, in set order.
    replicas: Vec<AnyRow>,
}

async fn read_broker_rows(tx: &mut AnyConnection, broker: i64) -> Result<BrokerRows, StoreError> {
    let sql = format!(
        "SELECT {STREAM_COLUMNS} FROM streams s WHERE EXISTS (SELECT 1 FROM partition_replicas r \
         WHERE r.stream = s.name AND r.broker_id = $1) ORDER BY s.name"
    );
    let streams = sqlx::query(AssertSqlSafe(sql))
        .bind(broker)
        .fetch_all(&mut *tx)
        .await?;
    let partitions = sqlx::query(
        "SELECT p.stream, p.partition, p.leader, p.epoch, p.electing, p.previous_replicas \
         FROM partition_replicas mine \
         JOIN partitions p ON p.stream = mine.stream AND p.partition = mine.partition \
         WHERE mine.broker_id = $1 ORDER BY p.stream, p.partition",
    )
    .bind(broker)
    .fetch_all(&mut *tx)
    .await?;
    let replicas = sqlx::query(
        "SELECT r.stream, r.partition, r.broker_id FROM partition_replicas mine \
         JOIN partition_replicas r ON r.stream = mine.stream AND r.partition = mine.partition \
         WHERE mine.broker_id = $1 ORDER BY r.stream, r.partition, r.position",
    )
    .bind(broker)
    .fetch_all(&mut *tx)
    .await?;
    Ok(BrokerRows {
        streams,
        partitions,
        replicas,
    })
}

/// Replica sets keyed by (stream, partition), members in set order.
fn replica_sets(rows: &[AnyRow]) -> Result<HashMap<(String, i64), Vec<BrokerId>>, StoreError> {
    let mut replicas: HashMap<(String, i64), Vec<BrokerId>> = HashMap::new();
    for row in rows {
        let key = (row.try_get::<String, _>(0)?, row.try_get::<i64, _>(1)?);
        let member = broker_from_db("partition_replicas.broker_id", row.try_get(2)?)?;
        replicas.entry(key).or_default().push(member);
    }
    Ok(replicas)
}

/// Partition assignments by stream name, each taking its set out of `replicas`.
fn partitions_by_stream(
    rows: &[AnyRow],
    replicas: &mut HashMap<(String, i64), Vec<BrokerId>>,
) -> Result<BTreeMap<String, Vec<PartitionAssignment>>, StoreError> {
    let mut by_stream: BTreeMap<String, Vec<PartitionAssignment>> = BTreeMap::new();
    for row in rows {
        let stream: String = row.try_get(0)?;
        let partition: i64 = row.try_get(1)?;
        let leader: Option<i64> = row.try_get(2)?;
        let assignment = PartitionAssignment {
            partition: PartitionId::new(u32_from_db("partitions.partition", partition)?),
            replicas: replicas
                .remove(&(stream.clone(), partition))
                .unwrap_or_default(),
            leader: leader
                .map(|id| broker_from_db("partitions.leader", id))
                .transpose()?,
            epoch: epoch_from_db("partitions.epoch", row.try_get(3)?)?,
            electing: row.try_get::<i64, _>(4)? != 0,
            previous_replicas: brokers_from_db("partitions.previous_replicas", row.try_get(5)?)?,
        };
        by_stream.entry(stream).or_default().push(assignment);
    }
    Ok(by_stream)
}

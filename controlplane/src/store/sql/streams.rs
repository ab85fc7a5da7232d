//! Streams and their partitions in SQL.

use floe_wire::admin::{
    OffsetRange, PartitionDescription, RetentionSettings, SegmentSettings, StreamConfig,
    StreamDescription, StreamInfo,
};
use floe_wire::{BrokerId, LeaderEpoch, PartitionId, StreamName};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AssertSqlSafe, Row};

use super::{
    SqlStore, broker_from_db, bump_version, epoch_from_db, epoch_to_db, from_db, name_from_db,
    opt_from_db, opt_to_db, to_db, u32_from_db,
};
use crate::store::StoreError;

/// Rows per multi-row `INSERT`: few round trips, well under both backends' parameter limits.
const ROWS_PER_INSERT: usize = 400;

pub(super) const STREAM_COLUMNS: &str = "name, partition_count, replication_factor, ack_mode, \
     segment_bytes, segment_age_ms, local_retention_bytes, local_retention_ms, \
     tier_retention_bytes, tier_retention_ms, created_at_ms";

pub(super) async fn create(
    store: &SqlStore,
    stream: &StreamInfo,
    replicas: &[Vec<BrokerId>],
    creator: Option<&str>,
) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    let name = stream.name.as_str();
    let taken = sqlx::query("SELECT 1 FROM streams WHERE name = $1")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    if taken.is_some() {
        return Err(StoreError::StreamExists {
            name: stream.name.clone(),
        });
    }
    insert_stream(&mut tx, stream, creator).await?;
    // A replicated partition's first leader is elected like every later one (see
    // `docs/controlplane.md`, "Partition elections"); the first replica is only preferred.
    let replicated = stream.config.replication_factor > 1;
    let partitions: Vec<NewPartition> = (0u32..)
        .zip(replicas)
        .map(|(partition, set)| {
            let placed = !set.is_empty();
            NewPartition {
                partition,
                leader: set.first().copied().filter(|_| !replicated),
                epoch: LeaderEpoch::new(u32::from(placed)),
                replica_count: set.len(),
                electing: replicated && placed,
            }
        })
        .collect();
    insert_partitions(&mut tx, name, &partitions).await?;
    let rows: Vec<(&str, u32, &[BrokerId])> = (0u32..)
        .zip(replicas)
        .map(|(partition, set)| (name, partition, set.as_slice()))
        .collect();
    insert_replicas(&mut tx, &rows).await?;
    let version = bump_version(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

async fn insert_stream(
    tx: &mut AnyConnection,
    stream: &StreamInfo,
    creator: Option<&str>,
) -> Result<(), StoreError> {
    let config = &stream.config;
    let retention = &config.retention;
    sqlx::query(
        "INSERT INTO streams (name, partition_count, replication_factor, ack_mode, \
         segment_bytes, segment_age_ms, local_retention_bytes, local_retention_ms, \
         tier_retention_bytes, tier_retention_ms, created_at_ms, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(stream.name.as_str())
    .bind(i64::from(config.partitions))
    .bind(i64::from(config.replication_factor))
    .bind(config.ack_mode.as_str())
    .bind(opt_to_db("segment.bytes", config.segment.bytes)?)
    .bind(opt_to_db("segment.age_ms", config.segment.age_ms)?)
    .bind(opt_to_db("retention.local_bytes", retention.local_bytes)?)
    .bind(opt_to_db("retention.local_ms", retention.local_ms)?)
    .bind(opt_to_db("retention.tier_bytes", retention.tier_bytes)?)
    .bind(opt_to_db("retention.tier_ms", retention.tier_ms)?)
    .bind(to_db("created_at_ms", stream.created_at_ms)?)
    .bind(creator)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// How many existing streams `creator` created.
pub(super) async fn count_created_by(store: &SqlStore, creator: &str) -> Result<u64, StoreError> {
    let row = sqlx::query("SELECT COUNT(*) FROM streams WHERE created_by = $1")
        .bind(creator)
        .fetch_one(&store.pool)
        .await?;
    from_db("streams.count", row.try_get::<i64, _>(0)?)
}

/// One row of `partitions` as a stream is created.
struct NewPartition {
    partition: u32,
    leader: Option<BrokerId>,
    epoch: LeaderEpoch,
    replica_count: usize,
    electing: bool,
}

/// Inserts the partitions of one stream.
async fn insert_partitions(
    tx: &mut AnyConnection,
    stream: &str,
    partitions: &[NewPartition],
) -> Result<(), StoreError> {
    for chunk in partitions.chunks(ROWS_PER_INSERT) {
        let sql = multi_row_insert(
            "INSERT INTO partitions (stream, partition, leader, epoch, replica_count, electing) \
             VALUES ",
            6,
            chunk.len(),
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for row in chunk {
            query = query
                .bind(stream.to_owned())
                .bind(i64::from(row.partition))
                .bind(row.leader.map(|id| i64::from(id.get())))
                .bind(epoch_to_db(row.epoch))
                .bind(to_db("replica_count", row.replica_count as u64)?)
                .bind(i64::from(row.electing));
        }
        query.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Inserts the replica sets of `(stream, partition, replicas)`, in position order.
pub(super) async fn insert_replicas(
    tx: &mut AnyConnection,
    sets: &[(&str, u32, &[BrokerId])],
) -> Result<(), StoreError> {
    let rows: Vec<(&str, u32, i64, BrokerId)> = sets
        .iter()
        .flat_map(|(stream, partition, replicas)| {
            (0i64..)
                .zip(replicas.iter())
                .map(move |(position, id)| (*stream, *partition, position, *id))
        })
        .collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = multi_row_insert(
            "INSERT INTO partition_replicas (stream, partition, position, broker_id) VALUES ",
            4,
            chunk.len(),
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (stream, partition, position, id) in chunk {
            query = query
                .bind((*stream).to_owned())
                .bind(i64::from(*partition))
                .bind(*position)
                .bind(i64::from(id.get()));
        }
        query.execute(&mut *tx).await?;
    }
    Ok(())
}

/// `head` followed by `rows` groups of `columns` numbered parameters.
fn multi_row_insert(head: &str, columns: usize, rows: usize) -> String {
    let mut sql = String::from(head);
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&(row * columns + column + 1).to_string());
        }
        sql.push(')');
    }
    sql
}

pub(super) async fn list(store: &SqlStore) -> Result<Vec<StreamInfo>, StoreError> {
    let sql = format!("SELECT {STREAM_COLUMNS} FROM streams ORDER BY name");
    let rows = sqlx::query(AssertSqlSafe(sql))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(stream_from_row).collect()
}

pub(super) async fn describe(
    store: &SqlStore,
    name: &StreamName,
) -> Result<Option<StreamDescription>, StoreError> {
    let mut tx = store.read_tx().await?;
    let sql = format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = $1");
    let Some(row) = sqlx::query(AssertSqlSafe(sql))
        .bind(name.as_str())
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let stream = stream_from_row(&row)?;
    let rows = sqlx::query(
        "SELECT partition, leader, epoch, electing, hot_start, hot_end, tier_start, tier_end, \
         bytes, upload_backlog_bytes, high_watermark, replica_lag, previous_replicas \
         FROM partitions \
         WHERE stream = $1 ORDER BY partition",
    )
    .bind(name.as_str())
    .fetch_all(&mut *tx)
    .await?;
    let mut partitions = rows
        .iter()
        .map(partition_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let replicas = sqlx::query(
        "SELECT partition, broker_id FROM partition_replicas WHERE stream = $1 \
         ORDER BY partition, position",
    )
    .bind(name.as_str())
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    for row in &replicas {
        let partition = u32_from_db("partition_replicas.partition", row.try_get(0)?)?;
        let id = broker_from_db("partition_replicas.broker_id", row.try_get(1)?)?;
        // Partitions are numbered densely from 0, so the number is the index.
        if let Some(description) = partitions.get_mut(partition as usize) {
            description.replicas.push(id);
        }
    }
    Ok(Some(StreamDescription {
        name: stream.name,
        config: stream.config,
        created_at_ms: stream.created_at_ms,
        partitions,
    }))
}

fn partition_from_row(row: &AnyRow) -> Result<PartitionDescription, StoreError> {
    let range = |start: &'static str, end: &'static str| -> Result<_, StoreError> {
        let start = opt_from_db(start, row.try_get(start)?)?;
        let end = opt_from_db(end, row.try_get(end)?)?;
        Ok(start
            .zip(end)
            .map(|(start, end)| OffsetRange { start, end }))
    };
    let leader: Option<i64> = row.try_get("leader")?;
    Ok(PartitionDescription {
        partition: PartitionId::new(u32_from_db("partition", row.try_get("partition")?)?),
        replicas: Vec::new(),
        leader: leader
            .map(|id| broker_from_db("partitions.leader", id))
            .transpose()?,
        epoch: epoch_from_db("epoch", row.try_get("epoch")?)?,
        electing: row.try_get::<i64, _>("electing")? != 0,
        hot: range("hot_start", "hot_end")?,
        tier: range("tier_start", "tier_end")?,
        bytes: opt_from_db("bytes", row.try_get("bytes")?)?,
        upload_backlog_bytes: opt_from_db(
            "upload_backlog_bytes",
            row.try_get("upload_backlog_bytes")?,
        )?,
        high_watermark: opt_from_db("high_watermark", row.try_get("high_watermark")?)?,
        replica_lag: match row.try_get::<Option<String>, _>("replica_lag")? {
            None => Vec::new(),
            Some(text) => serde_json::from_str(&text).map_err(|_| StoreError::Corrupt {
                column: "partitions.replica_lag",
                value: text,
            })?,
        },
        previous_replicas: super::brokers_from_db(
            "partitions.previous_replicas",
            row.try_get("previous_replicas")?,
        )?,
        // Reported by brokers in their heartbeats, not stored: the API adds it.
        corrupt: Vec::new(),
    })
}

pub(super) fn stream_from_row(row: &AnyRow) -> Result<StreamInfo, StoreError> {
    let optional = |column: &'static str| -> Result<Option<u64>, StoreError> {
        opt_from_db(column, row.try_get(column)?)
    };
    let ack_mode: String = row.try_get("ack_mode")?;
    Ok(StreamInfo {
        name: name_from_db("streams.name", row.try_get("name")?)?,
        config: StreamConfig {
            partitions: u32_from_db("partition_count", row.try_get("partition_count")?)?,
            replication_factor: u32_from_db(
                "replication_factor",
                row.try_get("replication_factor")?,
            )?,
            ack_mode: ack_mode
                .parse()
                .map_err(|_| super::corrupt("streams.ack_mode", &ack_mode))?,
            segment: SegmentSettings {
                bytes: optional("segment_bytes")?,
                age_ms: optional("segment_age_ms")?,
            },
            retention: RetentionSettings {
                local_bytes: optional("local_retention_bytes")?,
                local_ms: optional("local_retention_ms")?,
                tier_bytes: optional("tier_retention_bytes")?,
                tier_ms: optional("tier_retention_ms")?,
            },
        },
        created_at_ms: from_db("created_at_ms", row.try_get("created_at_ms")?)?,
    })
}

/// Replaces what can change on a live stream (ack mode, segment and retention settings)
/// and bumps the assignment version, so that brokers learn the new settings.
pub(super) async fn set_settings(
    store: &SqlStore,
    name: &StreamName,
    config: &StreamConfig,
) -> Result<(StreamInfo, u64), StoreError> {
    let mut tx = store.write_tx().await?;
    let segment = &config.segment;
    let retention = &config.retention;
    let updated = sqlx::query(
        "UPDATE streams SET ack_mode = $1, segment_bytes = $2, segment_age_ms = $3, \
         local_retention_bytes = $4, local_retention_ms = $5, tier_retention_bytes = $6, \
         tier_retention_ms = $7 WHERE name = $8",
    )
    .bind(config.ack_mode.as_str())
    .bind(opt_to_db("segment.bytes", segment.bytes)?)
    .bind(opt_to_db("segment.age_ms", segment.age_ms)?)
    .bind(opt_to_db("retention.local_bytes", retention.local_bytes)?)
    .bind(opt_to_db("retention.local_ms", retention.local_ms)?)
    .bind(opt_to_db("retention.tier_bytes", retention.tier_bytes)?)
    .bind(opt_to_db("retention.tier_ms", retention.tier_ms)?)
    .bind(name.as_str())
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() == 0 {
        return Err(StoreError::StreamNotFound { name: name.clone() });
    }
    let sql = format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = $1");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(name.as_str())
        .fetch_one(&mut *tx)
        .await?;
    let stream = stream_from_row(&row)?;
    let version = bump_version(&mut tx).await?;
    tx.commit().await?;
    Ok((stream, version))
}

pub(super) async fn delete(store: &SqlStore, name: &StreamName) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    // Children first, explicitly: no reliance on a backend's foreign-key settings.
    for sql in [
        "DELETE FROM group_offsets WHERE stream = $1",
        "DELETE FROM partition_replicas WHERE stream = $1",
        "DELETE FROM partitions WHERE stream = $1",
    ] {
        sqlx::query(sql)
            .bind(name.as_str())
            .execute(&mut *tx)
            .await?;
    }
    let deleted = sqlx::query("DELETE FROM streams WHERE name = $1")
        .bind(name.as_str())
        .execute(&mut *tx)
        .await?;
    if deleted.rows_affected() == 0 {
        return Err(StoreError::StreamNotFound { name: name.clone() });
    }
    let version = bump_version(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_inserts_number_parameters_row_by_row() {
        assert_eq!(
            multi_row_insert("INSERT INTO t (a, b) VALUES ", 2, 2),
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)"
        );
    }
}

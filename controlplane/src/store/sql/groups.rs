//! Consumer-group offsets in SQL.

use std::collections::HashMap;

use floe_wire::PartitionId;
use floe_wire::admin::{CommittedOffset, GroupSummary, OffsetCommit};
use sqlx::Row;

use super::{SqlStore, from_db, name_from_db, to_db, u32_from_db};
use crate::store::StoreError;

pub(super) async fn list(store: &SqlStore) -> Result<Vec<GroupSummary>, StoreError> {
    let rows = sqlx::query(
        "SELECT group_name, COUNT(DISTINCT stream), COUNT(*) FROM group_offsets \
         GROUP BY group_name ORDER BY group_name",
    )
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(GroupSummary {
                group: row.try_get(0)?,
                streams: u32_from_db("streams", row.try_get(1)?)?,
                partitions: u32_from_db("partitions", row.try_get(2)?)?,
                members: 0,
            })
        })
        .collect()
}

pub(super) async fn offsets(
    store: &SqlStore,
    group: &str,
) -> Result<Vec<CommittedOffset>, StoreError> {
    let rows = sqlx::query(
        "SELECT stream, partition, committed_offset, updated_at_ms FROM group_offsets \
         WHERE group_name = $1 ORDER BY stream, partition",
    )
    .bind(group)
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(CommittedOffset {
                stream: name_from_db("group_offsets.stream", row.try_get(0)?)?,
                partition: PartitionId::new(u32_from_db("partition", row.try_get(1)?)?),
                offset: from_db("committed_offset", row.try_get(2)?)?,
                updated_at_ms: from_db("updated_at_ms", row.try_get(3)?)?,
            })
        })
        .collect()
}

pub(super) async fn commit(
    store: &SqlStore,
    group: &str,
    commits: &[OffsetCommit],
    now_ms: u64,
) -> Result<(), StoreError> {
    let mut tx = store.write_tx().await?;
    for commit in commits {
        let exists = sqlx::query("SELECT 1 FROM partitions WHERE stream = $1 AND partition = $2")
            .bind(commit.stream.as_str())
            .bind(i64::from(commit.partition.get()))
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            let stream_exists = sqlx::query("SELECT 1 FROM streams WHERE name = $1")
                .bind(commit.stream.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match stream_exists {
                None => StoreError::StreamNotFound {
                    name: commit.stream.clone(),
                },
                Some(_) => StoreError::PartitionNotFound {
                    stream: commit.stream.clone(),
                    partition: commit.partition,
                },
            });
        }
        sqlx::query(
            "INSERT INTO group_offsets (group_name, stream, partition, committed_offset, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (group_name, stream, partition) DO UPDATE SET \
             committed_offset = excluded.committed_offset, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(group)
        .bind(commit.stream.as_str())
        .bind(i64::from(commit.partition.get()))
        .bind(to_db("offset", commit.offset)?)
        .bind(to_db("now_ms", now_ms)?)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(super) async fn delete(store: &SqlStore, group: &str) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    let deleted = sqlx::query("DELETE FROM group_offsets WHERE group_name = $1")
        .bind(group)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(deleted)
}

/// Rows per statement of a batch: 5 parameters each, well inside both backends' limits.
const BATCH_ROWS: usize = 500;

pub(super) async fn commit_batch(
    store: &SqlStore,
    entries: &[(&str, &OffsetCommit)],
    now_ms: u64,
) -> Result<(), StoreError> {
    // One row per group and partition, the last entry winning: an upsert may not touch a
    // row twice in one statement.
    let mut latest: HashMap<(&str, &str, u32), usize> = HashMap::new();
    for (index, (group, commit)) in entries.iter().enumerate() {
        latest.insert(
            (group, commit.stream.as_str(), commit.partition.get()),
            index,
        );
    }
    let mut rows: Vec<usize> = latest.into_values().collect();
    rows.sort_unstable();
    let now = to_db("now_ms", now_ms)?;
    let mut tx = store.write_tx().await?;
    for chunk in rows.chunks(BATCH_ROWS) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| {
                let n = i * 5;
                format!(
                    "(CAST(${} AS TEXT), CAST(${} AS TEXT), CAST(${} AS BIGINT), \
                     CAST(${} AS BIGINT), CAST(${} AS BIGINT))",
                    n + 1,
                    n + 2,
                    n + 3,
                    n + 4,
                    n + 5
                )
            })
            .collect();
        // Only rows whose partition exists are written: fewer rows than entries means one
        // names a partition that does not.
        let sql = format!(
            "WITH v (group_name, stream, partition, committed_offset, updated_at_ms) AS \
             (VALUES {}) \
             INSERT INTO group_offsets (group_name, stream, partition, committed_offset, \
             updated_at_ms) SELECT v.group_name, v.stream, v.partition, v.committed_offset, \
             v.updated_at_ms FROM v JOIN partitions p ON p.stream = v.stream AND \
             p.partition = v.partition WHERE true \
             ON CONFLICT (group_name, stream, partition) DO UPDATE SET \
             committed_offset = excluded.committed_offset, updated_at_ms = excluded.updated_at_ms",
            values.join(", ")
        );
        // Audited: the text is placeholders only; every value is bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for &index in chunk {
            let (group, commit) = entries[index];
            query = query
                .bind(group)
                .bind(commit.stream.as_str())
                .bind(i64::from(commit.partition.get()))
                .bind(to_db("offset", commit.offset)?)
                .bind(now);
        }
        let written = query.execute(&mut *tx).await?.rows_affected();
        if written != chunk.len() as u64 {
            let (_, commit) = entries[chunk[0]];
            return Err(StoreError::PartitionNotFound {
                stream: commit.stream.clone(),
                partition: commit.partition,
            });
        }
    }
    tx.commit().await?;
    Ok(())
}

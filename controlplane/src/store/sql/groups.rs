//! Consumer-group offsets in SQL.

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

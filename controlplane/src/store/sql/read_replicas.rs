//! Read replicas, their leases and load, and the scaling policy in SQL.

use floe_wire::Endpoint;
use floe_wire::admin::{ReadReplicaHeartbeat, ReadReplicaInfo, ReadReplicaState, ScalingPolicy};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AssertSqlSafe, Row};

use super::{SqlStore, build_from_row, corrupt, from_db, to_db, u32_from_db};
use crate::store::{ReadReplicaRegistration, StoreError};

const REPLICA_QUERY: &str = "SELECT id, endpoint, zone, state, lease_expires_at_ms, \
     bytes_served_per_second, consumers, fetch_latency_p99_us, cache_hit_ratio_permille, \
     build_version, build_commit FROM read_replicas";

/// Assigned ids that turn out to be taken (registered by hand) are skipped, at most this
/// many in a row.
const MAX_ID_ATTEMPTS: usize = 1000;

pub(super) async fn list(store: &SqlStore) -> Result<Vec<ReadReplicaInfo>, StoreError> {
    let sql = format!("{REPLICA_QUERY} ORDER BY id");
    let rows = sqlx::query(AssertSqlSafe(sql))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(replica_from_row).collect()
}

fn replica_from_row(row: &AnyRow) -> Result<ReadReplicaInfo, StoreError> {
    let endpoint: String = row.try_get(1)?;
    let state: String = row.try_get(3)?;
    Ok(ReadReplicaInfo {
        replica_id: row.try_get(0)?,
        endpoint: Endpoint::new(endpoint.clone())
            .map_err(|_| corrupt("read_replicas.endpoint", endpoint))?,
        zone: row.try_get(2)?,
        state: state_from_db(&state)?,
        lease_expires_at_ms: from_db("lease_expires_at_ms", row.try_get(4)?)?,
        bytes_served_per_second: from_db("bytes_served_per_second", row.try_get(5)?)?,
        consumers: u32_from_db("consumers", row.try_get(6)?)?,
        fetch_latency_p99_us: from_db("fetch_latency_p99_us", row.try_get(7)?)?,
        cache_hit_ratio_permille: u32_from_db("cache_hit_ratio_permille", row.try_get(8)?)?,
        build: build_from_row(row.try_get(9)?, row.try_get(10)?),
    })
}

async fn by_id(tx: &mut AnyConnection, id: &str) -> Result<Option<ReadReplicaInfo>, StoreError> {
    let sql = format!("{REPLICA_QUERY} WHERE id = $1");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(replica_from_row).transpose()
}

pub(super) async fn upsert(store: &SqlStore, replica: &ReadReplicaInfo) -> Result<(), StoreError> {
    let mut tx = store.write_tx().await?;
    sqlx::query(
        "INSERT INTO read_replicas (id, endpoint, zone, state, lease_expires_at_ms, \
         bytes_served_per_second, consumers, fetch_latency_p99_us, cache_hit_ratio_permille, \
         build_version, build_commit) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (id) DO UPDATE SET endpoint = excluded.endpoint, zone = excluded.zone, \
         build_version = excluded.build_version, build_commit = excluded.build_commit, \
         state = excluded.state, lease_expires_at_ms = excluded.lease_expires_at_ms, \
         bytes_served_per_second = excluded.bytes_served_per_second, \
         consumers = excluded.consumers, \
         fetch_latency_p99_us = excluded.fetch_latency_p99_us, \
         cache_hit_ratio_permille = excluded.cache_hit_ratio_permille",
    )
    .bind(replica.replica_id.as_str())
    .bind(replica.endpoint.as_str())
    .bind(replica.zone.as_deref())
    .bind(state_name(replica.state))
    .bind(to_db("lease_expires_at_ms", replica.lease_expires_at_ms)?)
    .bind(to_db(
        "bytes_served_per_second",
        replica.bytes_served_per_second,
    )?)
    .bind(i64::from(replica.consumers))
    .bind(to_db("fetch_latency_p99_us", replica.fetch_latency_p99_us)?)
    .bind(i64::from(replica.cache_hit_ratio_permille))
    .bind(replica.build.as_ref().map(|b| b.version.as_str()))
    .bind(replica.build.as_ref().map(|b| b.commit.as_str()))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The next `r-<n>` no replica holds.
async fn assign_id(tx: &mut AnyConnection) -> Result<String, StoreError> {
    for _ in 0..MAX_ID_ATTEMPTS {
        let row = sqlx::query(
            "UPDATE cluster_meta SET value = value + 1 WHERE key = 'read_replica_sequence' \
             RETURNING value",
        )
        .fetch_one(&mut *tx)
        .await?;
        let id = format!("r-{}", from_db("read_replica_sequence", row.try_get(0)?)?);
        if by_id(tx, &id).await?.is_none() {
            return Ok(id);
        }
    }
    Err(corrupt(
        "cluster_meta.read_replica_sequence",
        "no free id in 1000 attempts",
    ))
}

pub(super) async fn register(
    store: &SqlStore,
    registration: &ReadReplicaRegistration,
) -> Result<ReadReplicaInfo, StoreError> {
    let mut tx = store.write_tx().await?;
    let id = match &registration.id {
        Some(id) => id.clone(),
        None => assign_id(&mut tx).await?,
    };
    sqlx::query(
        "INSERT INTO read_replicas (id, endpoint, zone, state, lease_expires_at_ms, \
         bytes_served_per_second, consumers, fetch_latency_p99_us, cache_hit_ratio_permille, \
         build_version, build_commit) VALUES ($1, $2, $3, 'live', $4, 0, 0, 0, 0, $5, $6) \
         ON CONFLICT (id) DO UPDATE SET endpoint = excluded.endpoint, zone = excluded.zone, \
         build_version = excluded.build_version, build_commit = excluded.build_commit, \
         lease_expires_at_ms = excluded.lease_expires_at_ms, \
         state = CASE WHEN read_replicas.state = 'draining' THEN 'draining' ELSE 'live' END",
    )
    .bind(id.as_str())
    .bind(registration.endpoint.as_str())
    .bind(registration.zone.as_deref())
    .bind(to_db(
        "lease_expires_at_ms",
        registration.lease_expires_at_ms,
    )?)
    .bind(registration.build.as_ref().map(|b| b.version.as_str()))
    .bind(registration.build.as_ref().map(|b| b.commit.as_str()))
    .execute(&mut *tx)
    .await?;
    let replica = by_id(&mut tx, &id).await?;
    tx.commit().await?;
    replica.ok_or_else(|| corrupt("read_replicas.id", id))
}

pub(super) async fn renew(
    store: &SqlStore,
    id: &str,
    lease_expires_at_ms: u64,
    load: &ReadReplicaHeartbeat,
) -> Result<ReadReplicaInfo, StoreError> {
    let mut tx = store.write_tx().await?;
    let updated = sqlx::query(
        "UPDATE read_replicas SET lease_expires_at_ms = $1, bytes_served_per_second = $2, \
         consumers = $3, fetch_latency_p99_us = $4, cache_hit_ratio_permille = $5 \
         WHERE id = $6 AND state <> 'dead'",
    )
    .bind(to_db("lease_expires_at_ms", lease_expires_at_ms)?)
    .bind(to_db(
        "bytes_served_per_second",
        load.bytes_served_per_second,
    )?)
    .bind(i64::from(load.consumers))
    .bind(to_db("fetch_latency_p99_us", load.fetch_latency_p99_us)?)
    .bind(i64::from(load.cache_hit_ratio_permille))
    .bind(id)
    .execute(&mut *tx)
    .await?;
    let replica = by_id(&mut tx, id).await?;
    tx.commit().await?;
    match replica {
        None => Err(StoreError::ReadReplicaNotFound { id: id.to_owned() }),
        Some(_) if updated.rows_affected() == 0 => {
            Err(StoreError::ReadReplicaLeaseExpired { id: id.to_owned() })
        }
        Some(replica) => Ok(replica),
    }
}

pub(super) async fn drain(store: &SqlStore, id: &str) -> Result<ReadReplicaInfo, StoreError> {
    let mut tx = store.write_tx().await?;
    sqlx::query("UPDATE read_replicas SET state = 'draining' WHERE id = $1 AND state = 'live'")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let replica = by_id(&mut tx, id).await?;
    tx.commit().await?;
    replica.ok_or_else(|| StoreError::ReadReplicaNotFound { id: id.to_owned() })
}

pub(super) async fn remove(store: &SqlStore, id: &str) -> Result<(), StoreError> {
    let mut tx = store.write_tx().await?;
    let deleted = sqlx::query("DELETE FROM read_replicas WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    if deleted.rows_affected() == 0 {
        return Err(StoreError::ReadReplicaNotFound { id: id.to_owned() });
    }
    Ok(())
}

pub(super) async fn expire(store: &SqlStore, now_ms: u64) -> Result<Vec<String>, StoreError> {
    ids_of(
        store,
        "UPDATE read_replicas SET state = 'dead' WHERE state <> 'dead' \
         AND lease_expires_at_ms <= $1 RETURNING id",
        now_ms,
    )
    .await
}

pub(super) async fn forget_dead(
    store: &SqlStore,
    expired_by_ms: u64,
) -> Result<Vec<String>, StoreError> {
    ids_of(
        store,
        "DELETE FROM read_replicas WHERE state = 'dead' AND lease_expires_at_ms <= $1 \
         RETURNING id",
        expired_by_ms,
    )
    .await
}

/// Runs a write returning ids with one time parameter; the ids, ordered.
async fn ids_of(store: &SqlStore, sql: &'static str, ms: u64) -> Result<Vec<String>, StoreError> {
    let mut tx = store.write_tx().await?;
    let rows = sqlx::query(sql)
        .bind(to_db("now_ms", ms)?)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    let mut ids = rows
        .iter()
        .map(|row| row.try_get::<String, _>(0))
        .collect::<Result<Vec<_>, _>>()?;
    ids.sort();
    Ok(ids)
}

pub(super) async fn policy(store: &SqlStore) -> Result<ScalingPolicy, StoreError> {
    let row = sqlx::query(
        "SELECT min_replicas, max_replicas, target_bytes_per_second, target_consumers, \
         hysteresis_percent, scale_up_cooldown_ms, scale_down_cooldown_ms \
         FROM scaling_policy WHERE id = 1",
    )
    .fetch_optional(&store.pool)
    .await?;
    let Some(row) = row else {
        return Ok(ScalingPolicy::default());
    };
    Ok(ScalingPolicy {
        min_replicas: u32_from_db("min_replicas", row.try_get(0)?)?,
        max_replicas: u32_from_db("max_replicas", row.try_get(1)?)?,
        target_bytes_per_second: from_db("target_bytes_per_second", row.try_get(2)?)?,
        target_consumers: u32_from_db("target_consumers", row.try_get(3)?)?,
        hysteresis_percent: u32_from_db("hysteresis_percent", row.try_get(4)?)?,
        scale_up_cooldown_ms: from_db("scale_up_cooldown_ms", row.try_get(5)?)?,
        scale_down_cooldown_ms: from_db("scale_down_cooldown_ms", row.try_get(6)?)?,
    })
}

pub(super) async fn set_policy(store: &SqlStore, policy: &ScalingPolicy) -> Result<(), StoreError> {
    let mut tx = store.write_tx().await?;
    sqlx::query(
        "INSERT INTO scaling_policy (id, min_replicas, max_replicas, target_bytes_per_second, \
         target_consumers, hysteresis_percent, scale_up_cooldown_ms, scale_down_cooldown_ms) \
         VALUES (1, $1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET \
         min_replicas = excluded.min_replicas, max_replicas = excluded.max_replicas, \
         target_bytes_per_second = excluded.target_bytes_per_second, \
         target_consumers = excluded.target_consumers, \
         hysteresis_percent = excluded.hysteresis_percent, \
         scale_up_cooldown_ms = excluded.scale_up_cooldown_ms, \
         scale_down_cooldown_ms = excluded.scale_down_cooldown_ms",
    )
    .bind(i64::from(policy.min_replicas))
    .bind(i64::from(policy.max_replicas))
    .bind(to_db(
        "target_bytes_per_second",
        policy.target_bytes_per_second,
    )?)
    .bind(i64::from(policy.target_consumers))
    .bind(i64::from(policy.hysteresis_percent))
    .bind(to_db("scale_up_cooldown_ms", policy.scale_up_cooldown_ms)?)
    .bind(to_db(
        "scale_down_cooldown_ms",
        policy.scale_down_cooldown_ms,
    )?)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

fn state_name(state: ReadReplicaState) -> &'static str {
    match state {
        ReadReplicaState::Live => "live",
        ReadReplicaState::Draining => "draining",
        ReadReplicaState::Dead => "dead",
    }
}

fn state_from_db(value: &str) -> Result<ReadReplicaState, StoreError> {
    match value {
        "live" => Ok(ReadReplicaState::Live),
        "draining" => Ok(ReadReplicaState::Draining),
        "dead" => Ok(ReadReplicaState::Dead),
        other => Err(corrupt("read_replicas.state", other)),
    }
}

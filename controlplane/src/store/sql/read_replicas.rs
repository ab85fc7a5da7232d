//! Read replicas and the scaling policy in SQL.

use floe_wire::Endpoint;
use floe_wire::admin::{ReadReplicaInfo, ReadReplicaState, ScalingPolicy};
use sqlx::Row;

use super::{SqlStore, corrupt, from_db, to_db, u32_from_db};
use crate::store::StoreError;

pub(super) async fn list(store: &SqlStore) -> Result<Vec<ReadReplicaInfo>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, endpoint, zone, state, lease_expires_at_ms, bytes_served_per_second, \
         consumers FROM read_replicas ORDER BY id",
    )
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
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
            })
        })
        .collect()
}

pub(super) async fn upsert(store: &SqlStore, replica: &ReadReplicaInfo) -> Result<(), StoreError> {
    let mut tx = store.write_tx().await?;
    sqlx::query(
        "INSERT INTO read_replicas (id, endpoint, zone, state, lease_expires_at_ms, \
         bytes_served_per_second, consumers) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (id) DO UPDATE SET endpoint = excluded.endpoint, zone = excluded.zone, \
         state = excluded.state, lease_expires_at_ms = excluded.lease_expires_at_ms, \
         bytes_served_per_second = excluded.bytes_served_per_second, \
         consumers = excluded.consumers",
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
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
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

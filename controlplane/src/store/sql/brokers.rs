//! Brokers and their leases in SQL.

use floe_wire::admin::{BrokerInfo, BrokerState};
use floe_wire::{BrokerId, Endpoint};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AssertSqlSafe, Row};

use super::{
    SqlStore, broker_from_db, broker_state_from_db, broker_state_name, build_from_row, corrupt,
    from_db, to_db, u32_from_db,
};
use crate::store::{BrokerRegistration, StoreError};

const BROKER_QUERY: &str = "SELECT b.id, b.client_endpoint, b.peer_endpoint, b.zone, b.state, \
     b.lease_expires_at_ms, b.build_version, b.build_commit, \
     (SELECT COUNT(*) FROM partition_replicas r WHERE r.broker_id = b.id) AS replicas, \
     (SELECT COUNT(*) FROM partitions p WHERE p.leader = b.id) AS leaders \
     FROM brokers b";

pub(super) async fn register(
    store: &SqlStore,
    registration: &BrokerRegistration,
) -> Result<BrokerInfo, StoreError> {
    let mut tx = store.write_tx().await?;
    let id = match registration.id {
        Some(id) => i64::from(id.get()),
        None => {
            let row = sqlx::query("SELECT COALESCE(MAX(id), 0) + 1 FROM brokers")
                .fetch_one(&mut *tx)
                .await?;
            let mut next: i64 = row.try_get(0)?;
            if next > i64::from(u32::MAX) {
                // A broker registered under the largest id: take the smallest free one.
                let row = sqlx::query(
                    "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM brokers WHERE id = 1) THEN 1 \
                     ELSE (SELECT MIN(b.id) + 1 FROM brokers b WHERE NOT EXISTS \
                     (SELECT 1 FROM brokers c WHERE c.id = b.id + 1)) END",
                )
                .fetch_one(&mut *tx)
                .await?;
                next = row.try_get(0)?;
                if next > i64::from(u32::MAX) {
                    return Err(StoreError::OutOfRange {
                        field: "brokers.id (every broker id is taken)",
                        value: u64::try_from(next).unwrap_or(u64::MAX),
                    });
                }
            }
            i64::from(broker_from_db("brokers.id", next)?.get())
        }
    };
    sqlx::query(
        "INSERT INTO brokers (id, client_endpoint, peer_endpoint, zone, state, \
         lease_expires_at_ms, registered_at_ms, build_version, build_commit) \
         VALUES ($1, $2, $3, $4, 'live', $5, $6, $7, $8) \
         ON CONFLICT (id) DO UPDATE SET client_endpoint = excluded.client_endpoint, \
         peer_endpoint = excluded.peer_endpoint, zone = excluded.zone, \
         build_version = excluded.build_version, build_commit = excluded.build_commit, \
         lease_expires_at_ms = excluded.lease_expires_at_ms, \
         state = CASE WHEN brokers.state = 'draining' THEN 'draining' ELSE 'live' END",
    )
    .bind(id)
    .bind(registration.client_endpoint.as_str())
    .bind(registration.peer_endpoint.as_str())
    .bind(registration.zone.as_deref())
    .bind(to_db(
        "lease_expires_at_ms",
        registration.lease_expires_at_ms,
    )?)
    .bind(to_db("now_ms", registration.now_ms)?)
    .bind(registration.build.as_ref().map(|b| b.version.as_str()))
    .bind(registration.build.as_ref().map(|b| b.commit.as_str()))
    .execute(&mut *tx)
    .await?;
    let broker = by_id(&mut tx, id).await?;
    tx.commit().await?;
    broker.ok_or_else(|| corrupt("brokers.id", id))
}

pub(super) async fn renew_lease(
    store: &SqlStore,
    id: BrokerId,
    lease_expires_at_ms: u64,
) -> Result<BrokerInfo, StoreError> {
    let mut tx = store.write_tx().await?;
    let updated = sqlx::query(
        "UPDATE brokers SET lease_expires_at_ms = $1 WHERE id = $2 AND state <> 'dead'",
    )
    .bind(to_db("lease_expires_at_ms", lease_expires_at_ms)?)
    .bind(i64::from(id.get()))
    .execute(&mut *tx)
    .await?;
    let broker = by_id(&mut tx, i64::from(id.get())).await?;
    tx.commit().await?;
    match broker {
        None => Err(StoreError::BrokerNotFound { id }),
        Some(_) if updated.rows_affected() == 0 => Err(StoreError::LeaseExpired { id }),
        Some(broker) => Ok(broker),
    }
}

pub(super) async fn list(store: &SqlStore) -> Result<Vec<BrokerInfo>, StoreError> {
    let sql = format!("{BROKER_QUERY} ORDER BY b.id");
    let rows = sqlx::query(AssertSqlSafe(sql))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(broker_from_row).collect()
}

pub(super) async fn set_state(
    store: &SqlStore,
    id: BrokerId,
    state: BrokerState,
) -> Result<BrokerInfo, StoreError> {
    let mut tx = store.write_tx().await?;
    // Only a lease makes a broker live: back to live is from draining alone, and a dead
    // broker stays dead until it heartbeats again.
    let sql = if state == BrokerState::Live {
        "UPDATE brokers SET state = $1 WHERE id = $2 AND state = 'draining'"
    } else {
        "UPDATE brokers SET state = $1 WHERE id = $2"
    };
    sqlx::query(sql)
        .bind(broker_state_name(state))
        .bind(i64::from(id.get()))
        .execute(&mut *tx)
        .await?;
    let broker = by_id(&mut tx, i64::from(id.get())).await?;
    tx.commit().await?;
    broker.ok_or(StoreError::BrokerNotFound { id })
}

pub(super) async fn extend_leases(
    store: &SqlStore,
    lease_expires_at_ms: u64,
) -> Result<(), StoreError> {
    let mut tx = store.write_tx().await?;
    sqlx::query(
        "UPDATE brokers SET lease_expires_at_ms = $1 \
         WHERE state <> 'dead' AND lease_expires_at_ms < $1",
    )
    .bind(to_db("lease_expires_at_ms", lease_expires_at_ms)?)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn expire_leases(
    store: &SqlStore,
    now_ms: u64,
) -> Result<Vec<BrokerId>, StoreError> {
    let mut tx = store.write_tx().await?;
    let rows = sqlx::query(
        "UPDATE brokers SET state = 'dead' WHERE state <> 'dead' AND lease_expires_at_ms <= $1 \
         RETURNING id",
    )
    .bind(to_db("now_ms", now_ms)?)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut expired = rows
        .iter()
        .map(|row| broker_from_db("brokers.id", row.try_get(0)?))
        .collect::<Result<Vec<_>, _>>()?;
    expired.sort();
    Ok(expired)
}

async fn by_id(tx: &mut AnyConnection, id: i64) -> Result<Option<BrokerInfo>, StoreError> {
    let sql = format!("{BROKER_QUERY} WHERE b.id = $1");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(broker_from_row).transpose()
}

fn broker_from_row(row: &AnyRow) -> Result<BrokerInfo, StoreError> {
    let endpoint = |column: &'static str| -> Result<Endpoint, StoreError> {
        let text: String = row.try_get(column)?;
        Endpoint::new(text.clone()).map_err(|_| corrupt(column, text))
    };
    let state: String = row.try_get("state")?;
    Ok(BrokerInfo {
        broker_id: broker_from_db("brokers.id", row.try_get("id")?)?,
        client_endpoint: endpoint("client_endpoint")?,
        peer_endpoint: endpoint("peer_endpoint")?,
        zone: row.try_get("zone")?,
        state: broker_state_from_db(&state)?,
        lease_expires_at_ms: from_db("lease_expires_at_ms", row.try_get("lease_expires_at_ms")?)?,
        replicas: u32_from_db("replicas", row.try_get("replicas")?)?,
        leaders: u32_from_db("leaders", row.try_get("leaders")?)?,
        build: build_from_row(row.try_get("build_version")?, row.try_get("build_commit")?),
    })
}

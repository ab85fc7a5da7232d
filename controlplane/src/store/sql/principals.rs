//! Principals, their grants and token hashes in SQL.

use floe_wire::auth::{Credential, Grant, Principal, SecretHash};
use sqlx::{AnyConnection, Row};

use super::{SqlStore, corrupt, from_db, to_db};
use crate::store::{StoreError, StoredPrincipal, StoredToken};

pub(super) async fn create(
    store: &SqlStore,
    principal: &Principal,
    token: &Credential,
    now_ms: u64,
) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    let inserted = sqlx::query(
        "INSERT INTO principals (name, kind, grants, created_at_ms, broker_id) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
    )
    .bind(principal.name.as_str())
    .bind(principal.kind.as_str())
    .bind(grants_to_db(&principal.grants))
    .bind(to_db("created_at_ms", now_ms)?)
    .bind(principal.broker_id.map(|id| i64::from(id.get())))
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(StoreError::PrincipalExists {
            name: principal.name.clone(),
        });
    }
    insert_token(&mut tx, &principal.name, token, now_ms).await?;
    let version = bump(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn add_token(
    store: &SqlStore,
    name: &str,
    token: &Credential,
    now_ms: u64,
) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    exists(&mut tx, name).await?;
    insert_token(&mut tx, name, token, now_ms).await?;
    let version = bump(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn revoke(store: &SqlStore, name: &str) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    exists(&mut tx, name).await?;
    sqlx::query("DELETE FROM principal_tokens WHERE principal = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM principals WHERE name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    let version = bump(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn revoke_token(
    store: &SqlStore,
    name: &str,
    key_id: &str,
) -> Result<u64, StoreError> {
    let mut tx = store.write_tx().await?;
    exists(&mut tx, name).await?;
    let deleted = sqlx::query("DELETE FROM principal_tokens WHERE principal = $1 AND key_id = $2")
        .bind(name)
        .bind(key_id)
        .execute(&mut *tx)
        .await?;
    if deleted.rows_affected() == 0 {
        return Err(StoreError::TokenNotFound {
            name: name.to_owned(),
            key_id: key_id.chars().take(64).collect(),
        });
    }
    let version = bump(&mut tx).await?;
    tx.commit().await?;
    Ok(version)
}

pub(super) async fn list(store: &SqlStore) -> Result<(u64, Vec<StoredPrincipal>), StoreError> {
    let mut tx = store.read_tx().await?;
    let version = read(&mut tx).await?;
    let rows = sqlx::query("SELECT name, kind, grants, broker_id FROM principals ORDER BY name")
        .fetch_all(&mut *tx)
        .await?;
    let mut principals = Vec::with_capacity(rows.len());
    for row in &rows {
        let kind: String = row.try_get(1)?;
        let grants: String = row.try_get(2)?;
        let broker_id: Option<i64> = row.try_get(3)?;
        let broker_id = broker_id
            .map(|id| {
                u32::try_from(id)
                    .map(floe_wire::BrokerId::new)
                    .map_err(|_| corrupt("principals.broker_id", id))
            })
            .transpose()?;
        principals.push(StoredPrincipal {
            principal: Principal {
                name: row.try_get(0)?,
                kind: kind
                    .parse()
                    .map_err(|_| corrupt("principals.kind", &kind))?,
                grants: grants_from_db(&grants)?,
                broker_id,
            },
            tokens: Vec::new(),
        });
    }
    let tokens = sqlx::query(
        "SELECT principal, key_id, secret_hash, created_at_ms FROM principal_tokens \
         ORDER BY principal, created_at_ms, key_id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for row in &tokens {
        let owner: String = row.try_get(0)?;
        let hash: String = row.try_get(2)?;
        let token = StoredToken {
            key: Credential {
                key_id: row.try_get(1)?,
                hash: SecretHash::from_hex(&hash).ok_or_else(|| {
                    corrupt("principal_tokens.secret_hash", "<not 64 hex digits>")
                })?,
            },
            created_at_ms: from_db("created_at_ms", row.try_get(3)?)?,
        };
        // Both lists are ordered by principal name.
        if let Some(entry) = principals
            .iter_mut()
            .find(|entry| entry.principal.name == owner)
        {
            entry.tokens.push(token);
        }
    }
    tx.commit().await?;
    Ok((version, principals))
}

pub(super) async fn version(store: &SqlStore) -> Result<u64, StoreError> {
    let mut conn = store.pool.acquire().await?;
    read(&mut conn).await
}

async fn exists(tx: &mut AnyConnection, name: &str) -> Result<(), StoreError> {
    let found = sqlx::query("SELECT 1 FROM principals WHERE name = $1")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::PrincipalNotFound {
            name: name.to_owned(),
        }),
    }
}

async fn insert_token(
    tx: &mut AnyConnection,
    name: &str,
    token: &Credential,
    now_ms: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO principal_tokens (key_id, principal, secret_hash, created_at_ms) \
         VALUES ($1, $2, $3, $4)",
    )
    .bind(token.key_id.as_str())
    .bind(name)
    .bind(token.hash.to_hex())
    .bind(to_db("created_at_ms", now_ms)?)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn bump(tx: &mut AnyConnection) -> Result<u64, StoreError> {
    let row = sqlx::query(
        "UPDATE cluster_meta SET value = value + 1 WHERE key = 'principals_version' \
         RETURNING value",
    )
    .fetch_one(&mut *tx)
    .await?;
    from_db("principals_version", row.try_get(0)?)
}

async fn read(tx: &mut AnyConnection) -> Result<u64, StoreError> {
    let row = sqlx::query("SELECT value FROM cluster_meta WHERE key = 'principals_version'")
        .fetch_one(&mut *tx)
        .await?;
    from_db("principals_version", row.try_get(0)?)
}

fn grants_to_db(grants: &[Grant]) -> String {
    grants
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

fn grants_from_db(text: &str) -> Result<Vec<Grant>, StoreError> {
    text.split_whitespace()
        .map(|grant| {
            grant
                .parse()
                .map_err(|_| corrupt("principals.grants", grant))
        })
        .collect()
}

//! Versioned schema migrations, one set per backend, embedded in the binary.
//!
//! Each migration runs once, in its own transaction, and is recorded in `floe_migrations`
//! with a checksum of its text; a recorded migration whose text changed refuses to start
//! rather than leaving the schema in an unknown state. On PostgreSQL a transaction-scoped
//! advisory lock serialises controlplanes migrating at the same time.
//!
//! sqlx's own migrator is not used: without its macros it reads migrations from a directory
//! at run time, and the binary must carry its schema.

use sqlx::{Any, AnyPool, Row, Transaction};

use crate::store::StoreError;
use crate::store::sql::Backend;

/// One migration: its version and its SQL (several statements).
struct Migration {
    version: i64,
    description: &'static str,
    sql: &'static str,
}

const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        description: "initial",
        sql: include_str!("../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        description: "replicas by broker",
        sql: include_str!("../../migrations/sqlite/0002_replicas_by_broker.sql"),
    },
    Migration {
        version: 3,
        description: "partition elections",
        sql: include_str!("../../migrations/sqlite/0003_partition_elections.sql"),
    },
    Migration {
        version: 4,
        description: "read replica load",
        sql: include_str!("../../migrations/sqlite/0004_read_replica_load.sql"),
    },
    Migration {
        version: 5,
        description: "partition progress",
        sql: include_str!("../../migrations/sqlite/0005_partition_progress.sql"),
    },
    Migration {
        version: 6,
        description: "replica set changes",
        sql: include_str!("../../migrations/sqlite/0006_replica_set_changes.sql"),
    },
    Migration {
        version: 7,
        description: "builds",
        sql: include_str!("../../migrations/sqlite/0007_builds.sql"),
    },
    Migration {
        version: 8,
        description: "principals",
        sql: include_str!("../../migrations/sqlite/0008_principals.sql"),
    },
    Migration {
        version: 9,
        description: "stream creators",
        sql: include_str!("../../migrations/sqlite/0009_stream_creators.sql"),
    },
    Migration {
        version: 10,
        description: "principal broker id",
        sql: include_str!("../../migrations/sqlite/0010_principal_broker_id.sql"),
    },
];

const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        description: "initial",
        sql: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        description: "replicas by broker",
        sql: include_str!("../../migrations/postgres/0002_replicas_by_broker.sql"),
    },
    Migration {
        version: 3,
        description: "partition elections",
        sql: include_str!("../../migrations/postgres/0003_partition_elections.sql"),
    },
    Migration {
        version: 4,
        description: "read replica load",
        sql: include_str!("../../migrations/postgres/0004_read_replica_load.sql"),
    },
    Migration {
        version: 5,
        description: "partition progress",
        sql: include_str!("../../migrations/postgres/0005_partition_progress.sql"),
    },
    Migration {
        version: 6,
        description: "replica set changes",
        sql: include_str!("../../migrations/postgres/0006_replica_set_changes.sql"),
    },
    Migration {
        version: 7,
        description: "builds",
        sql: include_str!("../../migrations/postgres/0007_builds.sql"),
    },
    Migration {
        version: 8,
        description: "principals",
        sql: include_str!("../../migrations/postgres/0008_principals.sql"),
    },
    Migration {
        version: 9,
        description: "stream creators",
        sql: include_str!("../../migrations/postgres/0009_stream_creators.sql"),
    },
    Migration {
        version: 10,
        description: "principal broker id",
        sql: include_str!("../../migrations/postgres/0010_principal_broker_id.sql"),
    },
];

/// Key of the advisory lock held while migrating (PostgreSQL); distinct from the leader lock.
const MIGRATION_LOCK_KEY: i64 = 0x466c_6f65_4d69_6701;

/// Applies every migration not yet applied, in version order.
pub(crate) async fn run(pool: &AnyPool, backend: Backend) -> Result<(), StoreError> {
    let migrations = match backend {
        Backend::Sqlite => SQLITE,
        Backend::Postgres => POSTGRES,
    };
    for migration in migrations {
        let mut tx = begin(pool, backend).await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS floe_migrations (version BIGINT PRIMARY KEY, \
             description TEXT NOT NULL, checksum BIGINT NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        let checksum = checksum(migration.sql);
        let applied = sqlx::query("SELECT checksum FROM floe_migrations WHERE version = $1")
            .bind(migration.version)
            .fetch_optional(&mut *tx)
            .await?;
        match applied {
            Some(row) if row.try_get::<i64, _>(0)? == checksum => continue,
            Some(_) => {
                return Err(StoreError::MigrationChanged {
                    version: migration.version,
                });
            }
            None => {}
        }
        sqlx::raw_sql(migration.sql).execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO floe_migrations (version, description, checksum) VALUES ($1, $2, $3)",
        )
        .bind(migration.version)
        .bind(migration.description)
        .bind(checksum)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(version = migration.version, "applied metadata migration");
    }
    Ok(())
}

async fn begin(pool: &AnyPool, backend: Backend) -> Result<Transaction<'static, Any>, StoreError> {
    match backend {
        Backend::Sqlite => Ok(pool.begin_with("BEGIN IMMEDIATE").await?),
        Backend::Postgres => {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(MIGRATION_LOCK_KEY)
                .execute(&mut *tx)
                .await?;
            Ok(tx)
        }
    }
}

/// FNV-1a over the migration's text: stable across builds and platforms.
fn checksum(sql: &str) -> i64 {
    let hash = sql.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    i64::from_le_bytes(hash.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_and_both_backends_have_the_same_ones() {
        let versions = |set: &[Migration]| set.iter().map(|m| m.version).collect::<Vec<_>>();
        assert_eq!(versions(SQLITE), versions(POSTGRES));
        assert!(versions(SQLITE).windows(2).all(|w| w[0] < w[1]));
        assert_ne!(checksum("a"), checksum("b"));
    }
}

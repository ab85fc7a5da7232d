//! [`SqlStore`]: the metadata store on SQLite or PostgreSQL.
//!
//! One implementation serves both backends through sqlx's `Any` driver: the queries use only
//! SQL both accept (`$n` parameters, `ON CONFLICT`, `RETURNING`, 64-bit integers, text), and
//! the schema differs only in its migrations. Writes on SQLite begin `IMMEDIATE` so that a
//! read-then-write transaction never fails on a lock upgrade; reads on PostgreSQL run in a
//! repeatable-read snapshot so that a multi-query answer is consistent.

mod assignments;
mod brokers;
mod groups;
mod leadership;
mod principals;
mod read_replicas;
mod streams;

use std::path::Path;

use floe_wire::admin::{
    Assignments, BrokerInfo, BrokerState, Build, CommittedOffset, GroupSummary, OffsetCommit,
    PartitionReport, ReadReplicaHeartbeat, ReadReplicaInfo, ScalingPolicy, StreamConfig,
    StreamDescription, StreamInfo,
};
use floe_wire::{BrokerId, LeaderEpoch, PartitionId, StreamName};
use sqlx::any::AnyPoolOptions;
use sqlx::{Any, AnyConnection, AnyPool, Row, Transaction};

use crate::store::{
    BrokerRegistration, ElectionResult, ElectionStart, GroupOffsetStore, MetadataStore,
    MisplacedPartition, PartitionLeadership, PrincipalStore, ReadReplicaRegistration,
    ReadReplicaStore, Reassignment, StoreError, StoredPrincipal, migrations,
};
use floe_wire::auth::{Credential, Principal};

/// Which database a [`SqlStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The metadata store on SQLite (one file) or PostgreSQL. Cheap to clone (a pool handle).
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
}

impl SqlStore {
    /// Opens (creating it if needed) the SQLite database in `path` and migrates it.
    pub async fn open_sqlite(path: &Path) -> Result<SqlStore, StoreError> {
        let url = format!("sqlite://{}?mode=rwc", path.display());
        SqlStore::connect(&url).await
    }

    /// Connects to `url` (`sqlite://PATH` or `postgres://…`) and migrates the database.
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let max_connections = match backend {
            // One writer at a time anyway; a few readers beside it under WAL.
            Backend::Sqlite => 4,
            Backend::Postgres => 8,
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            // A ping before every checkout is a round trip to a SQLite connection's worker
            // thread on each request, for a local file that does not drop connections;
            // a PostgreSQL connection can break between uses, so it is checked.
            .test_before_acquire(backend == Backend::Postgres)
            .connect(url)
            .await?;
        if backend == Backend::Sqlite {
            // Persistent in the file: readers proceed while a writer commits.
            sqlx::query("PRAGMA journal_mode = WAL")
                .fetch_all(&pool)
                .await?;
        }
        migrations::run(&pool, backend).await?;
        Ok(SqlStore { pool, backend })
    }

    /// The backend this store talks to.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn write_tx(&self) -> Result<Transaction<'static, Any>, StoreError> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    async fn read_tx(&self) -> Result<Transaction<'static, Any>, StoreError> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin().await?,
            Backend::Postgres => {
                self.pool
                    .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?
            }
        })
    }
}

/// Increments the assignment version inside `tx` and returns the new value.
async fn bump_version(tx: &mut AnyConnection) -> Result<u64, StoreError> {
    let row = sqlx::query(
        "UPDATE cluster_meta SET value = value + 1 WHERE key = 'assignment_version' \
         RETURNING value",
    )
    .fetch_one(&mut *tx)
    .await?;
    from_db("assignment_version", row.try_get(0)?)
}

async fn read_version(tx: &mut AnyConnection) -> Result<u64, StoreError> {
    let row = sqlx::query("SELECT value FROM cluster_meta WHERE key = 'assignment_version'")
        .fetch_one(&mut *tx)
        .await?;
    from_db("assignment_version", row.try_get(0)?)
}

/// A u64 as the store's signed 64-bit integer.
fn to_db(field: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { field, value })
}

fn opt_to_db(field: &'static str, value: Option<u64>) -> Result<Option<i64>, StoreError> {
    value.map(|value| to_db(field, value)).transpose()
}

fn from_db(column: &'static str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt(column, value))
}

fn opt_from_db(column: &'static str, value: Option<i64>) -> Result<Option<u64>, StoreError> {
    value.map(|value| from_db(column, value)).transpose()
}

/// A leader epoch, as the store keeps it (a signed 64-bit integer).
fn epoch_to_db(epoch: LeaderEpoch) -> i64 {
    i64::from(epoch.get())
}

fn epoch_from_db(column: &'static str, value: i64) -> Result<LeaderEpoch, StoreError> {
    u32_from_db(column, value).map(LeaderEpoch::new)
}

fn u32_from_db(column: &'static str, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| corrupt(column, value))
}

fn broker_from_db(column: &'static str, value: i64) -> Result<BrokerId, StoreError> {
    u32_from_db(column, value).map(BrokerId::new)
}

/// A replica set kept as JSON (`previous_replicas`): `[broker ids]`; null is empty.
fn brokers_from_db(
    column: &'static str,
    value: Option<String>,
) -> Result<Vec<BrokerId>, StoreError> {
    let Some(text) = value else {
        return Ok(Vec::new());
    };
    let ids: Vec<u32> = serde_json::from_str(&text).map_err(|_| corrupt(column, &text))?;
    Ok(ids.into_iter().map(BrokerId::new).collect())
}

/// The JSON of a replica set, null when empty.
fn brokers_to_db(ids: &[BrokerId]) -> Option<String> {
    if ids.is_empty() {
        return None;
    }
    let ids: Vec<u32> = ids.iter().map(|id| id.get()).collect();
    // Plain numbers: encoding cannot fail.
    serde_json::to_string(&ids).ok()
}

fn name_from_db(column: &'static str, value: String) -> Result<StreamName, StoreError> {
    StreamName::new(value.clone()).map_err(|_| corrupt(column, value))
}

/// A build from its two columns; a row without both (registered before builds were kept)
/// has none.
fn build_from_row(version: Option<String>, commit: Option<String>) -> Option<Build> {
    Some(Build {
        version: version?,
        commit: commit?,
    })
}

fn corrupt(column: &'static str, value: impl ToString) -> StoreError {
    StoreError::Corrupt {
        column,
        value: value.to_string(),
    }
}

fn broker_state_name(state: BrokerState) -> &'static str {
    match state {
        BrokerState::Live => "live",
        BrokerState::Draining => "draining",
        BrokerState::Dead => "dead",
    }
}

fn broker_state_from_db(value: &str) -> Result<BrokerState, StoreError> {
    match value {
        "live" => Ok(BrokerState::Live),
        "draining" => Ok(BrokerState::Draining),
        "dead" => Ok(BrokerState::Dead),
        other => Err(corrupt("brokers.state", other)),
    }
}

impl MetadataStore for SqlStore {
    async fn create_stream_by(
        &self,
        stream: &StreamInfo,
        replicas: &[Vec<BrokerId>],
        creator: Option<&str>,
    ) -> Result<u64, StoreError> {
        streams::create(self, stream, replicas, creator).await
    }

    async fn streams_created_by(&self, creator: &str) -> Result<u64, StoreError> {
        streams::count_created_by(self, creator).await
    }

    async fn streams(&self) -> Result<Vec<StreamInfo>, StoreError> {
        streams::list(self).await
    }

    async fn describe_stream(
        &self,
        name: &StreamName,
    ) -> Result<Option<StreamDescription>, StoreError> {
        streams::describe(self, name).await
    }

    async fn set_stream_settings(
        &self,
        name: &StreamName,
        config: &StreamConfig,
    ) -> Result<(StreamInfo, u64), StoreError> {
        streams::set_settings(self, name, config).await
    }

    async fn delete_stream(&self, name: &StreamName) -> Result<u64, StoreError> {
        streams::delete(self, name).await
    }

    async fn register_broker(
        &self,
        registration: &BrokerRegistration,
    ) -> Result<BrokerInfo, StoreError> {
        brokers::register(self, registration).await
    }

    async fn renew_lease(
        &self,
        id: BrokerId,
        lease_expires_at_ms: u64,
    ) -> Result<BrokerInfo, StoreError> {
        brokers::renew_lease(self, id, lease_expires_at_ms).await
    }

    async fn brokers(&self) -> Result<Vec<BrokerInfo>, StoreError> {
        brokers::list(self).await
    }

    async fn set_broker_state(
        &self,
        id: BrokerId,
        state: BrokerState,
    ) -> Result<BrokerInfo, StoreError> {
        brokers::set_state(self, id, state).await
    }

    async fn extend_leases(&self, lease_expires_at_ms: u64) -> Result<(), StoreError> {
        brokers::extend_leases(self, lease_expires_at_ms).await
    }

    async fn expire_leases(&self, now_ms: u64) -> Result<Vec<BrokerId>, StoreError> {
        brokers::expire_leases(self, now_ms).await
    }

    async fn report_partitions(
        &self,
        id: BrokerId,
        reports: &[PartitionReport],
    ) -> Result<Option<u64>, StoreError> {
        assignments::report(self, id, reports).await
    }

    async fn misplaced_partitions(&self) -> Result<Vec<MisplacedPartition>, StoreError> {
        assignments::misplaced(self).await
    }

    async fn reassign(&self, changes: &[Reassignment]) -> Result<u64, StoreError> {
        assignments::reassign(self, changes).await
    }

    async fn leaderless_partitions(&self) -> Result<Vec<PartitionLeadership>, StoreError> {
        leadership::leaderless(self).await
    }

    async fn partition_leadership(
        &self,
        stream: &StreamName,
        partition: PartitionId,
    ) -> Result<PartitionLeadership, StoreError> {
        leadership::one(self, stream, partition).await
    }

    async fn start_elections(&self, elections: &[ElectionStart]) -> Result<u64, StoreError> {
        leadership::start(self, elections).await
    }

    async fn elect_leader(&self, result: &ElectionResult) -> Result<u64, StoreError> {
        leadership::elect(self, result).await
    }

    async fn next_lease_expiry(&self) -> Result<Option<u64>, StoreError> {
        leadership::next_lease_expiry(self).await
    }

    async fn assignments(&self, id: BrokerId) -> Result<Assignments, StoreError> {
        assignments::for_broker(self, id).await
    }

    async fn assignment_version(&self) -> Result<u64, StoreError> {
        let mut connection = self.pool.acquire().await?;
        read_version(&mut connection).await
    }
}

impl GroupOffsetStore for SqlStore {
    async fn groups(&self) -> Result<Vec<GroupSummary>, StoreError> {
        groups::list(self).await
    }

    async fn group_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>, StoreError> {
        groups::offsets(self, group).await
    }

    async fn commit_offsets(
        &self,
        group: &str,
        commits: &[OffsetCommit],
        now_ms: u64,
    ) -> Result<(), StoreError> {
        groups::commit(self, group, commits, now_ms).await
    }

    async fn commit_offsets_batch(
        &self,
        entries: &[(&str, &OffsetCommit)],
        now_ms: u64,
    ) -> Result<(), StoreError> {
        groups::commit_batch(self, entries, now_ms).await
    }

    async fn delete_group(&self, group: &str) -> Result<u64, StoreError> {
        groups::delete(self, group).await
    }
}

impl ReadReplicaStore for SqlStore {
    async fn read_replicas(&self) -> Result<Vec<ReadReplicaInfo>, StoreError> {
        read_replicas::list(self).await
    }

    async fn upsert_read_replica(&self, replica: &ReadReplicaInfo) -> Result<(), StoreError> {
        read_replicas::upsert(self, replica).await
    }

    async fn register_read_replica(
        &self,
        registration: &ReadReplicaRegistration,
    ) -> Result<ReadReplicaInfo, StoreError> {
        read_replicas::register(self, registration).await
    }

    async fn renew_read_replica(
        &self,
        id: &str,
        lease_expires_at_ms: u64,
        load: &ReadReplicaHeartbeat,
    ) -> Result<ReadReplicaInfo, StoreError> {
        read_replicas::renew(self, id, lease_expires_at_ms, load).await
    }

    async fn drain_read_replica(&self, id: &str) -> Result<ReadReplicaInfo, StoreError> {
        read_replicas::drain(self, id).await
    }

    async fn remove_read_replica(&self, id: &str) -> Result<(), StoreError> {
        read_replicas::remove(self, id).await
    }

    async fn expire_read_replica_leases(&self, now_ms: u64) -> Result<Vec<String>, StoreError> {
        read_replicas::expire(self, now_ms).await
    }

    async fn forget_dead_read_replicas(
        &self,
        expired_by_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        read_replicas::forget_dead(self, expired_by_ms).await
    }

    async fn scaling_policy(&self) -> Result<ScalingPolicy, StoreError> {
        read_replicas::policy(self).await
    }

    async fn set_scaling_policy(&self, policy: &ScalingPolicy) -> Result<(), StoreError> {
        read_replicas::set_policy(self, policy).await
    }
}

impl PrincipalStore for SqlStore {
    async fn create_principal(
        &self,
        principal: &Principal,
        token: &Credential,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        principals::create(self, principal, token, now_ms).await
    }

    async fn add_token(
        &self,
        name: &str,
        token: &Credential,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        principals::add_token(self, name, token, now_ms).await
    }

    async fn revoke_principal(&self, name: &str) -> Result<u64, StoreError> {
        principals::revoke(self, name).await
    }

    async fn revoke_token(&self, name: &str, key_id: &str) -> Result<u64, StoreError> {
        principals::revoke_token(self, name, key_id).await
    }

    async fn principals(&self) -> Result<(u64, Vec<StoredPrincipal>), StoreError> {
        principals::list(self).await
    }

    async fn principals_version(&self) -> Result<u64, StoreError> {
        principals::version(self).await
    }
}

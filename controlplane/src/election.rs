//! Leader election among controlplanes sharing one PostgreSQL: the leader is whoever holds a
//! session-level advisory lock on a dedicated connection.
//!
//! A standby tries `pg_try_advisory_lock` every `election_interval`; the leader checks its
//! connection as often. The lock dies with the session, so a leader that crashes or loses
//! the database frees it for a standby at once (a killed process closes its socket; a
//! partitioned one is dropped by the server's TCP keepalive). A leader that cannot reach its
//! connection steps down before its next check returns. Between the database ending a
//! session and the old leader noticing, both may believe they lead for up to one interval;
//! partition epochs (compare-and-set) keep their writes from overwriting each other.
//!
//! On SQLite there is one controlplane and it always leads.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::store::Store;

/// The advisory lock key: "Floe" "Lead" in ASCII.
const LEADER_LOCK_KEY: i64 = 0x466c_6f65_4c65_6164;

/// Runs the election on PostgreSQL at `url` until `shutdown`.
pub(crate) async fn run<S: Store>(
    cluster: Arc<Cluster<S>>,
    url: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let interval = cluster.config.election_interval;
    loop {
        match try_lock(&url).await {
            Ok(Some(connection)) => match cluster.take_over().await {
                Ok(()) => {
                    tracing::info!("took the leadership");
                    hold(connection, interval, &mut shutdown).await;
                    cluster.step_down();
                    tracing::warn!("gave up the leadership");
                }
                Err(error) => tracing::warn!(%error, "could not take over; retrying"),
            },
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "leader election: database unreachable"),
        }
        if *shutdown.borrow() {
            return;
        }
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// A connection holding the leader lock, or `None` if another session holds it.
async fn try_lock(url: &str) -> Result<Option<PgConnection>, sqlx::Error> {
    let mut connection = PgConnection::connect(url).await?;
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK_KEY)
        .fetch_one(&mut connection)
        .await?;
    if locked {
        Ok(Some(connection))
    } else {
        connection.close().await?;
        Ok(None)
    }
}

/// Keeps the lock until the connection fails, a check takes longer than an interval, or
/// shutdown; on shutdown the session is closed, which releases the lock at once.
async fn hold(
    mut connection: PgConnection,
    interval: Duration,
    shutdown: &mut watch::Receiver<bool>,
) {
    loop {
        let stopping = tokio::select! {
            () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => true,
            () = tokio::time::sleep(interval) => false,
        };
        if stopping {
            if let Err(error) = connection.close().await {
                tracing::debug!(%error, "closing the leader connection");
            }
            return;
        }
        let check = tokio::time::timeout(interval, connection.ping()).await;
        if !matches!(check, Ok(Ok(()))) {
            return;
        }
    }
}

//! The controlplane's settings: where it listens, which database, lease, long-poll and
//! election times, and how read replicas are scaled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::BootstrapTokens;
use crate::driver::ReadReplicaDriverConfig;
use crate::peer_ca::PeerCa;
use crate::tls::TlsFiles;

/// Where the metadata lives. Its `Debug` never shows a PostgreSQL URL's password.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// One SQLite file; a single controlplane, always the leader.
    Sqlite { path: PathBuf },
    /// A PostgreSQL URL (`postgres://user@host:port/db`); several controlplanes may share
    /// it, one leads.
    Postgres { url: String },
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            Database::Postgres { url } => f
                .debug_struct("Postgres")
                .field("url", &redact_password(url))
                .finish(),
        }
    }
}

/// `url` with the password of its user part, if any, replaced.
pub(crate) fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:<redacted>@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Everything [`crate::Controlplane::start`] needs. Build one with [`Config::new`] and adjust
/// the public fields.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP address of the REST API; port 0 picks a free one (see `Running::local_addr`).
    pub listen: SocketAddr,
    /// The API's certificate and key: HTTPS when set, plain HTTP when `None` (the binary
    /// allows that only with `--insecure-plain-http`, and `floe-broker dev` on loopback).
    pub tls: Option<TlsFiles>,
    pub database: Database,
    /// The tokens of the first administrator, the brokers and the read replicas. When set,
    /// every call but the probes must carry `Authorization: Bearer <token>` of a principal
    /// allowed to make it; `None` runs without authentication (`--insecure-no-auth`).
    pub auth: Option<BootstrapTokens>,
    /// A broker is declared dead this long after its last heartbeat.
    pub lease: Duration,
    /// How often brokers are told to heartbeat; well under `lease`.
    pub heartbeat_interval: Duration,
    /// How often the leader looks for lapsed leases and misplaced partitions.
    pub reconcile_interval: Duration,
    /// The longest an assignments long-poll waits before answering unchanged.
    pub long_poll_max: Duration,
    /// How often a standby tries to take the leadership, and the leader checks it still
    /// holds it (PostgreSQL only).
    pub election_interval: Duration,
    /// How long an election of a replicated partition's leader may run, while a majority
    /// of its replicas is live, before it is started again at a newer epoch.
    pub partition_election_timeout: Duration,
    /// A replicated partition's member on a broker dead this long is replaced by a live
    /// broker (which copies only the leader's local log: older records are in object
    /// storage). Members on draining brokers are replaced at once.
    pub replace_dead_after: Duration,
    /// Replicas per partition when a create request names none.
    pub default_replication_factor: u32,
    /// The most partitions one stream may have.
    pub max_partitions_per_stream: u32,
    /// The most partition replicas one broker may hold: a create that would place more on
    /// any broker is refused (`limit_exceeded`). Repairs after a broker is lost may pass
    /// it: keeping partitions available comes first.
    pub max_partitions_per_broker: u32,
    /// The most streams one principal may have created (and not deleted): its next create is
    /// refused (`limit_exceeded`). Streams created without authentication count for no one.
    pub max_streams_per_principal: u32,
    /// The most live members one consumer group may have: the next join is refused
    /// (`limit_exceeded`). Members live in the leader's memory; this bounds what one
    /// principal's joins can make it hold.
    pub max_group_members: u32,
    /// A dead read replica is forgotten (removed from `GET /v1/read-replicas`) this long
    /// after its lease lapsed.
    pub read_replica_forget_after: Duration,
    /// How the autoscaler starts and stops read replicas; `None` (the default): it does not.
    pub read_replicas: ReadReplicaDriverConfig,
    /// How often the leader's autoscaler decides.
    pub autoscale_interval: Duration,
    /// A draining read replica is stopped once it has no consumers, or this long after it
    /// began draining.
    pub read_replica_drain_timeout: Duration,
    /// The cluster's peer CA, with its key: brokers registered here get certificates naming
    /// them for their peer ports. `None`: brokers bring their own (`--peer-cert`).
    pub peer_ca: Option<Arc<PeerCa>>,
    /// How long a peer certificate the controlplane issues is valid; brokers renew theirs
    /// after two thirds of it.
    pub peer_certificate_lifetime: Duration,
}

impl Config {
    /// The defaults: listen on `127.0.0.1:7300`, 10 s leases, 3 replicas.
    pub fn new(database: Database) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7300)),
            tls: None,
            database,
            auth: None,
            lease: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(3),
            reconcile_interval: Duration::from_secs(1),
            long_poll_max: Duration::from_secs(30),
            election_interval: Duration::from_secs(2),
            partition_election_timeout: Duration::from_secs(3),
            replace_dead_after: Duration::from_secs(300),
            default_replication_factor: 3,
            max_partitions_per_stream: 100_000,
            max_partitions_per_broker: 4000,
            max_streams_per_principal: 1000,
            max_group_members: 1000,
            read_replica_forget_after: Duration::from_secs(600),
            read_replicas: ReadReplicaDriverConfig::None,
            autoscale_interval: Duration::from_secs(2),
            read_replica_drain_timeout: Duration::from_secs(300),
            peer_ca: None,
            peer_certificate_lifetime: Duration::from_secs(24 * 3600),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_password_never_shows() {
        let database = Database::Postgres {
            url: "postgres://floe:s3cr3t@db.example:5432/floe".into(),
        };
        let shown = format!("{database:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("floe:<redacted>@db.example:5432/floe"),
            "{shown}"
        );
        assert_eq!(
            redact_password("postgres://u@h/db"),
            "postgres://u@h/db",
            "nothing to hide"
        );
    }
}

//! `floe-controlplane`: runs one controlplane until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use floe_controlplane::{Config, Controlplane, Database};
use tracing_subscriber::EnvFilter;

/// Floe's controlplane: the REST API, metadata store, placement and leases.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// HTTP address of the REST API.
    #[arg(
        long,
        env = "FLOE_CONTROLPLANE_LISTEN",
        default_value = "127.0.0.1:7300"
    )]
    listen: SocketAddr,
    /// PostgreSQL URL (`postgres://…`); when absent, SQLite in the data directory.
    #[arg(long, env = "FLOE_DATABASE_URL")]
    database_url: Option<String>,
    /// Where the SQLite database lives (`<data-dir>/controlplane.db`).
    #[arg(long, env = "FLOE_DATA_DIR", required_unless_present = "database_url")]
    data_dir: Option<PathBuf>,
    /// Bearer token every mutating call must carry.
    #[arg(long, env = "FLOE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A broker is declared dead this long after its last heartbeat.
    #[arg(long, env = "FLOE_LEASE_MS", default_value_t = 10_000)]
    lease_ms: u64,
    /// How often brokers heartbeat (default: a third of the lease).
    #[arg(long, env = "FLOE_HEARTBEAT_INTERVAL_MS")]
    heartbeat_interval_ms: Option<u64>,
    /// How often the leader checks leases and placement.
    #[arg(long, env = "FLOE_RECONCILE_INTERVAL_MS", default_value_t = 1_000)]
    reconcile_interval_ms: u64,
    /// How often a standby tries to lead (PostgreSQL).
    #[arg(long, env = "FLOE_ELECTION_INTERVAL_MS", default_value_t = 2_000)]
    election_interval_ms: u64,
    /// How long a partition's leader election may run before it starts again.
    #[arg(
        long,
        env = "FLOE_PARTITION_ELECTION_TIMEOUT_MS",
        default_value_t = 3_000
    )]
    partition_election_timeout_ms: u64,
    /// The longest an assignments long-poll waits.
    #[arg(long, env = "FLOE_LONG_POLL_MAX_MS", default_value_t = 30_000)]
    long_poll_max_ms: u64,
    /// Replicas per partition when a create request names none.
    #[arg(long, env = "FLOE_DEFAULT_REPLICATION_FACTOR", default_value_t = 3)]
    default_replication_factor: u32,
}

impl Args {
    fn config(self) -> Config {
        let database = match (self.database_url, self.data_dir) {
            (Some(url), _) => Database::Postgres { url },
            (None, Some(dir)) => Database::Sqlite {
                path: dir.join("controlplane.db"),
            },
            // clap requires one of the two.
            (None, None) => Database::Sqlite {
                path: PathBuf::from("controlplane.db"),
            },
        };
        let mut config = Config::new(database);
        config.listen = self.listen;
        config.admin_token = self.admin_token;
        config.lease = Duration::from_millis(self.lease_ms);
        config.heartbeat_interval =
            Duration::from_millis(self.heartbeat_interval_ms.unwrap_or(self.lease_ms / 3));
        config.reconcile_interval = Duration::from_millis(self.reconcile_interval_ms);
        config.election_interval = Duration::from_millis(self.election_interval_ms);
        config.long_poll_max = Duration::from_millis(self.long_poll_max_ms);
        config.partition_election_timeout =
            Duration::from_millis(self.partition_election_timeout_ms);
        config.default_replication_factor = self.default_replication_factor;
        config
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("FLOE_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Args::parse().config();
    let running = Controlplane::start(config)
        .await
        .context("starting the controlplane")?;
    // Scripts and tests read the bound address from this line.
    writeln!(
        std::io::stdout().lock(),
        "floe-controlplane listening on http://{}",
        running.local_addr()
    )?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

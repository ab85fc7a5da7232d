//! `floe-broker dev`: the embedded default in one process — a controlplane on SQLite in the
//! data directory and a broker it manages. It creates its data directory, a local CA and
//! certificate, and the client profile that lets `floe` on the same machine connect with no
//! flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use floe_wire::ClientProfile;

use crate::catalog::write_atomically;
use crate::run::Settings;
use crate::tls::DevCertificates;

/// Where `dev` keeps its data when not told otherwise: `$FLOE_HOME/dev`, else
/// `$XDG_DATA_HOME/floe/dev`, else `~/.local/share/floe/dev`.
pub fn default_data_dir() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("FLOE_HOME") {
        return Ok(PathBuf::from(home).join("dev"));
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME") {
        return Ok(PathBuf::from(data).join("floe").join("dev"));
    }
    let home = std::env::var_os("HOME").context("HOME is not set; pass --data-dir")?;
    Ok(PathBuf::from(home).join(".local/share/floe/dev"))
}

/// Prepares the data directory and certificates; returns the broker settings.
pub fn prepare(
    data_dir: &Path,
    listen: SocketAddr,
    metrics_listen: SocketAddr,
) -> Result<Settings> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let certificates = DevCertificates::ensure(&data_dir.join("tls"))?;
    let mut settings = Settings::new(data_dir.to_path_buf(), listen, certificates.server.clone());
    settings.metrics_listen = Some(metrics_listen);
    Ok(settings)
}

/// Starts the embedded controlplane: SQLite in `<data-dir>/controlplane.db`, one replica
/// per partition (a single broker), its REST API on `listen`.
pub async fn start_controlplane(
    data_dir: &Path,
    listen: SocketAddr,
) -> Result<floe_controlplane::Running> {
    let mut config = floe_controlplane::Config::new(floe_controlplane::Database::Sqlite {
        path: data_dir.join("controlplane.db"),
    });
    config.listen = listen;
    config.default_replication_factor = 1;
    let mut running = floe_controlplane::Controlplane::start(config)
        .await
        .context("starting the embedded controlplane")?;
    running.wait_for_role(floe_wire::admin::Role::Leader).await;
    Ok(running)
}

/// The addresses `floe` needs, written to its profile.
#[derive(Debug, Clone)]
pub struct ProfileTargets {
    pub quic: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub controlplane: Option<SocketAddr>,
}

/// Writes the client profile pointing at the running broker and controlplane, so `floe`
/// needs no flags.
pub fn write_profile(path: &Path, targets: &ProfileTargets, ca: &Path) -> Result<()> {
    let profile = ClientProfile {
        endpoint: targets.quic.to_string(),
        server_name: "localhost".into(),
        ca_cert: ca.to_path_buf(),
        metrics: targets.metrics.map(|m| m.to_string()),
        controlplane: targets.controlplane.map(|c| format!("http://{c}")),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let bytes = serde_json::to_vec_pretty(&profile)?;
    write_atomically(path, &bytes)
        .with_context(|| format!("writing the client profile {}", path.display()))
}

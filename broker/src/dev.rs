//! `floe-broker dev`: the embedded default in one process — a controlplane on SQLite in the
//! data directory, a broker it manages, object storage in a local directory, and read
//! replicas the controlplane's autoscaler runs as child processes (`floe-broker read-replica`,
//! through the local driver). It creates its data directory, a local CA and certificate, and
//! the client profile that lets `floe` on the same machine connect with no flags.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use floe_wire::ClientProfile;
use floe_wire::auth::Secret;
use floe_wire::profile::{DEV_PROFILE, ProfileDir, ProfileRef, check_name};

use crate::run::Settings;
use crate::state_file::{StateFileError, write_atomically, write_secret_atomically};
use crate::tls::DevCertificates;

/// Why `dev` could not set up.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("HOME is not set; pass --data-dir")]
    NoHome,
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Tiering(#[from] crate::tiering::TieringError),
    #[error("--read-replicas ({min}) must not exceed --max-read-replicas ({max})")]
    ReadReplicaBounds { min: u32, max: u32 },
    #[error("cannot find this executable")]
    CurrentExe(#[source] std::io::Error),
    #[error("cannot start the embedded controlplane")]
    Controlplane(#[from] floe_controlplane::StartError),
    #[error("cannot {what} the scaling policy")]
    ScalingPolicy {
        what: &'static str,
        #[source]
        source: floe_client::rest::RestError,
    },
    #[error("cannot encode the client profile")]
    EncodeProfile(#[source] serde_json::Error),
    #[error("cannot write the client profile")]
    WriteProfile(#[from] StateFileError),
    #[error("cannot place the client profile: set HOME or XDG_CONFIG_HOME, or pass --profile PATH")]
    NoProfileDir,
    #[error("--profile: {0}")]
    ProfileName(String),
    #[error("no random bytes for a token: {0}")]
    Random(String),
}

type Result<T, E = DevError> = std::result::Result<T, E>;

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DevError + use<> {
    let path = path.to_path_buf();
    move |source| DevError::Io { op, path, source }
}

/// Where `dev` keeps its data when not told otherwise: `$FLOE_HOME/dev`, else
/// `$XDG_DATA_HOME/floe/dev`, else `~/.local/share/floe/dev`.
pub fn default_data_dir() -> Result<PathBuf> {
    // An empty variable counts as unset (the XDG base-directory specification's rule).
    let set = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(home) = set("FLOE_HOME") {
        return Ok(PathBuf::from(home).join("dev"));
    }
    if let Some(data) = set("XDG_DATA_HOME") {
        return Ok(PathBuf::from(data).join("floe").join("dev"));
    }
    let home = set("HOME").ok_or(DevError::NoHome)?;
    Ok(PathBuf::from(home).join(".local/share/floe/dev"))
}

/// Prepares the data directory and certificates; returns the broker settings.
pub fn prepare(
    data_dir: &Path,
    listen: SocketAddr,
    metrics_listen: SocketAddr,
) -> Result<Settings> {
    std::fs::create_dir_all(data_dir).map_err(io("create", data_dir))?;
    let certificates = DevCertificates::ensure(&data_dir.join("tls"))?;
    let mut settings = Settings::new(data_dir.to_path_buf(), listen, certificates.server.clone());
    settings.metrics_listen = Some(metrics_listen);
    Ok(settings)
}

/// How many read replicas `dev` keeps, and how they are started.
#[derive(Debug, Clone)]
pub struct DevReplicas {
    /// The autoscaler keeps at least this many.
    pub min: u32,
    /// And at most this many; 0 runs no autoscaler at all.
    pub max: u32,
    /// `floe-broker read-replica` and its arguments; the controlplane adds `--replica-id` and
    /// `FLOE_CONTROLPLANE`.
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl DevReplicas {
    /// Replicas of this executable (`replica` subcommand) that read the broker's object
    /// storage and serve with its certificate, each caching under `<data-dir>/replicas/<id>`.
    pub fn new(settings: &Settings, ca: &Path, min: u32, max: u32) -> Result<DevReplicas> {
        if min > max {
            return Err(DevError::ReadReplicaBounds { min, max });
        }
        let program = std::env::current_exe().map_err(DevError::CurrentExe)?;
        let path = |p: &Path| p.display().to_string();
        let tier = &settings.tier;
        let url = match &settings.object_store {
            Some(url) => url.clone(),
            None => crate::tiering::TierSettings::local_url(&settings.data_dir)?,
        };
        let mut args = vec![
            "read-replica".to_owned(),
            "--data-dir".to_owned(),
            path(&settings.data_dir.join("replicas")),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--cert".to_owned(),
            path(&settings.certificates.cert),
            "--key".to_owned(),
            path(&settings.certificates.key),
            "--broker-ca".to_owned(),
            path(ca),
            "--object-store".to_owned(),
            url,
            "--tier-cache-memory".to_owned(),
            tier.reader.memory_cache_bytes.to_string(),
        ];
        if let Some(bytes) = settings.tier_cache_disk_bytes {
            args.extend(["--tier-cache-disk".to_owned(), bytes.to_string()]);
        }
        if let Some(endpoint) = &tier.s3.endpoint {
            args.extend(["--s3-endpoint".to_owned(), endpoint.clone()]);
        }
        if let Some(region) = &tier.s3.region {
            args.extend(["--s3-region".to_owned(), region.clone()]);
        }
        if tier.s3.allow_http {
            args.push("--s3-allow-http".to_owned());
        }
        Ok(DevReplicas {
            min,
            max,
            program,
            args,
        })
    }
}

/// Starts the embedded controlplane: SQLite in `<data-dir>/controlplane.db`, one replica
/// per partition (a single broker), its REST API on `listen`, and read replicas between
/// `replicas.min` and `replicas.max` as child processes.
/// `dev`'s three tokens: its administrator's (written into the client profile), its
/// broker's and its read replicas'. Kept under `tokens/` in the data directory, readable by
/// their owner only, so that they survive restarts (and profiles written earlier keep
/// working).
#[derive(Clone)]
pub struct DevTokens {
    pub admin: Secret,
    pub broker: Secret,
    pub read_replica: Secret,
}

impl std::fmt::Debug for DevTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DevTokens(<redacted>)")
    }
}

impl DevTokens {
    /// Reads the tokens under `data_dir`, making those missing.
    pub fn ensure(data_dir: &Path) -> Result<DevTokens> {
        let dir = data_dir.join("tokens");
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let token = |name: &str| -> Result<Secret> {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) if !text.trim().is_empty() => return Ok(Secret::new(text.trim())),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("read", &path)(e)),
            }
            let mut random = [0u8; 32];
            getrandom::fill(&mut random).map_err(|e| DevError::Random(e.to_string()))?;
            let text: String = random.iter().map(|b| format!("{b:02x}")).collect();
            crate::state_file::write_secret_atomically(&path, text.as_bytes())?;
            Ok(Secret::new(text))
        };
        Ok(DevTokens {
            admin: token("admin")?,
            broker: token("broker")?,
            read_replica: token("read-replica")?,
        })
    }
}

pub async fn start_controlplane(
    data_dir: &Path,
    listen: SocketAddr,
    replicas: &DevReplicas,
    tokens: &DevTokens,
) -> Result<floe_controlplane::Running> {
    let mut config = floe_controlplane::Config::new(floe_controlplane::Database::Sqlite {
        path: data_dir.join("controlplane.db"),
    });
    config.listen = listen;
    config.auth = Some(floe_controlplane::BootstrapTokens {
        admin: tokens.admin.expose().to_owned(),
        broker: Some(tokens.broker.expose().to_owned()),
        read_replica: Some(tokens.read_replica.expose().to_owned()),
    });
    config.default_replication_factor = 1;
    // A lapsed dev replica is noticed within seconds, and the autoscaler decides each second.
    config.lease = std::time::Duration::from_secs(5);
    config.autoscale_interval = std::time::Duration::from_secs(1);
    config.read_replica_forget_after = std::time::Duration::from_secs(60);
    // The children of an earlier run died with it; their caches are of no use.
    let caches = data_dir.join("replicas");
    if caches.exists() {
        std::fs::remove_dir_all(&caches).map_err(io("remove", &caches))?;
    }
    if replicas.max > 0 {
        config.read_replicas = floe_controlplane::ReadReplicaDriverConfig::Local {
            program: replicas.program.clone(),
            args: replicas.args.clone(),
            // The children find their token in the environment, not on their command line.
            env: vec![(
                "FLOE_READ_REPLICA_TOKEN".to_owned(),
                tokens.read_replica.expose().to_owned(),
            )],
        };
    }
    let mut running = floe_controlplane::Controlplane::start(config).await?;
    running.wait_for_role(floe_wire::admin::Role::Leader).await;
    let policy_error = |what| move |source| DevError::ScalingPolicy { what, source };
    let rest = floe_client::rest::Controlplane::new(
        &format!("http://{}", running.local_addr()),
        Some(tokens.admin.expose().to_owned()),
    )
    .map_err(policy_error("reach"))?;
    let mut policy = rest.scaling_policy().await.map_err(policy_error("read"))?;
    policy.min_replicas = replicas.min;
    policy.max_replicas = replicas.max;
    rest.set_scaling_policy(&policy)
        .await
        .map_err(policy_error("set"))?;
    Ok(running)
}

/// The addresses `floe` needs, written to its profile.
#[derive(Debug, Clone)]
pub struct ProfileTargets {
    pub quic: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub controlplane: Option<SocketAddr>,
}

/// The client profile `dev` wrote.
#[derive(Debug, Clone)]
pub struct WrittenProfile {
    pub path: PathBuf,
    /// Its name, when it is a named profile.
    pub name: Option<String>,
    /// Whether `floe` uses it with no `--profile`: it was made current (no profile was), or
    /// it already was.
    pub current: bool,
}

/// Writes the client profile pointing at the running broker and controlplane, so `floe`
/// needs no flags: the one `explicit` names (a name or a path), else `$FLOE_PROFILE`, else
/// the profile named `dev`. A named profile becomes the current one when no profile is.
pub fn write_profile(
    explicit: Option<&OsStr>,
    targets: &ProfileTargets,
    ca: &Path,
    token: &Secret,
) -> Result<WrittenProfile> {
    let dir = ProfileDir::from_env(|k| std::env::var_os(k));
    let asked = explicit
        .map(OsStr::to_os_string)
        .or_else(|| std::env::var_os("FLOE_PROFILE"));
    let reference = asked.map_or(ProfileRef::Named(DEV_PROFILE.into()), |value| {
        ProfileRef::parse(&value)
    });
    let (path, name) = match reference {
        ProfileRef::Path(path) => (path, None),
        ProfileRef::Named(name) => {
            check_name(&name).map_err(DevError::ProfileName)?;
            let dir = dir.as_ref().ok_or(DevError::NoProfileDir)?;
            (dir.named(&name), Some(name))
        }
    };
    let profile = ClientProfile {
        endpoint: targets.quic.to_string(),
        server_name: "localhost".into(),
        ca_cert: ca.to_path_buf(),
        metrics: targets.metrics.map(|m| m.to_string()),
        controlplane: targets.controlplane.map(|c| format!("http://{c}")),
        token: Some(token.clone()),
        client_cert: None,
        client_key: None,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("create", parent))?;
    }
    let bytes = serde_json::to_vec_pretty(&profile).map_err(DevError::EncodeProfile)?;
    // It holds the administrator's token.
    write_secret_atomically(&path, &bytes)?;
    let current = match (&name, &dir) {
        (Some(name), Some(dir)) => make_current_unless_chosen(dir, name)?,
        _ => false,
    };
    Ok(WrittenProfile {
        path,
        name,
        current,
    })
}

/// Makes `name` the current profile when none is (or the current one's file is gone);
/// whether `name` is now current. An operator's choice of another profile stands.
fn make_current_unless_chosen(dir: &ProfileDir, name: &str) -> Result<bool> {
    // An unreadable or invalid choice is no choice: it is replaced.
    match floe_client::current_profile(dir) {
        Ok(Some(chosen)) if chosen == name => Ok(true),
        Ok(Some(chosen)) if dir.named(&chosen).exists() => Ok(false),
        _ => {
            write_atomically(&dir.current_file(), format!("{name}\n").as_bytes())?;
            Ok(true)
        }
    }
}

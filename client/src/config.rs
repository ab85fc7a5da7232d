//! Where a client connects, whom it trusts, and how long it waits: [`ClientConfig`], built
//! from the client profile that `floe-broker dev` writes or from explicit values.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use floe_wire::ClientProfile;
use floe_wire::auth::Secret;
use floe_wire::profile::{DEV_PROFILE, ProfileDir, ProfileRef, check_name};

use crate::error::ConfigError;

/// How to reach a broker.
///
/// ```no_run
/// use floe_client::ClientConfig;
///
/// // The current profile: $FLOE_PROFILE, else the one `floe profile use` chose, else the
/// // one `floe-broker dev` wrote.
/// let config = ClientConfig::from_default_profile()?;
/// assert_eq!(config.server_name, "localhost");
/// # Ok::<(), floe_client::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `host:port` of the broker's QUIC endpoint.
    pub endpoint: String,
    /// The name the broker's certificate must carry.
    pub server_name: String,
    /// PEM file of the CA that signed the broker's certificate; the only CA trusted.
    pub ca_cert: PathBuf,
    /// Longest wait for the QUIC handshake and the `Hello` exchange together.
    pub connect_timeout: Duration,
    /// Longest wait for the answer to one request (a long-polling fetch adds its own wait).
    pub request_timeout: Duration,
    /// A connection that hears nothing from the broker this long is dead, and the next
    /// request reconnects. Keep-alives go out four times per period, so an idle but healthy
    /// connection never reaches it; a crashed broker is noticed within it.
    pub idle_timeout: Duration,
    /// Connection attempts a request makes when it finds the connection lost, before it
    /// fails with [`Error::Connect`](crate::Error::Connect).
    pub reconnect_attempts: u32,
    /// The longest wait before the second attempt; it doubles per attempt up to
    /// [`ClientConfig::reconnect_backoff_max`]. Each wait is random below it
    /// ([`floe_wire::Backoff`]), so clients cut off together do not return together.
    pub reconnect_backoff: Duration,
    /// Longest backoff between connection attempts.
    pub reconnect_backoff_max: Duration,
    /// Sent in `Hello`, for the broker's logs.
    pub client_name: String,
    /// The controlplane's REST URL. With it, consumers read from the cluster's read
    /// replicas while any are live (see [`ConsumerConfig`](crate::ConsumerConfig)); without
    /// it, from the partitions' leaders.
    pub controlplane: Option<String>,
    /// The token sent in `Hello` (and to the controlplane): who this client is. `None`
    /// connects anonymously, which only a server run with `--insecure-no-auth` accepts,
    /// unless a client certificate says who it is.
    pub token: Option<Secret>,
    /// A certificate to present to brokers and read replicas (mutual TLS): one signed by
    /// the CA they were given as `--client-ca` signs in as the user principal its subject's
    /// common name names. A token, when also given, is what counts.
    pub client_certificate: Option<ClientCertificate>,
}

/// A certificate chain, leaf first, and its private key.
pub(crate) type CertificateAndKey = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

/// A client's certificate chain and private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClientCertificate {
    pub(crate) fn load(&self) -> Result<CertificateAndKey, ConfigError> {
        use rustls::pki_types::pem::PemObject;
        let invalid = |path: &Path, e: rustls::pki_types::pem::Error| ConfigError::Invalid {
            field: "client_certificate",
            reason: format!("{}: {e}", path.display()),
        };
        let chain = rustls::pki_types::CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| invalid(&self.cert, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(&self.cert, e))?;
        if chain.is_empty() {
            return Err(ConfigError::NoCertificate {
                path: self.cert.clone(),
            });
        }
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| invalid(&self.key, e))?;
        Ok((chain, key))
    }
}

impl ClientConfig {
    /// A configuration with default timeouts.
    pub fn new(
        endpoint: impl Into<String>,
        server_name: impl Into<String>,
        ca_cert: impl Into<PathBuf>,
    ) -> ClientConfig {
        ClientConfig {
            endpoint: endpoint.into(),
            server_name: server_name.into(),
            ca_cert: ca_cert.into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(10),
            reconnect_attempts: 6,
            reconnect_backoff: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(2),
            client_name: format!("floe-client/{}", env!("CARGO_PKG_VERSION")),
            controlplane: None,
            token: None,
            client_certificate: None,
        }
    }

    /// The configuration a client profile describes, with default timeouts.
    pub fn from_profile(profile: &ClientProfile) -> ClientConfig {
        let mut config = ClientConfig::new(
            profile.endpoint.clone(),
            profile.server_name.clone(),
            profile.ca_cert.clone(),
        );
        config.controlplane = profile.controlplane.clone();
        config.token = profile.token.clone();
        config.client_certificate = match (&profile.client_cert, &profile.client_key) {
            (Some(cert), Some(key)) => Some(ClientCertificate {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        config
    }

    /// Reads the client profile at `path`.
    pub fn load_profile(path: &Path) -> Result<ClientConfig, ConfigError> {
        read_profile(path).map(|profile| ClientConfig::from_profile(&profile))
    }

    /// Reads the current client profile (see [`resolve_profile`]).
    pub fn from_default_profile() -> Result<ClientConfig, ConfigError> {
        let profile = resolve_profile(None)?.ok_or(ConfigError::NoProfilePath)?;
        ClientConfig::load_profile(&profile.path)
    }
}

/// A client profile's file, and its name when it is a named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileLocation {
    pub path: PathBuf,
    pub name: Option<String>,
}

/// The profile to use: `explicit` (a name or a path, as `--profile` takes it), else
/// `$FLOE_PROFILE`, else the current profile (`floe profile use`), else the unnamed
/// `profile.json` of earlier versions, else the `dev` profile. `None` when no file of those
/// exists and none was named; a profile named explicitly is returned even when absent, so
/// that reading it says what is missing.
pub fn resolve_profile(explicit: Option<&OsStr>) -> Result<Option<ProfileLocation>, ConfigError> {
    let dir = ProfileDir::from_env(|name| std::env::var_os(name));
    let asked = explicit
        .map(OsStr::to_os_string)
        .or_else(|| std::env::var_os("FLOE_PROFILE"));
    if let Some(value) = asked {
        return Ok(Some(locate(dir.as_ref(), ProfileRef::parse(&value))?));
    }
    let Some(dir) = dir else {
        return Ok(None);
    };
    if let Some(name) = current_profile(&dir)? {
        return Ok(Some(locate(Some(&dir), ProfileRef::Named(name))?));
    }
    for (path, name) in [
        (dir.unnamed(), None),
        (dir.named(DEV_PROFILE), Some(DEV_PROFILE.to_string())),
    ] {
        if path.exists() {
            return Ok(Some(ProfileLocation { path, name }));
        }
    }
    Ok(None)
}

/// The name in `current-profile`, when the file exists.
pub fn current_profile(dir: &ProfileDir) -> Result<Option<String>, ConfigError> {
    let path = dir.current_file();
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let name = text.trim().to_string();
            check_name(&name).map_err(|reason| ConfigError::Invalid {
                field: "current-profile",
                reason: format!("{}: {reason}", path.display()),
            })?;
            Ok(Some(name))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path,
            source: Arc::new(source),
        }),
    }
}

fn locate(dir: Option<&ProfileDir>, reference: ProfileRef) -> Result<ProfileLocation, ConfigError> {
    match reference {
        ProfileRef::Path(path) => Ok(ProfileLocation { path, name: None }),
        ProfileRef::Named(name) => {
            check_name(&name).map_err(|reason| ConfigError::Invalid {
                field: "profile",
                reason,
            })?;
            let dir = dir.ok_or(ConfigError::NoProfilePath)?;
            Ok(ProfileLocation {
                path: dir.named(&name),
                name: Some(name),
            })
        }
    }
}

/// The current client profile's file (see [`resolve_profile`]), when there is one.
pub fn default_profile_path() -> Option<PathBuf> {
    resolve_profile(None).ok().flatten().map(|p| p.path)
}

/// Reads and parses a client profile.
pub fn read_profile(path: &Path) -> Result<ClientProfile, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source: Arc::new(source),
    })?;
    serde_json::from_slice(&bytes).map_err(|source| ConfigError::Profile {
        path: path.to_path_buf(),
        source: Arc::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_gives_endpoint_name_and_ca() {
        let profile = ClientProfile {
            endpoint: "127.0.0.1:7100".into(),
            server_name: "localhost".into(),
            ca_cert: "/tmp/ca.pem".into(),
            metrics: None,
            controlplane: None,
            token: Some(Secret::new("floe_t")),
            client_cert: None,
            client_key: None,
        };
        let config = ClientConfig::from_profile(&profile);
        assert_eq!(config.token, Some(Secret::new("floe_t")));
        assert!(!format!("{config:?}").contains("floe_t"));
        assert_eq!(config.endpoint, "127.0.0.1:7100");
        assert_eq!(config.server_name, "localhost");
        assert_eq!(config.ca_cert, PathBuf::from("/tmp/ca.pem"));
        assert!(config.request_timeout > Duration::ZERO);
    }

    #[test]
    fn a_profile_that_is_not_json_is_a_typed_error() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("profile.json");
        std::fs::write(&path, b"{ not json")?;
        let error = ClientConfig::load_profile(&path).err();
        assert!(
            matches!(error, Some(ConfigError::Profile { ref path, .. }) if path.ends_with("profile.json")),
            "{error:?}"
        );
        let missing = ClientConfig::load_profile(&dir.path().join("absent.json")).err();
        assert!(
            matches!(missing, Some(ConfigError::Read { .. })),
            "{missing:?}"
        );
        Ok(())
    }
}

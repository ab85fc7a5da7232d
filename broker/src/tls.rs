//! TLS for the QUIC server: loading operator-provided certificates, and the local CA and
//! certificate that `floe-broker dev` generates so that `floe` works with no configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::peer_identity::{MismatchCounter, PeerCredentials, PeerServerVerifier};

/// Why certificates could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read PEM from {path}")]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("a certificate in {path} is not usable")]
    BadCertificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error(
        "{path} is missing: the CA beside it cannot sign (`floe-broker dev` keeps no CA key); \
         use another directory for `floe-broker certs`"
    )]
    NoCaKey { path: PathBuf },
    #[error("the peer certificate {path} cannot be a broker's")]
    PeerCredentials {
        path: PathBuf,
        #[source]
        source: crate::peer_identity::CredentialsError,
    },
    #[error("generating a development certificate")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate and key do not match, or TLS cannot be set up")]
    Rustls(#[from] rustls::Error),
    #[error("the client CA cannot verify certificates")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("TLS 1.3 has no QUIC cipher suite here")]
    CipherSuite(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    #[error("idle timeout out of range")]
    IdleTimeout(#[from] quinn::VarIntBoundsExceeded),
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + use<> {
    let path = path.to_path_buf();
    move |source| TlsError::Io { op, path, source }
}

fn pem(path: &Path) -> impl FnOnce(rustls::pki_types::pem::Error) -> TlsError + '_ {
    move |source| TlsError::Pem {
        path: path.to_path_buf(),
        source,
    }
}

type Result<T, E = TlsError> = std::result::Result<T, E>;

/// The ALPN protocol id of Floe's client protocol, version 1.
pub const ALPN: &[u8] = floe_wire::frame::ALPN;

/// Paths of a certificate chain and its private key (PEM).
#[derive(Debug, Clone)]
pub struct CertificatePaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files of a development CA and the broker certificate it signed.
#[derive(Debug, Clone)]
pub struct DevCertificates {
    /// The CA certificate clients must trust.
    pub ca: PathBuf,
    pub server: CertificatePaths,
}

impl DevCertificates {
    /// Reuses the certificates in `dir` or, when any file is missing, generates a new CA and
    /// a broker certificate for `localhost` and `127.0.0.1`/`::1`. The CA's private key is
    /// never written: a new broker certificate means a new CA.
    pub fn ensure(dir: &Path) -> Result<DevCertificates> {
        let certs = DevCertificates {
            ca: dir.join("ca.pem"),
            server: CertificatePaths {
                cert: dir.join("broker.pem"),
                key: dir.join("broker.key"),
            },
        };
        if certs.ca.exists() && certs.server.cert.exists() && certs.server.key.exists() {
            return Ok(certs);
        }
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let (ca_pem, cert_pem, key_pem) = generate_dev_certificates()?;
        write_private(&certs.server.key, key_pem.as_bytes())?;
        std::fs::write(&certs.server.cert, cert_pem).map_err(io("write", &certs.server.cert))?;
        std::fs::write(&certs.ca, ca_pem).map_err(io("write", &certs.ca))?;
        Ok(certs)
    }
}

fn generate_dev_certificates() -> Result<(String, String, String)> {
    let (ca_pem, ca_key) = generate_ca()?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
    let (cert_pem, key_pem) = sign_localhost(&issuer, "floe-broker dev", None)?;
    Ok((ca_pem, cert_pem, key_pem))
}

/// A new CA: its certificate (PEM) and key.
fn generate_ca() -> Result<(String, rcgen::KeyPair)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Floe dev CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    Ok((ca_cert.pem(), ca_key))
}

/// A certificate for `localhost` and `127.0.0.1`/`::1` signed by `issuer`, naming `broker`
/// too when given: its PEM and its key's.
fn sign_localhost(
    issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
    common_name: &str,
    broker: Option<floe_wire::BrokerId>,
) -> Result<(String, String)> {
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};
    let key = KeyPair::generate()?;
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(broker) = broker {
        params
            .subject_alt_names
            .push(SanType::URI(broker.certificate_uri().try_into()?));
    }
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The CA of a cluster on one machine, as `floe-broker certs` writes it: the development
/// files ([`DevCertificates`]) with the CA's key kept beside them (`ca.key`), so that it can
/// sign each broker's peer certificate (`broker-<id>.pem`), or be handed to a controlplane
/// that issues them (`floe-controlplane --peer-ca-key-file`).
#[derive(Debug, Clone)]
pub struct ClusterCertificates {
    pub files: DevCertificates,
    pub ca_key: PathBuf,
    dir: PathBuf,
}

impl ClusterCertificates {
    /// Reuses the CA in `dir`, or generates a new one and the client-port certificate
    /// (`broker.pem`) when no file is there. A CA without its key (written by `dev`) cannot
    /// sign: that is an error, not a new CA under old certificates.
    pub fn ensure(dir: &Path) -> Result<ClusterCertificates> {
        let certs = ClusterCertificates {
            files: DevCertificates {
                ca: dir.join("ca.pem"),
                server: CertificatePaths {
                    cert: dir.join("broker.pem"),
                    key: dir.join("broker.key"),
                },
            },
            ca_key: dir.join("ca.key"),
            dir: dir.to_path_buf(),
        };
        if certs.files.ca.exists() {
            if !certs.ca_key.exists() {
                return Err(TlsError::NoCaKey {
                    path: certs.ca_key.clone(),
                });
            }
            if !certs.files.server.cert.exists() || !certs.files.server.key.exists() {
                let issuer = certs.issuer()?;
                let (cert_pem, key_pem) = sign_localhost(&issuer, "floe-broker", None)?;
                certs.write_pair(&certs.files.server, &cert_pem, &key_pem)?;
            }
            return Ok(certs);
        }
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let (ca_pem, ca_key) = generate_ca()?;
        write_private(&certs.ca_key, ca_key.serialize_pem().as_bytes())?;
        let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
        let (cert_pem, key_pem) = sign_localhost(&issuer, "floe-broker", None)?;
        certs.write_pair(&certs.files.server, &cert_pem, &key_pem)?;
        // The CA last: its presence says the directory is complete.
        std::fs::write(&certs.files.ca, ca_pem).map_err(io("write", &certs.files.ca))?;
        Ok(certs)
    }

    /// The peer certificate naming broker `id` (`broker-<id>.pem`, `broker-<id>.key`, also
    /// valid for localhost), signed by this CA; made when missing.
    pub fn peer_certificate(&self, id: floe_wire::BrokerId) -> Result<CertificatePaths> {
        let paths = CertificatePaths {
            cert: self.dir.join(format!("broker-{}.pem", id.get())),
            key: self.dir.join(format!("broker-{}.key", id.get())),
        };
        if paths.cert.exists() && paths.key.exists() {
            return Ok(paths);
        }
        let issuer = self.issuer()?;
        let (cert_pem, key_pem) =
            sign_localhost(&issuer, &format!("floe-broker-{}", id.get()), Some(id))?;
        self.write_pair(&paths, &cert_pem, &key_pem)?;
        Ok(paths)
    }

    fn issuer(&self) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>> {
        let read = |path: &Path| std::fs::read_to_string(path).map_err(io("read", path));
        let key = rcgen::KeyPair::from_pem(&read(&self.ca_key)?)?;
        Ok(rcgen::Issuer::from_ca_cert_pem(
            &read(&self.files.ca)?,
            key,
        )?)
    }

    fn write_pair(&self, paths: &CertificatePaths, cert_pem: &str, key_pem: &str) -> Result<()> {
        write_private(&paths.key, key_pem.as_bytes())?;
        std::fs::write(&paths.cert, cert_pem).map_err(io("write", &paths.cert))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io("create", path))?;
    file.write_all(bytes).map_err(io("write", path))?;
    Ok(())
}

/// Loads a PEM certificate chain and private key.
pub fn load(
    paths: &CertificatePaths,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = CertificateDer::pem_file_iter(&paths.cert)
        .map_err(pem(&paths.cert))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem(&paths.cert))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: paths.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&paths.key).map_err(pem(&paths.key))?;
    Ok((chain, key))
}

/// QUIC transport settings shared by the broker's endpoint: bounded streams per connection
/// and flow-control windows sized for high-throughput publishing.
pub fn transport_config(
    max_concurrent_streams: u32,
    idle_timeout: Duration,
) -> Result<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(max_concurrent_streams.into())
        .max_concurrent_uni_streams(0u32.into())
        .stream_receive_window((8u32 * 1024 * 1024).into())
        .receive_window(CONNECTION_RECEIVE_WINDOW.into())
        .send_window(16 * 1024 * 1024)
        .keep_alive_interval(Some(idle_timeout / 3))
        .max_idle_timeout(Some(idle_timeout.try_into()?));
    floe_client::datagrams::discover_path_mtu(&mut transport);
    Ok(transport)
}

/// The QUIC receive window of a client connection once its `Hello` is accepted: what a
/// client may send ahead of the broker reading it, on all its streams together.
pub const CONNECTION_RECEIVE_WINDOW: u32 = 64 * 1024 * 1024;

/// The QUIC receive window of a client connection until its `Hello` is accepted: an
/// anonymous client makes the broker buffer at most this much.
pub const PRE_HELLO_RECEIVE_WINDOW: u32 = 64 * 1024;

/// The QUIC server configuration: TLS 1.3 with the `floe/1` ALPN. With `client_ca`, a
/// client may present a certificate signed by it (mutual TLS): its subject's common name is
/// the principal it signs in as ([`client_certificate_name`]); a client without one still
/// connects and proves itself with a token.
pub fn server_config(
    paths: &CertificatePaths,
    client_ca: Option<&Path>,
    transport: quinn::TransportConfig,
) -> Result<quinn::ServerConfig> {
    let (chain, key) = load(paths)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(ca_roots(ca)?),
                provider,
            )
            .allow_unauthenticated()
            .build()?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut tls = builder.with_single_cert(chain, key)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// The principal a client's certificate names: the common name of the subject of the
/// certificate the handshake verified against `--client-ca`; `None` when the client showed
/// none.
pub(crate) fn client_certificate_name(connection: &quinn::Connection) -> Option<String> {
    let chain = connection
        .peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()?;
    common_name(chain.first()?)
}

/// The first common name of a DER certificate's subject, when it has one in UTF-8.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = certificate
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_owned();
    Some(name)
}

/// The ALPN protocol id of the peer port (broker to broker), version 1.
pub const PEER_ALPN: &[u8] = b"floe-peer/1";

/// A broker's peer-port TLS: the certificate naming it (`floe:broker:<id>`) and the CA that
/// signs every broker's.
#[derive(Debug, Clone)]
pub struct PeerTls {
    /// A certificate of this broker's own (`floe-broker certs --broker-id`, or the
    /// deployment's); `None`: the controlplane issues one after registration.
    pub certificate: Option<CertificatePaths>,
    pub ca: PathBuf,
}

fn ca_roots(ca: &Path) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(pem(ca))? {
        roots
            .add(cert.map_err(pem(ca))?)
            .map_err(|source| TlsError::BadCertificate {
                path: ca.to_path_buf(),
                source,
            })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate {
            path: ca.to_path_buf(),
        });
    }
    Ok(roots)
}

/// The peer port's transport: one unidirectional stream per sending peer, generous windows
/// (appends carry up to a megabyte each, several in flight), no bidirectional streams.
///
/// A peer that vanished (killed, its port gone) is noticed within the idle timeout, 3 s, so
/// that messages to it go to its new address: writes into a dead QUIC connection succeed
/// until flow control fills up.
fn peer_transport() -> Result<quinn::TransportConfig> {
    let idle = Duration::from_secs(3);
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(0u32.into())
        .max_concurrent_uni_streams(64u32.into())
        .stream_receive_window((16u32 * 1024 * 1024).into())
        .receive_window(CONNECTION_RECEIVE_WINDOW.into())
        .send_window(32 * 1024 * 1024)
        .keep_alive_interval(Some(idle / 3))
        .max_idle_timeout(Some(idle.try_into()?));
    floe_client::datagrams::discover_path_mtu(&mut transport);
    Ok(transport)
}

/// Credentials for the peer port from a certificate naming a broker and its key.
pub fn peer_credentials(paths: &CertificatePaths) -> Result<Arc<PeerCredentials>> {
    let (chain, key) = load(paths)?;
    let credentials = PeerCredentials::new(Arc::new(rustls::crypto::ring::default_provider()));
    credentials
        .install(chain, key)
        .map_err(|source| TlsError::PeerCredentials {
            path: paths.cert.clone(),
            source,
        })?;
    Ok(Arc::new(credentials))
}

/// The peer port's server side: TLS 1.3, presenting `credentials`, and only clients with a
/// certificate from the cluster's CA (mutual TLS). Which broker a client is, its certificate
/// says; the peer port checks that against what the client claims (see [`crate::peer`]).
pub fn peer_server_config(
    credentials: Arc<PeerCredentials>,
    ca: &Path,
) -> Result<quinn::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(ca_roots(ca)?),
        provider.clone(),
    )
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(credentials);
    config.alpn_protocols = vec![PEER_ALPN.to_vec()];
    config.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(config)?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(peer_transport()?));
    Ok(server)
}

/// The peer port's client side: presents `credentials`, and accepts a peer only when its
/// certificate is from the cluster's CA and names the broker dialed (by
/// [`crate::peer_identity::server_name`]); a peer naming another is counted in `mismatches`.
pub fn peer_client_config(
    credentials: Arc<PeerCredentials>,
    ca: &Path,
    mismatches: MismatchCounter,
) -> Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = PeerServerVerifier::new(Arc::new(ca_roots(ca)?), provider.clone(), mismatches);
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_client_cert_resolver(credentials);
    config.alpn_protocols = vec![PEER_ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(config)?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(Arc::new(peer_transport()?));
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_names_its_principal_by_common_name() {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("names");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "shipper");
        let named = params.self_signed(&key).expect("a certificate");
        assert_eq!(common_name(named.der()).as_deref(), Some("shipper"));
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("names");
        params.distinguished_name.remove(rcgen::DnType::CommonName);
        let unnamed = params.self_signed(&key).expect("a certificate");
        assert_eq!(common_name(unnamed.der()), None);
        assert_eq!(common_name(b"not a certificate"), None);
    }
}

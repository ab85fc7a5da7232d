//! TLS for the REST API: the certificate and key come from PEM files, are read again when
//! either file changes (rotation without a restart), and handshakes run beside the accept
//! loop, bounded in number and time, so that a client that opens a connection and says
//! nothing holds neither the loop nor more than one slot.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait to be accepted.
const MAX_HANDSHAKES: usize = 256;
/// How often the certificate files are checked for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// The REST API's certificate (chain, leaf first) and private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why the certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("the key {key} does not fit the certificate {cert}")]
    Key {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

impl TlsFiles {
    /// Reads and checks the pair: a chain with at least one certificate, and a private key
    /// that is the certificate's.
    fn load(&self) -> Result<Arc<CertifiedKey>, TlsError> {
        fn read(path: &Path) -> impl FnOnce(rustls::pki_types::pem::Error) -> TlsError + use<> {
            let path = path.to_owned();
            move |source| TlsError::Read { path, source }
        }
        let chain = CertificateDer::pem_file_iter(&self.cert)
            .map_err(read(&self.cert))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read(&self.cert))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: self.cert.clone(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(read(&self.key))?;
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(chain, key, &provider)
            .map(Arc::new)
            .map_err(|source| TlsError::Key {
                cert: self.cert.clone(),
                key: self.key.clone(),
                source,
            })
    }

    /// When either file last changed; `None` when one cannot be read.
    fn modified(&self) -> Modified {
        let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        Some((modified(&self.cert)?, modified(&self.key)?))
    }
}

/// When the certificate and the key files last changed, as last seen.
type Modified = Option<(SystemTime, SystemTime)>;

/// The certificate handshakes present: the last pair that loaded.
#[derive(Debug)]
struct Certificate {
    files: TlsFiles,
    current: RwLock<(Arc<CertifiedKey>, Modified)>,
}

impl Certificate {
    /// Loads the pair again if either file changed since the last load. A pair that fails
    /// to load is logged and the previous one kept: a half-written rotation never takes the
    /// API down.
    fn reload_if_changed(&self) {
        let modified = self.files.modified();
        let unchanged = self
            .current
            .read()
            .map(|current| modified.is_none() || current.1 == modified)
            .unwrap_or(true);
        if unchanged {
            return;
        }
        match self.files.load() {
            Ok(key) => {
                if let Ok(mut current) = self.current.write() {
                    *current = (key, modified);
                }
                tracing::info!(cert = %self.files.cert.display(), "REST API certificate reloaded");
            }
            Err(error) => tracing::error!(
                error = %error,
                cause = ?std::error::Error::source(&error).map(ToString::to_string),
                "the REST API's certificate files changed but cannot be used; serving the previous certificate"
            ),
        }
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|current| current.0.clone())
    }
}

/// A server configuration presenting `files`, and a task that reloads them when they change
/// (it ends when the last clone of the acceptor is dropped).
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let key = files.load()?;
    let certificate = Arc::new(Certificate {
        files: files.clone(),
        current: RwLock::new((key, files.modified())),
    });
    let reloading = Arc::downgrade(&certificate);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(RELOAD_CHECK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            let Some(certificate) = reloading.upgrade() else {
                return;
            };
            certificate.reload_if_changed();
        }
    });
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|source| TlsError::Key {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })?
    .with_no_client_auth()
    .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Logs a warning now and every minute after: the REST API serves plain HTTP.
pub async fn warn_plain_http() {
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        every.tick().await;
        tracing::warn!(
            "the controlplane's REST API serves PLAIN HTTP (--insecure-plain-http): tokens and \
             data cross the network readable by anyone on the path"
        );
    }
}

/// Accepted connections whose TLS handshake finished: an [`axum::serve::Listener`].
#[derive(Debug)]
pub(crate) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl TlsListener {
    pub(crate) fn new(listener: TcpListener, acceptor: TlsAcceptor) -> io::Result<TlsListener> {
        let local_addr = listener.local_addr()?;
        let (done, ready) = mpsc::channel(MAX_HANDSHAKES);
        let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(slot) = handshakes.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of descriptors and the like: wait rather than spin.
                        tracing::warn!(%error, "cannot accept a REST connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(%error, "could not set TCP_NODELAY");
                }
                let acceptor = acceptor.clone();
                let done = done.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = done.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "REST TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "REST TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            local_addr,
            accepting,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop never ends while the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

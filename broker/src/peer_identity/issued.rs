//! Peer certificates the controlplane issues, for a managed broker without one of its own:
//! a new key and a certificate naming this broker, asked for at start when the kept one is
//! missing or due, and renewed while the broker runs. Key and certificate are kept together
//! in `<data-dir>/peer-certificate.pem` (mode 0600), so that a broker restarted while the
//! controlplane is down still joins its peers until the certificate expires.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use floe_client::rest::{Controlplane, RestError};
use floe_wire::BrokerId;
use floe_wire::admin::PeerCertificateRequest;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use super::{CredentialsError, PeerCredentials, renew_at, validity};
use crate::state_file::{StateFileError, write_secret_atomically};

/// The file that keeps the issued key and certificate, in the data directory.
const FILE: &str = "peer-certificate.pem";
/// Pause after a failed request, doubled up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Why a certificate could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("cannot make a key and certificate request")]
    Request(#[from] rcgen::Error),
    #[error("the controlplane refused a peer certificate")]
    Refused(#[source] RestError),
    #[error("the issued certificate is not PEM")]
    Pem(#[source] rustls::pki_types::pem::Error),
    #[error("the issued certificate cannot be used")]
    Unusable(#[from] CredentialsError),
    #[error("the issued certificate has no readable validity")]
    NoValidity,
    #[error(transparent)]
    Keep(#[from] StateFileError),
}

/// A managed broker's issued peer certificate, and what renews it.
#[derive(Debug)]
pub(crate) struct Issued {
    controlplane: Controlplane,
    broker: BrokerId,
    path: PathBuf,
    credentials: Arc<PeerCredentials>,
    /// The installed certificate's validity.
    valid: (SystemTime, SystemTime),
}

impl Issued {
    /// Installs the kept certificate when it names `broker` and is not yet due for renewal;
    /// otherwise asks the controlplane for one, retrying while it does not answer.
    pub(crate) async fn obtain(
        controlplane: Controlplane,
        broker: BrokerId,
        data_dir: &Path,
        credentials: Arc<PeerCredentials>,
    ) -> Result<Issued, IssueError> {
        let path = data_dir.join(FILE);
        let mut issued = Issued {
            controlplane,
            broker,
            path,
            credentials,
            valid: (SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH),
        };
        match issued.install_kept() {
            Ok(true) => return Ok(issued),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                error = %floe_wire::ErrorChain(&e),
                path = %issued.path.display(),
                "the kept peer certificate is unusable; asking for a new one"
            ),
        }
        let mut pause = RETRY_MIN;
        loop {
            match issued.renew_once().await {
                Ok(()) => return Ok(issued),
                Err(IssueError::Refused(e)) if e.is_retryable() => {
                    tracing::warn!(error = %e, "waiting for the controlplane to issue a peer certificate");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Installs the kept certificate if there is one, for this broker, not yet due.
    fn install_kept(&mut self) -> Result<bool, IssueError> {
        let Ok(pem) = std::fs::read(&self.path) else {
            return Ok(false);
        };
        let (chain, key) = parse(&pem)?;
        let end_entity = chain.first().ok_or(CredentialsError::Empty)?;
        let valid = validity(end_entity).ok_or(IssueError::NoValidity)?;
        let named = super::broker_in_certificate(end_entity).map_err(CredentialsError::Identity)?;
        if named != self.broker || renew_at(valid.0, valid.1) <= SystemTime::now() {
            return Ok(false);
        }
        self.credentials.install(chain, key)?;
        self.valid = valid;
        tracing::info!(
            broker_id = self.broker.get(),
            "peer certificate from the data directory"
        );
        Ok(true)
    }

    /// Asks for a certificate for a new key, installs it and keeps it.
    async fn renew_once(&mut self) -> Result<(), IssueError> {
        let key = rcgen::KeyPair::generate()?;
        let csr = rcgen::CertificateParams::new(Vec::<String>::new())?
            .serialize_request(&key)?
            .pem()?;
        let issued = self
            .controlplane
            .peer_certificate(self.broker, &PeerCertificateRequest { csr_pem: csr })
            .await
            .map_err(IssueError::Refused)?;
        let pem = format!("{}{}", key.serialize_pem(), issued.certificate_pem);
        let (chain, key) = parse(pem.as_bytes())?;
        let end_entity = chain.first().ok_or(CredentialsError::Empty)?;
        let valid = validity(end_entity).ok_or(IssueError::NoValidity)?;
        let named = self.credentials.install(chain, key)?;
        if named != self.broker {
            return Err(CredentialsError::OtherBroker {
                named,
                expected: self.broker,
            }
            .into());
        }
        self.valid = valid;
        write_secret_atomically(&self.path, pem.as_bytes())?;
        tracing::info!(
            broker_id = self.broker.get(),
            not_after_ms = issued.not_after_ms,
            "peer certificate issued by the controlplane"
        );
        Ok(())
    }

    /// Renews the certificate after two thirds of its lifetime, retrying failures, until
    /// `shutdown`.
    pub(crate) async fn renew(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            let due = renew_at(self.valid.0, self.valid.1);
            let wait = due
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            let mut pause = RETRY_MIN;
            while let Err(e) = self.renew_once().await {
                let expired = SystemTime::now() >= self.valid.1;
                tracing::warn!(
                    error = %floe_wire::ErrorChain(&e),
                    expired,
                    "cannot renew the peer certificate; retrying"
                );
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }
}

/// The certificate chain and key in one PEM text.
fn parse(pem: &[u8]) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), IssueError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(IssueError::Pem)?;
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(IssueError::Pem)?;
    Ok((chain, key))
}

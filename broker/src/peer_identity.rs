//! A broker's identity on the peer port: the broker id its certificate names, as the URI
//! `floe:broker:<id>` ([`BrokerId::certificate_uri`]). The peer port trusts that name, signed
//! by the cluster's peer CA, and nothing a peer says about itself: a stream whose `Hello`
//! claims another broker, or a certificate that names none, closes the connection (see
//! `docs/security.md`, "Peer port identity").
//!
//! Here: reading the name out of a certificate, the certificate this broker presents (which
//! renewal replaces while the broker runs), the check of a dialed peer's certificate, and
//! when to renew. No I/O here; [`issued`] asks the controlplane for certificates.

pub(crate) mod issued;

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use floe_wire::BrokerId;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The application close code of a peer connection refused for its identity. Stable: a
/// peer may log it.
pub const IDENTITY_REFUSED: u32 = 0x1D;

/// Why a certificate names no broker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("not an X.509 certificate")]
    NotACertificate,
    #[error("the certificate names no broker (no `floe:broker:<id>` URI)")]
    NoBroker,
    #[error("the certificate names brokers {first} and {second}")]
    SeveralBrokers { first: BrokerId, second: BrokerId },
}

/// The broker a certificate (DER) names: exactly one `floe:broker:<id>` URI among its
/// subject alternative names. Other names are allowed and ignored.
pub fn broker_in_certificate(der: &[u8]) -> Result<BrokerId, IdentityError> {
    use x509_parser::extensions::GeneralName;
    let (_, certificate) =
        x509_parser::parse_x509_certificate(der).map_err(|_| IdentityError::NotACertificate)?;
    let names = certificate
        .subject_alternative_name()
        .map_err(|_| IdentityError::NotACertificate)?
        .ok_or(IdentityError::NoBroker)?;
    let mut found = None;
    for name in &names.value.general_names {
        let GeneralName::URI(uri) = name else {
            continue;
        };
        let Some(id) = BrokerId::from_certificate_uri(uri) else {
            continue;
        };
        match found {
            Some(first) if first != id => {
                return Err(IdentityError::SeveralBrokers { first, second: id });
            }
            _ => found = Some(id),
        }
    }
    found.ok_or(IdentityError::NoBroker)
}

/// The validity of a certificate (DER): not before, not after.
pub(crate) fn validity(der: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let at = |time: &x509_parser::time::ASN1Time| {
        let seconds = u64::try_from(time.timestamp()).ok()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
    };
    let validity = certificate.validity();
    Some((at(&validity.not_before)?, at(&validity.not_after)?))
}

/// When a certificate valid from `not_before` to `not_after` should be replaced: after two
/// thirds of its lifetime, leaving a third to ride out a controlplane that does not answer.
pub(crate) fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_before + lifetime / 3 * 2
}

/// The TLS server name a broker dials peer `id` by: the peer port checks identities by
/// broker id, not by host name, and this carries the id to [`PeerServerVerifier`].
pub(crate) fn server_name(id: BrokerId) -> String {
    format!("floe-broker-{}", id.get())
}

fn broker_in_server_name(name: &ServerName<'_>) -> Option<BrokerId> {
    let ServerName::DnsName(name) = name else {
        return None;
    };
    BrokerId::from_canonical_decimal(name.as_ref().strip_prefix("floe-broker-")?)
}

/// Why a certificate and key cannot be this broker's peer identity.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("the peer certificate names no broker")]
    Identity(#[source] IdentityError),
    #[error("the peer certificate names broker {named}, but this broker is {expected}")]
    OtherBroker { named: BrokerId, expected: BrokerId },
    #[error("the peer certificate's key is unusable or not the certificate's")]
    Key(#[source] rustls::Error),
    #[error("no certificate in the chain")]
    Empty,
}

/// The certificate and key this broker presents on the peer port, both as server and as
/// client. Empty until the first is installed (handshakes fail meanwhile); renewal replaces
/// it with one naming the same broker, and new handshakes use the new one at once.
#[derive(Debug)]
pub struct PeerCredentials {
    provider: Arc<CryptoProvider>,
    current: RwLock<Option<(BrokerId, Arc<CertifiedKey>)>>,
}

impl PeerCredentials {
    pub fn new(provider: Arc<CryptoProvider>) -> PeerCredentials {
        PeerCredentials {
            provider,
            current: RwLock::new(None),
        }
    }

    /// Installs `chain` (end entity first) and its `key`. The certificate must name a broker,
    /// and the same broker as the one it replaces; the broker it names.
    pub fn install(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<BrokerId, CredentialsError> {
        let end_entity = chain.first().ok_or(CredentialsError::Empty)?;
        let named = broker_in_certificate(end_entity).map_err(CredentialsError::Identity)?;
        if let Some(expected) = self.broker()
            && expected != named
        {
            return Err(CredentialsError::OtherBroker { named, expected });
        }
        let certified =
            CertifiedKey::from_der(chain, key, &self.provider).map_err(CredentialsError::Key)?;
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        *current = Some((named, Arc::new(certified)));
        Ok(named)
    }

    /// The broker the installed certificate names; `None` before the first.
    pub fn broker(&self) -> Option<BrokerId> {
        self.certified().map(|(id, _)| id)
    }

    fn certified(&self) -> Option<(BrokerId, Arc<CertifiedKey>)> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.clone()
    }
}

impl rustls::server::ResolvesServerCert for PeerCredentials {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certified().map(|(_, key)| key)
    }
}

impl rustls::client::ResolvesClientCert for PeerCredentials {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.certified().map(|(_, key)| key)
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Counts a peer whose certificate is not the broker it should be, by reason.
pub type MismatchCounter = Arc<dyn Fn(MismatchReason) + Send + Sync>;

/// Why a peer connection was refused for its identity: the reasons of
/// `floe_peer_identity_mismatches_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchReason {
    /// A stream's `Hello` claims a broker other than the one its certificate names.
    Claim,
    /// The connecting peer's certificate names no broker.
    NoIdentity,
    /// The broker dialed presented a certificate naming another broker, or none.
    Dialed,
}

impl MismatchReason {
    /// The metric's `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            MismatchReason::Claim => "claim",
            MismatchReason::NoIdentity => "no_identity",
            MismatchReason::Dialed => "dialed",
        }
    }
}

/// The dialing side's check of a peer: its certificate chains to the peer CA and names the
/// broker dialed (carried in the server name, see [`server_name`]). Host names play no part.
pub(crate) struct PeerServerVerifier {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
    mismatches: MismatchCounter,
}

impl std::fmt::Debug for PeerServerVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerServerVerifier").finish_non_exhaustive()
    }
}

impl PeerServerVerifier {
    pub(crate) fn new(
        roots: Arc<RootCertStore>,
        provider: Arc<CryptoProvider>,
        mismatches: MismatchCounter,
    ) -> PeerServerVerifier {
        PeerServerVerifier {
            roots,
            provider,
            mismatches,
        }
    }
}

impl ServerCertVerifier for PeerServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        let Some(dialed) = broker_in_server_name(server_name) else {
            return Err(rustls::Error::General(
                "a peer is dialed by the name floe-broker-<id>".into(),
            ));
        };
        match broker_in_certificate(end_entity) {
            Ok(named) if named == dialed => Ok(ServerCertVerified::assertion()),
            named => {
                (self.mismatches)(MismatchReason::Dialed);
                tracing::warn!(
                    dialed = dialed.get(),
                    named = ?named,
                    "a peer presented a certificate that does not name the broker dialed"
                );
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName,
                ))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The broker a connected peer's certificate names.
pub(crate) fn broker_of_connection(
    connection: &quinn::Connection,
) -> Result<BrokerId, IdentityError> {
    let identity = connection.peer_identity().ok_or(IdentityError::NoBroker)?;
    let chain = identity
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| IdentityError::NotACertificate)?;
    let end_entity = chain.first().ok_or(IdentityError::NotACertificate)?;
    broker_in_certificate(end_entity)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate with `uris` and a DNS name, self-signed (chains play no part here).
    fn certificate(uris: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        for uri in uris {
            params.subject_alt_names.push(rcgen::SanType::URI(
                (*uri).try_into().expect("an IA5 string"),
            ));
        }
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn a_certificate_names_its_broker_by_uri() {
        assert_eq!(
            broker_in_certificate(&certificate(&["floe:broker:2"])),
            Ok(BrokerId::new(2))
        );
        // Other URIs and a repeated name are fine.
        assert_eq!(
            broker_in_certificate(&certificate(&[
                "spiffe://floe/x",
                "floe:broker:7",
                "floe:broker:7"
            ])),
            Ok(BrokerId::new(7))
        );
    }

    #[test]
    fn a_certificate_from_other_tooling_names_its_broker() {
        // Made by openssl with subjectAltName=URI:floe:broker:2,DNS:localhost (a fuzz seed).
        let der = include_bytes!("../../fuzz/seeds/peer_certificate/broker-2.der");
        assert_eq!(broker_in_certificate(der), Ok(BrokerId::new(2)));
    }

    #[test]
    fn a_certificate_without_one_broker_names_none() {
        assert_eq!(
            broker_in_certificate(&certificate(&[])),
            Err(IdentityError::NoBroker)
        );
        assert_eq!(
            broker_in_certificate(&certificate(&["floe:broker:01"])),
            Err(IdentityError::NoBroker)
        );
        assert_eq!(
            broker_in_certificate(&certificate(&["floe:broker:1", "floe:broker:2"])),
            Err(IdentityError::SeveralBrokers {
                first: BrokerId::new(1),
                second: BrokerId::new(2)
            })
        );
        assert_eq!(
            broker_in_certificate(b"not a certificate"),
            Err(IdentityError::NotACertificate)
        );
    }

    #[test]
    fn renewal_comes_after_two_thirds_of_the_lifetime() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(
            renew_at(start, start + day),
            start + Duration::from_secs(16 * 3600)
        );
        // A certificate that ends before it starts is due at once.
        assert_eq!(renew_at(start, start - day), start);
    }

    #[test]
    fn a_peer_is_dialed_by_its_broker_id() {
        let name = ServerName::try_from(server_name(BrokerId::new(12))).expect("a DNS name");
        assert_eq!(broker_in_server_name(&name), Some(BrokerId::new(12)));
        let other = ServerName::try_from("broker-12.floe.internal").expect("a DNS name");
        assert_eq!(broker_in_server_name(&other), None);
        let leading_zero = ServerName::try_from("floe-broker-012").expect("a DNS name");
        assert_eq!(broker_in_server_name(&leading_zero), None);
    }

    #[test]
    fn credentials_keep_naming_the_same_broker() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let credentials = PeerCredentials::new(provider);
        assert_eq!(credentials.broker(), None);
        let issue = |id: u32| {
            let key = rcgen::KeyPair::generate().expect("key");
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("p");
            params.subject_alt_names = vec![rcgen::SanType::URI(
                BrokerId::new(id).certificate_uri().try_into().expect("IA5"),
            )];
            let cert = params.self_signed(&key).expect("certificate");
            (
                vec![cert.der().clone()],
                PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
            )
        };
        let (chain, key) = issue(3);
        assert_eq!(
            credentials.install(chain, key).expect("first"),
            BrokerId::new(3)
        );
        let (chain, key) = issue(3);
        assert_eq!(
            credentials.install(chain, key).expect("renewed"),
            BrokerId::new(3)
        );
        let (chain, key) = issue(4);
        assert!(matches!(
            credentials.install(chain, key),
            Err(CredentialsError::OtherBroker { named, expected })
                if named == BrokerId::new(4) && expected == BrokerId::new(3)
        ));
        assert_eq!(credentials.broker(), Some(BrokerId::new(3)));
    }
}

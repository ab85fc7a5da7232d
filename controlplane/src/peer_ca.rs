//! The cluster's peer CA, when the controlplane holds its key: it signs short-lived
//! certificates that name a broker (`floe:broker:<id>`) for the broker's peer port, where the
//! name is the broker's identity (see `docs/security.md`, "Peer port identity").
//!
//! Signing takes the time as an argument; only [`PeerCa::load`] reads files.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floe_wire::BrokerId;
use floe_wire::admin::{MAX_CSR_PEM_LEN, PeerCertificate};
use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};

/// How far before the moment of issue a certificate is already valid, at most: brokers'
/// clocks may lag the controlplane's a little. Never more than a quarter of the lifetime, so
/// that a broker renewing after two thirds of the whole validity still renews after the
/// moment of issue.
const BACKDATE: Duration = Duration::from_secs(300);

/// Why the peer CA could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PeerCaError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the peer CA certificate is not a PEM X.509 certificate")]
    Certificate(#[source] rcgen::Error),
    #[error("the peer CA key is not a PEM private key (PKCS#8, ECDSA P-256/P-384, Ed25519 or RSA)")]
    Key(#[source] rcgen::Error),
    #[error("the peer CA key is not the key of the peer CA certificate")]
    KeyMismatch,
}

/// Why a certificate could not be issued: the request is at fault.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("the certificate signing request holds {len} bytes; at most {MAX_CSR_PEM_LEN}")]
    TooLarge { len: usize },
    #[error("not a PEM certificate signing request with a valid signature")]
    Request(#[source] rcgen::Error),
    #[error("cannot sign the certificate")]
    Sign(#[source] rcgen::Error),
    #[error("the certificate lifetime ends out of range")]
    Lifetime,
    #[error("no system randomness for the serial number")]
    NoRandomness,
}

/// The peer CA's certificate and private key.
pub struct PeerCa {
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for PeerCa {
    /// Without the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCa").finish_non_exhaustive()
    }
}

impl PeerCa {
    /// Reads the CA certificate and its private key (PEM) from files, and checks they
    /// belong together.
    pub fn load(certificate: &Path, key: &Path) -> Result<PeerCa, PeerCaError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| PeerCaError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        PeerCa::from_pem(&read(certificate)?, &read(key)?)
    }

    /// The CA from its certificate and private key (PEM), once they are known to belong
    /// together.
    pub fn from_pem(certificate_pem: &str, key_pem: &str) -> Result<PeerCa, PeerCaError> {
        let key = KeyPair::from_pem(key_pem).map_err(PeerCaError::Key)?;
        let unreadable = || PeerCaError::Certificate(rcgen::Error::CouldNotParseCertificate);
        let (_, pem) = x509_parser::pem::parse_x509_pem(certificate_pem.as_bytes())
            .map_err(|_| unreadable())?;
        let parsed = pem.parse_x509().map_err(|_| unreadable())?;
        if parsed.tbs_certificate.subject_pki.raw != key.subject_public_key_info().as_slice() {
            return Err(PeerCaError::KeyMismatch);
        }
        let issuer =
            Issuer::from_ca_cert_pem(certificate_pem, key).map_err(PeerCaError::Certificate)?;
        Ok(PeerCa { issuer })
    }

    /// A certificate naming `broker` for the public key of `csr_pem` (whose signature must
    /// hold), valid from a little before `now` for `lifetime`. Nothing of the request but its
    /// key is used.
    pub fn issue(
        &self,
        broker: BrokerId,
        csr_pem: &str,
        now: SystemTime,
        lifetime: Duration,
    ) -> Result<PeerCertificate, IssueError> {
        if csr_pem.len() > MAX_CSR_PEM_LEN {
            return Err(IssueError::TooLarge { len: csr_pem.len() });
        }
        let request =
            CertificateSigningRequestParams::from_pem(csr_pem).map_err(IssueError::Request)?;
        let not_after = now.checked_add(lifetime).ok_or(IssueError::Lifetime)?;
        let not_before = now
            .checked_sub(BACKDATE.min(lifetime / 4))
            .unwrap_or(UNIX_EPOCH);
        let mut params = CertificateParams::default();
        params.not_before = date_time(not_before)?;
        params.not_after = date_time(not_after)?;
        params.serial_number = Some(random_serial()?);
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("floe-broker-{}", broker.get()));
        let uri = broker
            .certificate_uri()
            .try_into()
            .map_err(|e: rcgen::Error| IssueError::Sign(e))?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let certificate = params
            .signed_by(&request.public_key, &self.issuer)
            .map_err(IssueError::Sign)?;
        let not_after_ms = not_after
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(PeerCertificate {
            certificate_pem: certificate.pem(),
            not_after_ms,
        })
    }
}

fn date_time(time: SystemTime) -> Result<time::OffsetDateTime, IssueError> {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| IssueError::Lifetime)?
        .as_secs();
    let seconds = i64::try_from(seconds).map_err(|_| IssueError::Lifetime)?;
    time::OffsetDateTime::from_unix_timestamp(seconds).map_err(|_| IssueError::Lifetime)
}

/// 16 random bytes, the top bit clear so that the serial is a positive integer.
fn random_serial() -> Result<SerialNumber, IssueError> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| IssueError::NoRandomness)?;
    bytes[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA's certificate (PEM) and key.
    fn ca() -> (String, KeyPair) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "Floe peer CA");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        (params.self_signed(&key).expect("CA").pem(), key)
    }

    /// A CSR (PEM) asking for `uri`, and its key.
    fn request(uri: &str) -> String {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["evil.example".to_string()]).expect("p");
        params
            .subject_alt_names
            .push(SanType::URI(uri.try_into().expect("IA5")));
        params
            .serialize_request(&key)
            .expect("CSR")
            .pem()
            .expect("PEM")
    }

    fn parse_pem(pem: &str) -> Vec<u8> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("PEM");
        pem.contents
    }

    #[test]
    fn an_issued_certificate_names_only_the_broker_and_chains_to_the_ca() {
        let (ca_pem, ca_key) = ca();
        let ca_der = parse_pem(&ca_pem);
        let peer_ca = PeerCa::from_pem(&ca_pem, &ca_key.serialize_pem()).expect("loads");
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let lifetime = Duration::from_secs(24 * 3600);
        // The request asks for broker 1 and a DNS name; the certificate names broker 2 only.
        let issued = peer_ca
            .issue(BrokerId::new(2), &request("floe:broker:1"), now, lifetime)
            .expect("issued");
        assert_eq!(issued.not_after_ms, 1_800_086_400_000);

        let der = parse_pem(&issued.certificate_pem);
        let (_, certificate) = x509_parser::parse_x509_certificate(&der).expect("X.509");
        let (_, ca_certificate) = x509_parser::parse_x509_certificate(&ca_der).expect("CA");
        certificate
            .verify_signature(Some(ca_certificate.public_key()))
            .expect("signed by the peer CA");
        let names: Vec<String> = certificate
            .subject_alternative_name()
            .expect("extension")
            .expect("names")
            .value
            .general_names
            .iter()
            .map(|name| name.to_string())
            .collect();
        assert_eq!(names, vec!["URI(floe:broker:2)".to_string()]);
        let validity = certificate.validity();
        assert_eq!(validity.not_before.timestamp(), 1_800_000_000 - 300);
        assert_eq!(validity.not_after.timestamp(), 1_800_086_400);
        assert!(!certificate.is_ca());
    }

    #[test]
    fn a_request_that_is_not_a_signed_csr_is_refused() {
        let (ca_pem, ca_key) = ca();
        let peer_ca = PeerCa::from_pem(&ca_pem, &ca_key.serialize_pem()).expect("loads");
        let now = SystemTime::now();
        let day = Duration::from_secs(24 * 3600);
        let refused = |csr: &str| peer_ca.issue(BrokerId::new(1), csr, now, day).is_err();
        assert!(refused("not a CSR"));
        assert!(refused(&ca_pem), "a certificate is not a request");
        // A request whose signature does not hold: the last line of its base64 holds the
        // end of the signature; one character of it changed.
        let good = request("floe:broker:1");
        assert!(!refused(&good));
        let mut lines: Vec<String> = good.lines().map(str::to_owned).collect();
        let last_body = lines.len() - 2;
        let first = lines[last_body].remove(0);
        lines[last_body].insert(0, if first == 'A' { 'B' } else { 'A' });
        let tampered = lines.join("\n");
        assert!(matches!(
            peer_ca.issue(BrokerId::new(1), &tampered, now, day),
            Err(IssueError::Request(
                rcgen::Error::InvalidCertificationRequestSignature
            ))
        ));
        assert!(matches!(
            peer_ca.issue(BrokerId::new(1), &"A".repeat(MAX_CSR_PEM_LEN + 1), now, day),
            Err(IssueError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_request_made_by_openssl_is_signed() {
        let (ca_pem, ca_key) = ca();
        let peer_ca = PeerCa::from_pem(&ca_pem, &ca_key.serialize_pem()).expect("loads");
        let csr = include_str!("../../fuzz/seeds/peer_certificate_request/request.pem");
        let day = Duration::from_secs(24 * 3600);
        assert!(
            peer_ca
                .issue(BrokerId::new(5), csr, SystemTime::now(), day)
                .is_ok()
        );
    }

    #[test]
    fn a_ca_with_another_key_does_not_load() {
        let (ca_pem, _) = ca();
        let other = KeyPair::generate().expect("key");
        assert!(matches!(
            PeerCa::from_pem(&ca_pem, &other.serialize_pem()),
            Err(PeerCaError::KeyMismatch)
        ));
    }
}

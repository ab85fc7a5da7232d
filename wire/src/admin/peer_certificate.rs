//! Peer-port certificates the controlplane issues to brokers (see `docs/security.md`).

use serde::{Deserialize, Serialize};

/// The largest certificate signing request the controlplane reads, in bytes of PEM.
pub const MAX_CSR_PEM_LEN: usize = 16 * 1024;

/// `POST /v1/brokers/{id}/peer-certificate`: a broker asks for a certificate naming it, for
/// the key pair whose public half the request carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerCertificateRequest {
    /// A PKCS#10 certificate signing request (PEM), signed with the broker's new private key.
    /// Only its public key is used: the controlplane decides every name and date.
    pub csr_pem: String,
}

/// A certificate for the peer port, naming the broker as `floe:broker:<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerCertificate {
    /// The certificate (PEM), signed by the cluster's peer CA.
    pub certificate_pem: String,
    /// When it stops being valid, in milliseconds since the Unix epoch; the broker asks for
    /// the next one well before.
    pub not_after_ms: u64,
}

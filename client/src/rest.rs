//! The controlplane's REST API from Rust: streams, brokers and the cluster's state for the
//! `floe` CLI and for operators' programs; registration, heartbeats and assignments for
//! brokers; registration, heartbeats and leaving for read replicas. Requests and answers
//! are the `floe_wire::admin` types; a failed call carries the controlplane's
//! `{code, message}`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), floe_client::rest::RestError> {
//! use floe_client::rest::Controlplane;
//! let controlplane = Controlplane::new("http://127.0.0.1:7300", None)?;
//! for stream in controlplane.streams().await?.streams {
//!     println!("{} ({} partitions)", stream.name, stream.config.partitions);
//! }
//! # Ok(()) }
//! ```

mod groups;

use std::time::Duration;

use floe_wire::BrokerId;
use floe_wire::admin::{
    AlterRetentionRequest, AlterStreamRequest, ApiError, ApiErrorCode, Assignments, BrokerInfo,
    BrokerList, CreateStreamRequest, ElectionReport, Health, HeartbeatRequest, HeartbeatResponse,
    PeerCertificate, PeerCertificateRequest, ReadReplicaHeartbeat, ReadReplicaHeartbeatResponse,
    ReadReplicaInfo, ReadReplicaList, Readiness, RegisterBrokerRequest, RegisterBrokerResponse,
    RegisterReadReplicaRequest, RegisterReadReplicaResponse, ScalingPolicy, StreamDescription,
    StreamInfo, StreamList,
};
use floe_wire::admin::{CreatePrincipalRequest, CreatedToken, PrincipalList, WhoAmI};
use floe_wire::auth::CredentialTable;
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How long an ordinary call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a REST call failed.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// The controlplane answered with an error.
    #[error("{message} ({code}, HTTP {status})", code = code_name(*.code))]
    Api {
        status: u16,
        code: ApiErrorCode,
        message: String,
    },
    /// The controlplane could not be reached or did not answer in time.
    #[error("cannot reach the controlplane at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// The answer was not what the API documents.
    #[error("unexpected answer from the controlplane at {url}: {detail}")]
    Invalid { url: String, detail: String },
    /// The base URL is not an http(s) URL.
    #[error("`{0}` is not a controlplane URL (try http://127.0.0.1:7300)")]
    BadUrl(String),
    /// The CA file to trust the controlplane's certificate by cannot be used.
    #[error("cannot use {path} as the controlplane's CA: {detail}")]
    Ca {
        path: std::path::PathBuf,
        detail: String,
    },
}

impl RestError {
    /// The controlplane's error code, when it answered with one.
    pub fn code(&self) -> Option<ApiErrorCode> {
        match self {
            RestError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            RestError::Unreachable { .. } => true,
            RestError::Api { status, code, .. } => {
                *status >= 500 || matches!(code, ApiErrorCode::Conflict)
            }
            RestError::Invalid { .. } | RestError::BadUrl(_) | RestError::Ca { .. } => false,
        }
    }
}

fn code_name(code: ApiErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{code:?}"))
}

/// A client of one controlplane's REST API. Cheap to clone. Its `Debug` never shows the
/// token.
#[derive(Clone)]
pub struct Controlplane {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl std::fmt::Debug for Controlplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controlplane")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Controlplane {
    /// A client of the controlplane at `base` (e.g. `https://controlplane.internal:7300`);
    /// `token` is sent as a bearer token with every call when set. An `https` controlplane's
    /// certificate must chain to the system's roots; see [`Controlplane::with_ca`].
    pub fn new(base: &str, token: Option<String>) -> Result<Controlplane, RestError> {
        Controlplane::with_ca(base, token, None)
    }

    /// Like [`Controlplane::new`], trusting the PEM certificates in `ca` (the cluster's CA,
    /// e.g. the one `deploy/cluster-tls.sh` or `floe-broker certs` wrote) beside the
    /// system's roots, so that one profile serves a controlplane with a certificate of the
    /// cluster's CA or of a public one (a load balancer's).
    pub fn with_ca(
        base: &str,
        token: Option<String>,
        ca: Option<&std::path::Path>,
    ) -> Result<Controlplane, RestError> {
        let trimmed = base.trim().trim_end_matches('/');
        let parsed = reqwest::Url::parse(trimmed).map_err(|_| RestError::BadUrl(base.into()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(RestError::BadUrl(base.into()));
        }
        // The HTTP client's TLS takes the process's rustls provider; install ring's (the one
        // the QUIC client uses) when the program has not chosen one.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        // Only an https URL reads the CA: a profile's CA file does not stand in the way of a
        // plain-HTTP controlplane.
        if let Some(path) = ca.filter(|_| parsed.scheme() == "https") {
            builder = builder.tls_certs_merge(read_ca(path)?);
        }
        let http = builder.build().map_err(|e| RestError::Unreachable {
            url: trimmed.into(),
            detail: e.to_string(),
        })?;
        Ok(Controlplane {
            http,
            base: trimmed.to_string(),
            token,
        })
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The same controlplane, called with another token: a broker forwarding a client's
    /// request calls as that client, so that the controlplane decides on the client.
    pub fn with_token(&self, token: Option<String>) -> Controlplane {
        Controlplane {
            http: self.http.clone(),
            base: self.base.clone(),
            token,
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Option<T>, RestError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).timeout(timeout);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let unreachable = |e: reqwest::Error| RestError::Unreachable {
            url: url.clone(),
            detail: unreachable_detail(&url, &e),
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(unreachable)?;
        if status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ApiError>(&bytes) {
                Ok(error) => RestError::Api {
                    status: status.as_u16(),
                    code: error.code,
                    message: error.message,
                },
                Err(_) => RestError::Invalid {
                    url,
                    detail: format!("HTTP {status} without an error body"),
                },
            });
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RestError::Invalid {
                url,
                detail: e.to_string(),
            })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, RestError> {
        self.expect(Method::GET, path, None, CALL_TIMEOUT).await
    }

    async fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, RestError> {
        let body = serde_json::to_vec(body).map_err(|e| RestError::Invalid {
            url: self.base.clone(),
            detail: format!("encoding the request: {e}"),
        })?;
        self.expect(method, path, Some(body), CALL_TIMEOUT).await
    }

    async fn expect<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<T, RestError> {
        self.call(method, path, body, timeout)
            .await?
            .ok_or_else(|| RestError::Invalid {
                url: format!("{}{path}", self.base),
                detail: "an empty answer".into(),
            })
    }

    /// `GET /v1/health`.
    pub async fn health(&self) -> Result<Health, RestError> {
        self.get("/v1/health").await
    }

    /// `GET /v1/ready`: whether this controlplane leads.
    pub async fn ready(&self) -> Result<Readiness, RestError> {
        self.get("/v1/ready").await
    }

    /// `POST /v1/streams`.
    pub async fn create_stream(
        &self,
        request: &CreateStreamRequest,
    ) -> Result<StreamInfo, RestError> {
        self.send(Method::POST, "/v1/streams", request).await
    }

    /// `GET /v1/streams`.
    pub async fn streams(&self) -> Result<StreamList, RestError> {
        self.get("/v1/streams").await
    }

    /// `GET /v1/streams/{name}`: every partition's replicas, leader and reported ranges.
    pub async fn stream(&self, name: &str) -> Result<StreamDescription, RestError> {
        self.get(&format!("/v1/streams/{}", path_segment(name)))
            .await
    }

    /// `PUT /v1/streams/{name}/retention`.
    pub async fn alter_retention(
        &self,
        name: &str,
        retention: &AlterRetentionRequest,
    ) -> Result<StreamInfo, RestError> {
        let path = format!("/v1/streams/{}/retention", path_segment(name));
        self.send(Method::PUT, &path, retention).await
    }

    /// `PATCH /v1/streams/{name}`: changes a live stream's ack mode, segment or retention
    /// settings.
    pub async fn alter_stream(
        &self,
        name: &str,
        request: &AlterStreamRequest,
    ) -> Result<StreamInfo, RestError> {
        let path = format!("/v1/streams/{}", path_segment(name));
        self.send(Method::PATCH, &path, request).await
    }

    /// `DELETE /v1/streams/{name}`.
    pub async fn delete_stream(&self, name: &str) -> Result<(), RestError> {
        let path = format!("/v1/streams/{}", path_segment(name));
        self.call::<serde_json::Value>(Method::DELETE, &path, None, CALL_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// `GET /v1/brokers`.
    pub async fn brokers(&self) -> Result<BrokerList, RestError> {
        self.get("/v1/brokers").await
    }

    /// `POST /v1/brokers/{id}/drain`.
    pub async fn drain_broker(&self, id: BrokerId) -> Result<BrokerInfo, RestError> {
        let path = format!("/v1/brokers/{}/drain", id.get());
        self.expect(Method::POST, &path, None, CALL_TIMEOUT).await
    }

    /// `POST /v1/brokers/{id}/undrain`.
    pub async fn undrain_broker(&self, id: BrokerId) -> Result<BrokerInfo, RestError> {
        let path = format!("/v1/brokers/{}/undrain", id.get());
        self.expect(Method::POST, &path, None, CALL_TIMEOUT).await
    }

    /// `POST /v1/brokers`: a broker registers (again, when it names its id).
    pub async fn register_broker(
        &self,
        request: &RegisterBrokerRequest,
    ) -> Result<RegisterBrokerResponse, RestError> {
        self.send(Method::POST, "/v1/brokers", request).await
    }

    /// `POST /v1/brokers/{id}/heartbeat`: renews the lease and reports partitions.
    pub async fn heartbeat(
        &self,
        id: BrokerId,
        request: &HeartbeatRequest,
    ) -> Result<HeartbeatResponse, RestError> {
        let path = format!("/v1/brokers/{}/heartbeat", id.get());
        self.send(Method::POST, &path, request).await
    }

    /// `POST /v1/brokers/{id}/peer-certificate`: a certificate naming broker `id` for the key
    /// of the request's CSR, from the controlplane's peer CA.
    pub async fn peer_certificate(
        &self,
        id: BrokerId,
        request: &PeerCertificateRequest,
    ) -> Result<PeerCertificate, RestError> {
        let path = format!("/v1/brokers/{}/peer-certificate", id.get());
        self.send(Method::POST, &path, request).await
    }

    /// `POST /v1/brokers/{id}/elections`: a replica's answer to an election.
    pub async fn report_election(
        &self,
        id: BrokerId,
        report: &ElectionReport,
    ) -> Result<(), RestError> {
        let path = format!("/v1/brokers/{}/elections", id.get());
        let body = serde_json::to_vec(report).map_err(|e| RestError::Invalid {
            url: self.base.clone(),
            detail: format!("encoding the request: {e}"),
        })?;
        self.call::<serde_json::Value>(Method::POST, &path, Some(body), CALL_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// `GET /v1/brokers/{id}/assignments`: at once without `after_version`; otherwise once
    /// the assignment version passes it, or after `wait` (capped by the controlplane).
    pub async fn assignments(
        &self,
        id: BrokerId,
        after_version: Option<u64>,
        wait: Duration,
    ) -> Result<Assignments, RestError> {
        let path = match after_version {
            None => format!("/v1/brokers/{}/assignments", id.get()),
            Some(after) => format!(
                "/v1/brokers/{}/assignments?after_version={after}&timeout_ms={}",
                id.get(),
                wait.as_millis()
            ),
        };
        self.expect(Method::GET, &path, None, CALL_TIMEOUT + wait)
            .await
    }

    /// `GET /v1/read-replicas`.
    pub async fn read_replicas(&self) -> Result<ReadReplicaList, RestError> {
        self.get("/v1/read-replicas").await
    }

    /// `GET /v1/scaling-policy`.
    pub async fn scaling_policy(&self) -> Result<ScalingPolicy, RestError> {
        self.get("/v1/scaling-policy").await
    }

    /// `PUT /v1/scaling-policy`: replaces the policy the autoscaler acts on.
    pub async fn set_scaling_policy(
        &self,
        policy: &ScalingPolicy,
    ) -> Result<ScalingPolicy, RestError> {
        self.send(Method::PUT, "/v1/scaling-policy", policy).await
    }

    /// `POST /v1/read-replicas`: a read replica registers (again, when it names its id).
    pub async fn register_read_replica(
        &self,
        request: &RegisterReadReplicaRequest,
    ) -> Result<RegisterReadReplicaResponse, RestError> {
        self.send(Method::POST, "/v1/read-replicas", request).await
    }

    /// `POST /v1/read-replicas/{id}/heartbeat`: renews the lease and reports the load. A
    /// `draining` answer means clients send the read replica no new readers; on
    /// `404 read_replica_not_found` or `409 lease_expired`, register again.
    pub async fn read_replica_heartbeat(
        &self,
        id: &str,
        load: &ReadReplicaHeartbeat,
    ) -> Result<ReadReplicaHeartbeatResponse, RestError> {
        let path = format!("/v1/read-replicas/{}/heartbeat", path_segment(id));
        self.send(Method::POST, &path, load).await
    }

    /// `POST /v1/read-replicas/{id}/drain`.
    pub async fn drain_read_replica(&self, id: &str) -> Result<ReadReplicaInfo, RestError> {
        let path = format!("/v1/read-replicas/{}/drain", path_segment(id));
        self.expect(Method::POST, &path, None, CALL_TIMEOUT).await
    }

    /// `DELETE /v1/read-replicas/{id}`: a replica leaving on purpose.
    pub async fn remove_read_replica(&self, id: &str) -> Result<(), RestError> {
        let path = format!("/v1/read-replicas/{}", path_segment(id));
        self.call::<serde_json::Value>(Method::DELETE, &path, None, CALL_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// `GET /v1/principals`: every principal, its grants and its tokens' key ids.
    pub async fn principals(&self) -> Result<PrincipalList, RestError> {
        self.get("/v1/principals").await
    }

    /// `POST /v1/principals`: a new principal and its first token.
    pub async fn create_principal(
        &self,
        request: &CreatePrincipalRequest,
    ) -> Result<CreatedToken, RestError> {
        self.send(Method::POST, "/v1/principals", request).await
    }

    /// `POST /v1/principals/{name}/tokens`: another token for a principal.
    pub async fn add_token(&self, name: &str) -> Result<CreatedToken, RestError> {
        let path = format!("/v1/principals/{}/tokens", path_segment(name));
        self.expect(Method::POST, &path, None, CALL_TIMEOUT).await
    }

    /// `DELETE /v1/principals/{name}`: the principal and all its tokens.
    pub async fn revoke_principal(&self, name: &str) -> Result<(), RestError> {
        let path = format!("/v1/principals/{}", path_segment(name));
        self.call::<serde_json::Value>(Method::DELETE, &path, None, CALL_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// `DELETE /v1/principals/{name}/tokens/{key_id}`: one token.
    pub async fn revoke_token(&self, name: &str, key_id: &str) -> Result<(), RestError> {
        let path = format!(
            "/v1/principals/{}/tokens/{}",
            path_segment(name),
            path_segment(key_id)
        );
        self.call::<serde_json::Value>(Method::DELETE, &path, None, CALL_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// `GET /v1/auth/credentials`: what brokers and read replicas check callers against.
    pub async fn credentials(&self) -> Result<CredentialTable, RestError> {
        self.get("/v1/auth/credentials").await
    }

    /// `GET /v1/auth/whoami`: the principal this client's token proves.
    pub async fn whoami(&self) -> Result<WhoAmI, RestError> {
        self.get("/v1/auth/whoami").await
    }
}

/// A stream name as one path segment. Valid names need no escaping; anything else is
/// percent-encoded so that the controlplane, not the URL parser, refuses it.
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The certificates of a PEM file, for trusting a controlplane's certificate by.
fn read_ca(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, RestError> {
    let failed = |detail: String| RestError::Ca {
        path: path.to_owned(),
        detail,
    };
    let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    let certificates =
        reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| failed(error_chain(&e)))?;
    if certificates.is_empty() {
        return Err(failed("it holds no PEM certificate".into()));
    }
    Ok(certificates)
}

/// Why a server's certificate was refused, read from a TLS error's text (rustls names the
/// reason; the QUIC and HTTP clients pass it on in their own errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertificateRefusal {
    /// Not signed by a trusted CA. A CA of the same name but another key (another cluster's
    /// `floe-broker certs`) fails the signature rather than the issuer.
    UntrustedIssuer,
    /// Signed, but for other names than the one dialed.
    WrongName,
}

impl CertificateRefusal {
    /// The refusal `detail` (an error chain's text) reports, if any.
    pub fn in_error(detail: &str) -> Option<CertificateRefusal> {
        if ["UnknownIssuer", "unknown issuer", "BadSignature"]
            .iter()
            .any(|sign| detail.contains(sign))
        {
            Some(CertificateRefusal::UntrustedIssuer)
        } else if detail.contains("NotValidForName") || detail.contains("not valid for name") {
            Some(CertificateRefusal::WrongName)
        } else {
            None
        }
    }
}

/// What a failed call's error says, with what to do about a certificate the client does
/// not trust or that does not name the host.
fn unreachable_detail(url: &str, error: &reqwest::Error) -> String {
    let detail = error_chain(error);
    let hint = match CertificateRefusal::in_error(&detail) {
        Some(CertificateRefusal::UntrustedIssuer) => Some(
            "the controlplane's certificate is not signed by a trusted CA: pass the cluster's \
             CA with --ca (or the profile's `ca`)",
        ),
        Some(CertificateRefusal::WrongName) => Some(
            "the controlplane's certificate does not name this host: use the name or address \
             its certificate carries in the URL",
        ),
        None if url.starts_with("https://")
            && (detail.contains("InvalidContentType") || detail.contains("corrupt message")) =>
        {
            Some("the controlplane does not speak TLS here: try http:// in the URL")
        }
        None if url.starts_with("http://")
            && (detail.contains("connection closed before message completed")
                || detail.contains("invalid HTTP version")
                || detail.contains("unexpected end of file")) =>
        {
            Some("the controlplane may require TLS: try https:// in the URL")
        }
        None if detail.contains("Connection refused") => Some(
            "nothing listens there: start floe-controlplane, or point --controlplane (or the \
             profile's `controlplane`) at where it runs",
        ),
        None if error.is_timeout() || detail.contains("timed out") => {
            Some("no answer in time: check the address, and that a firewall lets the port through")
        }
        None => None,
    };
    match hint {
        Some(hint) => format!("{detail} ({hint})"),
        None => detail,
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        let ok = Controlplane::new("http://127.0.0.1:7300/", None).expect("valid");
        assert_eq!(ok.url(), "http://127.0.0.1:7300");
        for bad in ["127.0.0.1:7300", "ftp://host", "", "http://"] {
            assert!(
                matches!(Controlplane::new(bad, None), Err(RestError::BadUrl(_))),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn odd_names_are_escaped_into_one_segment() {
        assert_eq!(path_segment("orders.v2"), "orders.v2");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
    }
}

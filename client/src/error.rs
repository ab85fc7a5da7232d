//! What can go wrong talking to a broker, grouped by what the caller can do about it.
//!
//! [`Error::is_retryable`] is the one place that decides whether an operation may be tried
//! again; the producer and the consumer both follow it. Errors are `Clone` because one
//! failed batch fails every record in it, and each record's delivery reports the error.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use floe_wire::frame::{ErrorCode, ErrorDetails, FrameError, PayloadError, RetryClass};

/// Any failure of the client library.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The configuration or the client profile cannot be used.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// No connection could be established with the broker.
    #[error("cannot connect to {endpoint}: {reason}")]
    Connect {
        endpoint: String,
        reason: ConnectFailure,
    },
    /// An operation did not finish in time. Its outcome is unknown.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        operation: &'static str,
        after: Duration,
    },
    /// The broker refused the request (or one item of it).
    #[error("broker error {code}: {message}")]
    Broker {
        code: ErrorCode,
        /// What to do about it; always `code.retry_class()`.
        retry_class: RetryClass,
        /// For people; never parsed.
        message: String,
        details: Option<ErrorDetails>,
    },
    /// The broker broke the protocol; the connection cannot be trusted for this request.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolViolation),
    /// The connection was lost while a request was on it. Its outcome is unknown.
    #[error("connection lost: {0}")]
    ConnectionLost(#[from] quinn::ConnectionError),
    /// A record cannot be sent as it is (too large for a batch, bad header).
    #[error("invalid record: {0}")]
    InvalidRecord(#[from] floe_wire::batch::BuildError),
    /// The request cannot be encoded (a name or text too long for its field).
    #[error("cannot encode the request: {0}")]
    Encode(#[from] floe_wire::frame::EncodeError),
    /// The request is larger than the broker accepts on this connection.
    #[error("request frame of {frame_len} bytes exceeds the broker's limit of {max}")]
    RequestTooLarge { frame_len: usize, max: u32 },
    /// The partition named does not exist in the stream.
    #[error("stream {stream} has {partition_count} partitions; there is no partition {partition}")]
    NoSuchPartition {
        stream: String,
        partition: u32,
        partition_count: u32,
    },
    /// The client, producer or consumer was closed.
    #[error("closed")]
    Closed,
    /// The controlplane refused or could not be reached (a consumer group's calls).
    #[error("controlplane: {0}")]
    Controlplane(Arc<crate::rest::RestError>),
}

impl From<crate::rest::RestError> for Error {
    fn from(error: crate::rest::RestError) -> Error {
        Error::Controlplane(Arc::new(error))
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigError {
    #[error("no client profile path: set FLOE_PROFILE or HOME, or pass the endpoint and CA")]
    NoProfilePath,
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: Arc<std::io::Error>,
    },
    #[error("parsing the client profile {path}: {source}")]
    Profile {
        path: PathBuf,
        source: Arc<serde_json::Error>,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("CA certificate {path} rejected: {source}")]
    Certificate {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Why a connection could not be established.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectFailure {
    #[error("resolving the address: {0}")]
    Resolve(Arc<std::io::Error>),
    #[error("the address resolves to nothing")]
    NoAddress,
    #[error("opening a UDP socket: {0}")]
    Socket(Arc<std::io::Error>),
    #[error("{0}")]
    Quic(#[from] quinn::ConnectError),
    #[error("handshake: {0}")]
    Handshake(#[from] quinn::ConnectionError),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("Hello refused: {code}: {message}")]
    HelloRefused { code: ErrorCode, message: String },
    #[error("Hello exchange: {0}")]
    Hello(Box<Error>),
}

/// The broker sent something the protocol does not allow.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProtocolViolation {
    #[error("unframeable response: {0}")]
    Frame(#[from] FrameError),
    #[error("undecodable response: {0}")]
    Payload(#[from] PayloadError),
    #[error("the response stream ended after {received} bytes, before a whole frame")]
    Truncated { received: usize },
    #[error("answer to request {found}, expected {expected}")]
    RequestId { expected: u64, found: u64 },
    #[error("a {found} answered a {request}")]
    UnexpectedResponse {
        request: &'static str,
        found: &'static str,
    },
    #[error("{expected} results for {sent} batches")]
    ResultCount { expected: usize, sent: usize },
    #[error("acknowledged offsets {base}..={last} for a batch of {records} records")]
    AckedRange { base: u64, last: u64, records: u32 },
    #[error("fetched batch is invalid: {0}")]
    Batch(#[from] floe_wire::BatchError),
    #[error("fetched batch at offset {base} goes back before offset {expected}")]
    BatchOrder { expected: u64, base: u64 },
    #[error("metadata lacks stream {0}")]
    MissingStream(String),
    #[error("reading the response: {0}")]
    Read(String),
}

impl Error {
    /// Whether trying the same operation again may succeed: a transient broker condition,
    /// stale metadata, a timeout or a lost connection. Anything else fails for good.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Broker { retry_class, .. } => *retry_class != RetryClass::Fatal,
            Error::Timeout { .. } | Error::ConnectionLost(_) | Error::Connect { .. } => true,
            Error::Controlplane(error) => error.is_retryable(),
            Error::Config(_)
            | Error::Protocol(_)
            | Error::InvalidRecord(_)
            | Error::Encode(_)
            | Error::RequestTooLarge { .. }
            | Error::NoSuchPartition { .. }
            | Error::Closed => false,
        }
    }

    /// The broker's error code, when the broker refused (a request, or the connection: its
    /// `Hello`, or at accept, e.g. `TooManyConnections`).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. }
            | Error::Connect {
                reason: ConnectFailure::HelloRefused { code, .. },
                ..
            } => Some(*code),
            _ => None,
        }
    }

    /// The broker's retry class, when the broker refused.
    pub fn retry_class(&self) -> Option<RetryClass> {
        match self {
            Error::Broker { retry_class, .. } => Some(*retry_class),
            _ => None,
        }
    }

    /// How long the broker asked to wait before a retry, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Broker {
                details: Some(ErrorDetails::RetryAfter { delay_ms }),
                ..
            } => Some(Duration::from_millis(u64::from(*delay_ms))),
            _ => None,
        }
    }

    /// A broker error for one item of a response, which carries a code but no message.
    pub(crate) fn from_code(code: ErrorCode, context: String) -> Error {
        let message = match code {
            ErrorCode::Forbidden => {
                format!("{context}: the token's principal holds no grant on it")
            }
            ErrorCode::Unauthorized => format!("{context}: no token, or one unknown or revoked"),
            _ => context,
        };
        Error::from_response(code, message, None)
    }

    /// A broker error from an `Error` frame.
    pub(crate) fn from_response(
        code: ErrorCode,
        message: String,
        details: Option<ErrorDetails>,
    ) -> Error {
        Error::Broker {
            code,
            retry_class: code.retry_class(),
            message,
            details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_classes_decide_what_is_retryable() {
        let broker = |code| Error::from_code(code, String::new());
        assert!(broker(ErrorCode::Throttled).is_retryable());
        assert!(broker(ErrorCode::NotLeader).is_retryable());
        assert!(!broker(ErrorCode::InvalidBatch).is_retryable());
        assert!(!broker(ErrorCode::OutOfOrderSequence).is_retryable());
        assert!(
            Error::Timeout {
                operation: "request",
                after: Duration::from_secs(1)
            }
            .is_retryable()
        );
        assert!(!Error::Closed.is_retryable());
        assert!(!Error::Protocol(ProtocolViolation::Truncated { received: 3 }).is_retryable());
    }

    #[test]
    fn retry_after_comes_from_the_details() {
        let error = Error::from_response(
            ErrorCode::Throttled,
            "slow down".into(),
            Some(ErrorDetails::RetryAfter { delay_ms: 250 }),
        );
        assert_eq!(error.retry_after(), Some(Duration::from_millis(250)));
        assert_eq!(error.retry_class(), Some(RetryClass::Retry));
        assert_eq!(Error::Closed.retry_after(), None);
    }
}

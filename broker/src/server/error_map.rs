//! The one place the broker's and the read replica's failures become wire error codes: every
//! refusal a client can receive is a [`Refusal`], [`Refusal::code`] is the one exhaustive
//! match that names its code, and [`Refusal::client_message`] the one that decides what of
//! it the client is told (never a path of the server).

use floe_client::rest::RestError;
use floe_hot_log::LogError;
use floe_tier::TierError;
use floe_wire::admin::ApiErrorCode;
use floe_wire::frame::{
    ErrorCode, ErrorDetails, ErrorResponse, FrameError, Message, MessageType, NoCommonVersion,
    PayloadError,
};
use floe_wire::{Offset, StreamName};

use crate::partition::TakeError;
use crate::partition::corrupt::CorruptPartition;
use crate::partitions::RepairError;
use crate::partitions::StreamError;
use floe_wire::ErrorChain;

/// Why a request, or a batch in it, is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("{0:?} is not a request")]
    NotARequest(MessageType),
    #[error("Hello was already answered on this connection")]
    HelloRepeated,
    #[error(transparent)]
    Version(#[from] NoCommonVersion),
    #[error("send Hello first")]
    HandshakeRequired,
    #[error("another Hello is being read on this connection")]
    HelloPending,
    #[error(
        "the broker holds its limit of {limit} bytes of requests in flight \
         (--request-memory), and no room was made within {waited:?}; retry"
    )]
    RequestBytes {
        limit: u64,
        waited: std::time::Duration,
    },
    #[error(
        "the request's {len}-byte payload did not arrive within {waited:?} of its first \
         bytes (--request-payload-timeout); the bytes held for it were released"
    )]
    PayloadTimeout {
        len: u32,
        waited: std::time::Duration,
    },
    #[error("shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Denied(#[from] crate::auth::Denied),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error("response encoding failed")]
    Encoding,
    #[error("no stream named {0}")]
    UnknownStream(StreamName),
    #[error("stream {stream} has no partition {partition}")]
    UnknownPartition { stream: StreamName, partition: u32 },
    #[error("this broker does not lead stream {stream} partition {partition}")]
    NotLeader { stream: String, partition: u32 },
    /// The partition is in the `corrupt` state: its log is damaged where recovery must not
    /// cut it.
    #[error("{0}")]
    PartitionCorrupt(CorruptPartition),
    #[error("the disk is past its high-water mark; retry once tiering frees space")]
    DiskHighWater,
    #[error(transparent)]
    Repair(#[from] RepairError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(
        "object storage still holds objects under `{0}/` from an earlier stream of that name; \
         remove them or choose another name"
    )]
    ObjectsLeft(StreamName),
    #[error("checking object storage for stream {stream}: {source}")]
    TierCheck {
        stream: StreamName,
        #[source]
        source: TierError,
    },
    #[error("controlplane: {0}")]
    Controlplane(RestError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("reading tiered history: {source}")]
    Tier {
        #[source]
        source: TierError,
        /// The partition's whole readable range, for an offset the tier no longer holds.
        log_start: Offset,
        log_end: Offset,
    },
    #[error("a read replica serves fetches only; publish and administer through the brokers")]
    FetchesOnly,
    #[error("the partition's leader cannot be asked: {0}")]
    LeaderUnreachable(String),
    #[error("stream {stream} partition {partition} cannot be read")]
    Unreadable {
        stream: StreamName,
        partition: u32,
        /// What the partition's leader answered.
        code: ErrorCode,
    },
}

impl Refusal {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            Refusal::NotARequest(_) | Refusal::HelloRepeated | Refusal::HelloPending => {
                ErrorCode::InvalidRequest
            }
            Refusal::RequestBytes { .. } | Refusal::PayloadTimeout { .. } => ErrorCode::Throttled,
            Refusal::Version(_) => ErrorCode::UnsupportedVersion,
            Refusal::HandshakeRequired => ErrorCode::HandshakeRequired,
            Refusal::ShuttingDown => ErrorCode::ShuttingDown,
            Refusal::Denied(denied) => match denied {
                crate::auth::Denied::Unauthorized(_) => ErrorCode::Unauthorized,
                crate::auth::Denied::Forbidden { .. } => ErrorCode::Forbidden,
                crate::auth::Denied::NotReady => ErrorCode::Throttled,
            },
            Refusal::Frame(e) => e.error_code(),
            Refusal::Payload(e) => e.error_code(),
            Refusal::Encoding => ErrorCode::Internal,
            Refusal::UnknownStream(_) => ErrorCode::UnknownStream,
            Refusal::UnknownPartition { .. } => ErrorCode::UnknownPartition,
            Refusal::NotLeader { .. } | Refusal::FetchesOnly => ErrorCode::NotLeader,
            Refusal::PartitionCorrupt(_) => ErrorCode::CorruptData,
            Refusal::DiskHighWater => ErrorCode::DiskHighWater,
            Refusal::Repair(e) => match e {
                RepairError::NotCorrupt { .. }
                | RepairError::Replicated { .. }
                | RepairError::NotAcknowledged { .. } => ErrorCode::InvalidRequest,
                RepairError::Stream(e) => stream_code(e),
                RepairError::Log { source, .. } => log_code(source),
                RepairError::Task(_) => ErrorCode::Internal,
            },
            Refusal::Stream(e) => stream_code(e),
            Refusal::ObjectsLeft(_) => ErrorCode::StreamExists,
            Refusal::TierCheck { .. } => ErrorCode::TierUnavailable,
            Refusal::Controlplane(e) => controlplane_code(e),
            Refusal::Log(e) => log_code(e),
            Refusal::Tier { source, .. } => tier_code(source),
            Refusal::LeaderUnreachable(_) => ErrorCode::LeaderNotAvailable,
            Refusal::Unreadable { code, .. } => *code,
        }
    }

    /// What a client can use beyond the code: the readable range of an offset out of it.
    fn details(&self) -> Option<ErrorDetails> {
        match self {
            Refusal::Log(LogError::OffsetOutOfRange {
                log_start, log_end, ..
            }) => Some(ErrorDetails::OffsetRange {
                log_start: *log_start,
                log_end: *log_end,
            }),
            Refusal::Tier {
                source: TierError::OffsetOutOfRange { .. } | TierError::NotFound { .. },
                log_start,
                log_end,
            } => Some(ErrorDetails::OffsetRange {
                log_start: *log_start,
                log_end: *log_end,
            }),
            // Room is made as the requests in flight are answered, within milliseconds.
            Refusal::RequestBytes { .. } => Some(ErrorDetails::RetryAfter { delay_ms: 100 }),
            _ => None,
        }
    }
}

impl From<Refusal> for Message {
    /// The `Error` message a client receives: the code, [`Refusal::client_message`] (never a
    /// path of this server), and the details. What the client is not told goes to the log.
    fn from(refusal: Refusal) -> Message {
        let message = match refusal.client_message() {
            Told::Everything => ErrorChain(&refusal).to_string(),
            Told::Less(message) => {
                tracing::warn!(error = %ErrorChain(&refusal), told = %message, "refused a request; the client is told less");
                message
            }
            // Logged with its file and byte when the partition became corrupt.
            Told::Corrupt(message) => message,
        };
        Message::Error(ErrorResponse {
            code: refusal.code(),
            message,
            details: refusal.details(),
        })
    }
}

/// How much of a refusal a client is told.
enum Told {
    /// The error and its causes: nothing in them is local to the server.
    Everything,
    /// This instead: the error names the server's files or carries causes that may.
    Less(String),
    /// A corrupt partition's stream, partition and offsets, instead of its file.
    Corrupt(String),
}

impl Refusal {
    /// What a client may be told of this refusal. Paths of the server (files in the data
    /// directory, a local bucket's directory) and I/O causes, which may name them, stay in
    /// the server's log. One exhaustive match, so a new refusal must decide.
    fn client_message(&self) -> Told {
        match self {
            Refusal::NotARequest(_)
            | Refusal::HelloRepeated
            | Refusal::Version(_)
            | Refusal::HandshakeRequired
            | Refusal::HelloPending
            | Refusal::RequestBytes { .. }
            | Refusal::PayloadTimeout { .. }
            | Refusal::ShuttingDown
            | Refusal::Denied(_)
            | Refusal::Frame(_)
            | Refusal::Payload(_)
            | Refusal::Encoding
            | Refusal::UnknownStream(_)
            | Refusal::UnknownPartition { .. }
            | Refusal::NotLeader { .. }
            | Refusal::DiskHighWater
            | Refusal::ObjectsLeft(_)
            | Refusal::Controlplane(_)
            | Refusal::FetchesOnly
            | Refusal::LeaderUnreachable(_)
            | Refusal::Unreadable { .. } => Told::Everything,
            Refusal::PartitionCorrupt(corrupt) => Told::Corrupt(corrupt.client_message()),
            Refusal::Stream(e) => stream_message(e),
            Refusal::Repair(e) => match e {
                RepairError::NotCorrupt { .. }
                | RepairError::Replicated { .. }
                | RepairError::NotAcknowledged { .. }
                | RepairError::Task(_) => Told::Everything,
                RepairError::Stream(e) => stream_message(e),
                RepairError::Log { source, .. } => Told::Less(format!(
                    "{e}: {}",
                    log_message(source).unwrap_or_else(|| source.to_string())
                )),
            },
            Refusal::Log(e) => log_message(e).map_or(Told::Everything, Told::Less),
            Refusal::TierCheck { stream, source } => Told::Less(format!(
                "checking object storage for stream {stream}: {}",
                tier_message(source)
            )),
            Refusal::Tier { source, .. } => {
                Told::Less(format!("reading tiered history: {}", tier_message(source)))
            }
        }
    }
}

/// A log error without the server's paths; `None` when its chain holds none.
fn log_message(error: &LogError) -> Option<String> {
    match error {
        LogError::Corrupt { position, .. } => Some(format!(
            "stored data failed validation at byte {position} of a segment; the broker's log \
             names the file"
        )),
        LogError::DiskFull { .. } => Some(
            "no space left on the broker's disk: nothing was written; retry once space is freed"
                .into(),
        ),
        LogError::Io { op, source, .. } => Some(format!(
            "the log failed to {op} a file ({}); the broker's log names it",
            source.kind()
        )),
        LogError::InvalidBatch(_)
        | LogError::ControlBatch
        | LogError::NotBatchBoundary { .. }
        | LogError::NonContiguous { .. }
        | LogError::BatchTooLarge { .. }
        | LogError::OffsetOutOfRange { .. }
        | LogError::StaleEpoch { .. }
        | LogError::ProducerFenced { .. }
        | LogError::OutOfOrderSequence { .. }
        | LogError::ReplacementMismatch { .. }
        | LogError::Failed { .. }
        | LogError::InvalidConfig(_)
        | LogError::Closed => None,
    }
}

/// A stream error without the server's paths.
fn stream_message(error: &StreamError) -> Told {
    match error {
        StreamError::Exists(_)
        | StreamError::Deleting(_)
        | StreamError::Unknown(_)
        | StreamError::Invalid(_) => Told::Everything,
        StreamError::Catalog(_) => {
            Told::Less("the broker's stream catalog cannot be read or written".into())
        }
        StreamError::Io { op, source, .. } => Told::Less(format!(
            "cannot {op} a stream's directory ({}); the broker's log names it",
            source.kind()
        )),
        StreamError::Task(_) => Told::Less(error.to_string()),
        StreamError::TierPath { source, .. } | StreamError::Manifest { source, .. } => {
            Told::Less(format!("{error}: {}", tier_message(source)))
        }
        StreamError::Log { source, .. } => Told::Less(format!(
            "{error}: {}",
            log_message(source).unwrap_or_else(|| source.to_string())
        )),
        StreamError::Take { source, .. } => Told::Less(format!(
            "{error}: {}",
            match source {
                TakeError::Fence { source, .. } => tier_message(source),
                TakeError::Reset { source, .. } =>
                    log_message(source).unwrap_or_else(|| source.to_string()),
            }
        )),
    }
}

/// A tier error without the server's paths: the error itself, not its causes (a local
/// directory's I/O errors name its files), and no local segment's file.
fn tier_message(error: &TierError) -> String {
    match error {
        TierError::LocalSegment {
            base_offset,
            reason,
            ..
        } => format!("local segment at {base_offset} cannot be tiered: {reason}"),
        TierError::Config(_) => "invalid tier configuration; the server's log says why".into(),
        TierError::Cache(_) => "the chunk cache failed; the server's log says why".into(),
        TierError::Unavailable { .. }
        | TierError::NotFound { .. }
        | TierError::Corrupt { .. }
        | TierError::LocalGap { .. }
        | TierError::LocalRead { .. }
        | TierError::Fenced { .. }
        | TierError::Rejected(_)
        | TierError::CommitWindowPassed { .. }
        | TierError::Contended { .. }
        | TierError::InvalidManifest { .. }
        | TierError::OffsetOutOfRange { .. }
        | TierError::ReadOnly { .. } => error.to_string(),
    }
}

fn log_code(error: &LogError) -> ErrorCode {
    match error {
        LogError::InvalidBatch(_)
        | LogError::ControlBatch
        | LogError::NotBatchBoundary { .. }
        | LogError::NonContiguous { .. } => ErrorCode::InvalidBatch,
        LogError::BatchTooLarge { .. } => ErrorCode::BatchTooLarge,
        LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
        LogError::StaleEpoch { .. } => ErrorCode::NotLeader,
        LogError::ProducerFenced { .. } => ErrorCode::ProducerFenced,
        LogError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequence,
        LogError::Corrupt { .. } => ErrorCode::CorruptData,
        // Nothing was written and the log stays writable: the producer retries.
        LogError::DiskFull { .. } => ErrorCode::DiskHighWater,
        LogError::InvalidConfig(_) | LogError::ReplacementMismatch { .. } => ErrorCode::Internal,
        LogError::Failed { .. } | LogError::Io { .. } => ErrorCode::LogFailed,
        LogError::Closed => ErrorCode::ShuttingDown,
    }
}

fn tier_code(error: &TierError) -> ErrorCode {
    match error {
        TierError::OffsetOutOfRange { .. } | TierError::NotFound { .. } => {
            ErrorCode::OffsetOutOfRange
        }
        TierError::Corrupt { .. } | TierError::InvalidManifest { .. } => ErrorCode::CorruptData,
        TierError::Config(_) | TierError::ReadOnly { .. } => ErrorCode::Internal,
        _ => ErrorCode::TierUnavailable,
    }
}

fn stream_code(error: &StreamError) -> ErrorCode {
    match error {
        StreamError::Exists(_) | StreamError::Deleting(_) => ErrorCode::StreamExists,
        StreamError::Unknown(_) => ErrorCode::UnknownStream,
        StreamError::Invalid(_) => ErrorCode::InvalidRequest,
        StreamError::Catalog(_)
        | StreamError::Io { .. }
        | StreamError::TierPath { .. }
        | StreamError::Task(_)
        | StreamError::Log { .. } => ErrorCode::Internal,
        StreamError::Manifest { .. } => ErrorCode::TierUnavailable,
        StreamError::Take { source, .. } => match source {
            TakeError::Fence { .. } => ErrorCode::TierUnavailable,
            TakeError::Reset { .. } => ErrorCode::Internal,
        },
    }
}

/// The client-protocol code for a failed controlplane call.
fn controlplane_code(error: &RestError) -> ErrorCode {
    match error.code() {
        Some(ApiErrorCode::StreamExists) => ErrorCode::StreamExists,
        Some(ApiErrorCode::StreamNotFound) => ErrorCode::UnknownStream,
        Some(ApiErrorCode::Unauthorized) => ErrorCode::Unauthorized,
        Some(ApiErrorCode::Forbidden) => ErrorCode::Forbidden,
        Some(ApiErrorCode::BadRequest | ApiErrorCode::InvalidArgument) => ErrorCode::InvalidRequest,
        Some(ApiErrorCode::LimitExceeded) => ErrorCode::LimitExceeded,
        Some(_) => ErrorCode::Internal,
        None if error.is_retryable() => ErrorCode::Timeout,
        None => ErrorCode::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_a_refusal_to_retry_not_a_failed_log() {
        let refusal = Refusal::Log(LogError::DiskFull {
            path: "/data/streams/orders/0/00000000000000000000.log".into(),
        });
        assert_eq!(refusal.code(), ErrorCode::DiskHighWater);
        assert_eq!(refusal.code().retry_class(), floe_wire::RetryClass::Retry);
    }

    #[test]
    fn an_offset_out_of_range_carries_the_readable_range() {
        let refusal = Refusal::Log(LogError::OffsetOutOfRange {
            requested: Offset::new(9),
            log_start: Offset::new(2),
            log_end: Offset::new(5),
        });
        assert_eq!(refusal.code(), ErrorCode::OffsetOutOfRange);
        let Message::Error(response) = Message::from(refusal) else {
            panic!("not an error");
        };
        assert_eq!(
            response.details,
            Some(ErrorDetails::OffsetRange {
                log_start: Offset::new(2),
                log_end: Offset::new(5),
            })
        );
    }
}

//! The one place the broker's and the read replica's failures become wire error codes: every
//! refusal a client can receive is a [`Refusal`], and [`Refusal::code`] is the one exhaustive
//! match that names its code.

use floe_client::rest::RestError;
use floe_hot_log::LogError;
use floe_tier::TierError;
use floe_wire::admin::ApiErrorCode;
use floe_wire::frame::{
    ErrorCode, ErrorDetails, ErrorResponse, FrameError, Message, MessageType, NoCommonVersion,
    PayloadError,
};
use floe_wire::{Offset, StreamName};

use crate::partition::corrupt::CorruptPartition;
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
            Refusal::NotARequest(_) | Refusal::HelloRepeated => ErrorCode::InvalidRequest,
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
            _ => None,
        }
    }
}

impl From<Refusal> for Message {
    /// The `Error` message a client receives: the code, the error with its causes (never a
    /// local path beyond what the error itself names), and the details.
    fn from(refusal: Refusal) -> Message {
        Message::Error(ErrorResponse {
            code: refusal.code(),
            message: ErrorChain(&refusal).to_string(),
            details: refusal.details(),
        })
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

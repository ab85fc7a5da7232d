//! The one place log errors become wire error codes.

use floe_hot_log::LogError;
use floe_tier::TierError;
use floe_wire::Offset;
use floe_wire::frame::{ErrorCode, ErrorDetails, ErrorResponse, Message};

/// Maps a log error to the code a client acts on.
pub(crate) fn code(error: &LogError) -> ErrorCode {
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
        LogError::InvalidConfig(_) => ErrorCode::Internal,
        LogError::Failed { .. } | LogError::Io { .. } => ErrorCode::LogFailed,
        LogError::Closed => ErrorCode::ShuttingDown,
    }
}

/// An `Error` message for a log error, with the details a client can use.
pub(crate) fn message(error: &LogError) -> Message {
    let details = match error {
        LogError::OffsetOutOfRange {
            log_start, log_end, ..
        } => Some(ErrorDetails::OffsetRange {
            log_start: *log_start,
            log_end: *log_end,
        }),
        _ => None,
    };
    Message::Error(ErrorResponse {
        code: code(error),
        message: error.to_string(),
        details,
    })
}

/// An `Error` message for a failed tier read. `log_start` and `log_end` are the partition's
/// whole readable range, for an offset the tier no longer holds.
pub(crate) fn tier_message(error: &TierError, log_start: Offset, log_end: Offset) -> Message {
    let (code, details) = match error {
        TierError::OffsetOutOfRange { .. } | TierError::NotFound { .. } => (
            ErrorCode::OffsetOutOfRange,
            Some(ErrorDetails::OffsetRange { log_start, log_end }),
        ),
        TierError::Corrupt { .. } | TierError::InvalidManifest { .. } => {
            (ErrorCode::CorruptData, None)
        }
        TierError::Config(_) => (ErrorCode::Internal, None),
        _ => (ErrorCode::TierUnavailable, None),
    };
    Message::Error(ErrorResponse {
        code,
        message: format!("reading tiered history: {error}"),
        details,
    })
}

//! The one place log errors become wire error codes.

use floe_hot_log::LogError;
use floe_wire::frame::{ErrorCode, ErrorDetails, ErrorResponse, Message};

/// Maps a log error to the code a client acts on.
pub(crate) fn code(error: &LogError) -> ErrorCode {
    match error {
        LogError::InvalidBatch(_)
        | LogError::NotBatchBoundary { .. }
        | LogError::NonContiguous { .. } => ErrorCode::InvalidBatch,
        LogError::BatchTooLarge { .. } => ErrorCode::BatchTooLarge,
        LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
        LogError::StaleEpoch { .. } => ErrorCode::NotLeader,
        LogError::ProducerFenced { .. } => ErrorCode::ProducerFenced,
        LogError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequence,
        LogError::Corrupt { .. } | LogError::InvalidConfig(_) => ErrorCode::Internal,
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

//! What can go wrong reading or writing a frame, grouped by what the caller can do about it.
//!
//! - [`FrameError`]: the header is unacceptable. Framing of the byte stream is lost, so the
//!   reader answers on [`RequestId::CONNECTION`](super::RequestId::CONNECTION) if it can and
//!   closes the stream.
//! - [`PayloadError`]: the header was fine but the payload is not a valid message. The frame
//!   boundary is known, so the reader answers that request with an error and carries on.
//! - [`EncodeError`]: a message cannot be encoded (a field too long, a frame too large);
//!   nothing was written.
//!
//! Each maps to a wire [`ErrorCode`] in one exhaustive match.

use crate::{EndpointError, StreamNameError};

use super::batches::BatchFramingError;
use super::error_code::ErrorCode;
use super::header::MessageType;

/// The frame header is unacceptable; the stream cannot be read further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("bad frame magic {found:02x?}")]
    BadMagic {
        /// The bytes found where the magic belongs; zero-padded when fewer than 4 arrived.
        found: [u8; 4],
    },
    #[error("unsupported protocol version {version}")]
    UnsupportedVersion { version: u8 },
    #[error("unknown message type {message_type:#04x}")]
    UnknownMessageType { message_type: u8 },
    #[error("unknown flags {flags:#010b} on a {message_type:?} frame")]
    UnknownFlags {
        flags: u8,
        message_type: MessageType,
    },
    #[error("reserved header byte is {value:#04x}, not zero")]
    ReservedNotZero { value: u8 },
    #[error("frame of {frame_len} bytes exceeds the limit of {limit}")]
    FrameTooLarge { frame_len: u64, limit: u32 },
}

impl FrameError {
    /// The code to send the peer about this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            FrameError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            FrameError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            FrameError::BadMagic { .. }
            | FrameError::UnknownMessageType { .. }
            | FrameError::UnknownFlags { .. }
            | FrameError::ReservedNotZero { .. } => ErrorCode::Malformed,
        }
    }
}

/// The payload of a well-framed frame is not a valid message. Every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("payload is {actual} bytes but the header declares {declared}")]
    LengthMismatch { declared: u32, actual: usize },
    #[error("`{field}` needs {needed} bytes, {available} remain")]
    Truncated {
        field: &'static str,
        needed: usize,
        available: usize,
    },
    #[error("{extra} bytes after the last field")]
    TrailingBytes { extra: usize },
    #[error("`{field}` declares {count} entries, more than the {max} that can be present")]
    CountTooLarge {
        field: &'static str,
        count: u32,
        /// The smaller of what the remaining bytes could hold and the list limit.
        max: u64,
    },
    #[error("`{field}` is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("`{field}`: {source}")]
    InvalidStreamName {
        field: &'static str,
        source: StreamNameError,
    },
    #[error("`{field}`: {source}")]
    InvalidEndpoint {
        field: &'static str,
        source: EndpointError,
    },
    #[error("`{field}` has unknown tag {tag}")]
    InvalidTag { field: &'static str, tag: u8 },
    #[error("`{field}` holds unknown error code {code}")]
    UnknownErrorCode { field: &'static str, code: u16 },
    #[error("`{field}` is invalid: {reason}")]
    InvalidValue {
        field: &'static str,
        reason: &'static str,
    },
    #[error("record batches: {0}")]
    Batch(#[from] BatchFramingError),
}

impl PayloadError {
    /// The code to send the peer about this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            PayloadError::Batch(BatchFramingError::TooLarge { .. }) => ErrorCode::BatchTooLarge,
            PayloadError::Batch(
                BatchFramingError::Truncated { .. }
                | BatchFramingError::TooShort { .. }
                | BatchFramingError::LengthMismatch { .. },
            ) => ErrorCode::InvalidBatch,
            PayloadError::LengthMismatch { .. }
            | PayloadError::Truncated { .. }
            | PayloadError::TrailingBytes { .. }
            | PayloadError::CountTooLarge { .. }
            | PayloadError::InvalidUtf8 { .. }
            | PayloadError::InvalidStreamName { .. }
            | PayloadError::InvalidEndpoint { .. }
            | PayloadError::InvalidTag { .. }
            | PayloadError::UnknownErrorCode { .. }
            | PayloadError::InvalidValue { .. } => ErrorCode::Malformed,
        }
    }
}

/// A message cannot be encoded; the output buffer is left as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("`{field}` is {len} bytes, longer than {max}")]
    FieldTooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("`{field}` holds {count} entries, more than {max}")]
    TooManyEntries {
        field: &'static str,
        count: usize,
        max: u32,
    },
    #[error("`{field}` is invalid: {reason}")]
    InvalidValue {
        field: &'static str,
        reason: &'static str,
    },
    #[error("record batches: {0}")]
    Batch(#[from] BatchFramingError),
    #[error("frame of {frame_len} bytes exceeds the format maximum of {max}")]
    FrameTooLarge { frame_len: u64, max: u32 },
}

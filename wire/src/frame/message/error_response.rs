//! `Error`: the answer to a request that failed as a whole.
//!
//! ```text
//! Error     u16 error_code (never 0), string message, u8 details kind, details
//! details   0 none
//!           1 offset range   u64 log_start, u64 log_end
//!           2 leader         u32 leader_epoch, option<string endpoint>
//!           3 retry after    u32 delay_ms
//! ```
//!
//! The frame header's request id names the failed request;
//! [`RequestId::CONNECTION`](crate::frame::RequestId::CONNECTION) means the connection as a
//! whole, after which the broker closes it.

use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::error_code::ErrorCode;
use crate::frame::payload::{PayloadReader, PayloadWriter};
use crate::{Endpoint, LeaderEpoch, Offset};

const DETAILS_NONE: u8 = 0;
const DETAILS_OFFSET_RANGE: u8 = 1;
const DETAILS_LEADER: u8 = 2;
const DETAILS_RETRY_AFTER: u8 = 3;

/// A failed request: what went wrong, for programs (the code) and for people (the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    pub code: ErrorCode,
    /// Human-readable context; never parsed by programs.
    pub message: String,
    /// Structured context a client can act on.
    pub details: Option<ErrorDetails>,
}

/// Structured context for an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorDetails {
    /// For `OffsetOutOfRange`: the readable range, `log_end` exclusive.
    OffsetRange { log_start: Offset, log_end: Offset },
    /// For `NotLeader`: the leader this broker knows of, if any, and its epoch.
    Leader {
        leader_epoch: LeaderEpoch,
        leader: Option<Endpoint>,
    },
    /// For `Throttled` and other transient errors: how long to back off.
    RetryAfter { delay_ms: u32 },
}

impl ErrorResponse {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.result_code(Some(self.code));
        out.bytes_u16("message", self.message.as_bytes())?;
        match &self.details {
            None => out.u8(DETAILS_NONE),
            Some(ErrorDetails::OffsetRange { log_start, log_end }) => {
                out.u8(DETAILS_OFFSET_RANGE);
                out.u64(log_start.get());
                out.u64(log_end.get());
            }
            Some(ErrorDetails::Leader {
                leader_epoch,
                leader,
            }) => {
                out.u8(DETAILS_LEADER);
                out.u32(leader_epoch.get());
                out.option(leader.as_ref(), |out, leader| {
                    out.bytes_u16("leader", leader.as_str().as_bytes())
                })?;
            }
            Some(ErrorDetails::RetryAfter { delay_ms }) => {
                out.u8(DETAILS_RETRY_AFTER);
                out.u32(*delay_ms);
            }
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<ErrorResponse, PayloadError> {
        let code = input
            .result_code("error_code")?
            .ok_or(PayloadError::InvalidValue {
                field: "error_code",
                reason: "an error response needs a nonzero code",
            })?;
        let message = input.string_u16("message")?;
        let details = match input.u8("details")? {
            DETAILS_NONE => None,
            DETAILS_OFFSET_RANGE => Some(ErrorDetails::OffsetRange {
                log_start: Offset::new(input.u64("log_start")?),
                log_end: Offset::new(input.u64("log_end")?),
            }),
            DETAILS_LEADER => Some(ErrorDetails::Leader {
                leader_epoch: input.leader_epoch("leader_epoch")?,
                leader: input.option("leader", |input| input.endpoint("leader"))?,
            }),
            DETAILS_RETRY_AFTER => Some(ErrorDetails::RetryAfter {
                delay_ms: input.u32("delay_ms")?,
            }),
            tag => {
                return Err(PayloadError::InvalidTag {
                    field: "details",
                    tag,
                });
            }
        };
        Ok(ErrorResponse {
            code,
            message,
            details,
        })
    }
}

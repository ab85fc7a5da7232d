//! The QUIC client protocol, version 1: frames, messages, error codes and limits.
//!
//! A frame is a fixed 20-byte [`FrameHeader`] followed by a payload whose layout the
//! message type fixes. This module is a pure codec: it never reads a socket or a clock, and
//! it decodes outside bytes without panicking and without allocating more than they justify.
//! `docs/protocol.md` is the specification; the constants and discriminants here are stable.
//!
//! Reading a stream takes two steps, so that a bad payload costs one request and not the
//! connection:
//!
//! 1. [`decode_frame`] (or a [`FrameDecoder`]) checks the header and cuts the frame out of
//!    the stream. A [`FrameError`] means framing is lost.
//! 2. [`Frame::message`] decodes the payload into a [`Message`]. A [`PayloadError`] is
//!    answered with an `Error` frame for that request id, and the stream goes on.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use floe_wire::frame::{self, FrameLimits, Message, ProtocolVersion, RequestId};
//! use floe_wire::frame::{DeleteStream};
//! use floe_wire::StreamName;
//!
//! let request = Message::DeleteStream(DeleteStream { name: StreamName::new("orders")? });
//! let mut buf = BytesMut::new();
//! request.encode(ProtocolVersion::V1, RequestId::new(7), &mut buf)?;
//!
//! let bytes: Bytes = buf.freeze();
//! let limits = FrameLimits::FORMAT_MAX;
//! let (frame, consumed) = frame::decode_frame(&bytes, &limits)?.expect("a whole frame");
//! assert_eq!(consumed, bytes.len());
//! assert_eq!(frame.header.request_id, RequestId::new(7));
//! assert_eq!(frame.message(&limits)?, request);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batches;
mod decoder;
mod error;
mod error_code;
mod header;
mod limits;
mod message;
mod payload;
mod version;

pub use batches::BatchFramingError;
pub use decoder::{FrameDecoder, bytes_needed, decode_frame};
pub use error::{EncodeError, FrameError, PayloadError};
pub use error_code::{ErrorCode, RetryClass};
pub use header::{
    FrameFlags, FrameHeader, HEADER_LEN, MAGIC, MAX_FRAME_BYTES, MessageType, RequestId,
};
pub use limits::{ConnectionLimits, FRAME_OVERHEAD_BYTES, FrameLimits};
pub use message::{
    AuthToken, BatchAck, CreateStream, CreateStreamResponse, DamagedRange, DeleteStream,
    DeleteStreamResponse, EncodedFrame, ErrorDetails, ErrorResponse, Fetch, FetchPosition,
    FetchResponse, Hello, HelloAck, Message, MetadataRequest, MetadataResponse, PartitionMetadata,
    Produce, ProduceAck, RepairPartition, RepairPartitionResponse, ReplicaAck, ReplicaAppend,
    ReplicaMismatch, ReplicaStale, StreamInfo, StreamMetadata, StreamSettings, UploadBacklog,
};
pub use version::{NoCommonVersion, ProtocolVersion, negotiate};

/// The TLS ALPN protocol id of the client protocol, version 1. A broker refuses any other
/// during the QUIC handshake, before any frame is exchanged.
pub const ALPN: &[u8] = b"floe/1";

use bytes::Bytes;

/// One frame cut from a stream: a validated header and its payload, not yet decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub header: FrameHeader,
    /// Exactly `header.payload_len` bytes, shared with the buffer the frame was read from.
    pub payload: Bytes,
}

impl Frame {
    /// Decodes the payload. See [`Message::decode`].
    pub fn message(&self, limits: &FrameLimits) -> Result<Message, PayloadError> {
        Message::decode(&self.header, self.payload.clone(), limits)
    }
}

//! The messages of the protocol, and how a whole frame is encoded from one and decoded into
//! one.
//!
//! Each message is a typed struct in a child module, with its payload layout in that module's
//! doc. [`Message`] ties them to their [`MessageType`] and to the frame header. Payloads are
//! fixed-width little-endian; see [`payload`](super::payload) for strings, options and lists.

mod error_response;
mod fetch;
mod handshake;
mod metadata;
mod produce;
mod repair;
mod replica;
mod stream_admin;

pub use error_response::{ErrorDetails, ErrorResponse};
pub use fetch::{Fetch, FetchPosition, FetchResponse};
pub use handshake::{AuthToken, Hello, HelloAck};
pub use metadata::{
    DamagedRange, MetadataRequest, MetadataResponse, PartitionMetadata, StreamInfo, StreamMetadata,
    UploadBacklog,
};
pub use produce::{BatchAck, Produce, ProduceAck};
pub use repair::{RepairPartition, RepairPartitionResponse};
pub use replica::{ReplicaAck, ReplicaAppend, ReplicaMismatch, ReplicaStale};
pub use stream_admin::{
    CreateStream, CreateStreamResponse, DeleteStream, DeleteStreamResponse, StreamSettings,
};

use bytes::{BufMut, Bytes, BytesMut};

use super::error::{EncodeError, PayloadError};
use super::header::{FrameFlags, FrameHeader, HEADER_LEN, MAX_FRAME_BYTES, MessageType, RequestId};
use super::limits::FrameLimits;
use super::payload::{PayloadReader, PayloadWriter};
use super::version::ProtocolVersion;

/// Any message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    HelloAck(HelloAck),
    MetadataRequest(MetadataRequest),
    MetadataResponse(MetadataResponse),
    /// Boxed: the rarest message is also the largest, and every `Message` would pay for it.
    CreateStream(Box<CreateStream>),
    CreateStreamResponse(CreateStreamResponse),
    DeleteStream(DeleteStream),
    DeleteStreamResponse(DeleteStreamResponse),
    Produce(Produce),
    ProduceAck(ProduceAck),
    Fetch(Fetch),
    FetchResponse(FetchResponse),
    RepairPartition(RepairPartition),
    RepairPartitionResponse(RepairPartitionResponse),
    Error(ErrorResponse),
    /// The peer protocol (replication), one-way on the peer port.
    ReplicaAppend(ReplicaAppend),
    ReplicaAck(ReplicaAck),
    ReplicaMismatch(ReplicaMismatch),
    ReplicaStale(ReplicaStale),
}

/// An encoded frame as chunks for a vectored write: the head (frame header and every field
/// before the batches), then the record batches exactly as the message held them. Writing
/// the chunks in order puts the frame on the wire without copying a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame {
    head: Bytes,
    bulk: Vec<Bytes>,
}

impl EncodedFrame {
    /// The frame header and the payload fields before the batches.
    pub fn head(&self) -> &Bytes {
        &self.head
    }

    /// The record batches that end the payload; empty for most messages.
    pub fn bulk(&self) -> &[Bytes] {
        &self.bulk
    }

    /// Bytes of the whole frame.
    pub fn frame_len(&self) -> usize {
        self.head.len() + self.bulk.iter().map(Bytes::len).sum::<usize>()
    }

    /// All chunks in wire order, head first.
    pub fn into_chunks(self) -> Vec<Bytes> {
        let mut chunks = Vec::with_capacity(1 + self.bulk.len());
        chunks.push(self.head);
        chunks.extend(self.bulk);
        chunks
    }
}

impl Message {
    /// The type in the frame header.
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::Hello(_) => MessageType::Hello,
            Message::HelloAck(_) => MessageType::HelloAck,
            Message::MetadataRequest(_) => MessageType::MetadataRequest,
            Message::MetadataResponse(_) => MessageType::MetadataResponse,
            Message::CreateStream(_) => MessageType::CreateStream,
            Message::CreateStreamResponse(_) => MessageType::CreateStreamResponse,
            Message::DeleteStream(_) => MessageType::DeleteStream,
            Message::DeleteStreamResponse(_) => MessageType::DeleteStreamResponse,
            Message::Produce(_) => MessageType::Produce,
            Message::ProduceAck(_) => MessageType::ProduceAck,
            Message::Fetch(_) => MessageType::Fetch,
            Message::FetchResponse(_) => MessageType::FetchResponse,
            Message::RepairPartition(_) => MessageType::RepairPartition,
            Message::RepairPartitionResponse(_) => MessageType::RepairPartitionResponse,
            Message::Error(_) => MessageType::Error,
            Message::ReplicaAppend(_) => MessageType::ReplicaAppend,
            Message::ReplicaAck(_) => MessageType::ReplicaAck,
            Message::ReplicaMismatch(_) => MessageType::ReplicaMismatch,
            Message::ReplicaStale(_) => MessageType::ReplicaStale,
        }
    }

    /// Appends the whole frame, header included, to `buf`. Record batches are copied once,
    /// straight into `buf`. On error `buf` is left as it was.
    ///
    /// Only the format's own maximum frame size is enforced here; a sender checks the frame
    /// against the peer's limits (see [`EncodedFrame::frame_len`] or the bytes appended).
    pub fn encode(
        &self,
        version: ProtocolVersion,
        request_id: RequestId,
        buf: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        let bulk = self.encode_head(version, request_id, buf)?;
        buf.reserve(bulk.iter().map(Bytes::len).sum());
        for chunk in &bulk {
            buf.put_slice(chunk);
        }
        Ok(())
    }

    /// Encodes the frame as chunks for a vectored write; record batches are shared, not
    /// copied.
    pub fn encode_chunks(
        &self,
        version: ProtocolVersion,
        request_id: RequestId,
    ) -> Result<EncodedFrame, EncodeError> {
        let mut head = BytesMut::new();
        let bulk = self.encode_head(version, request_id, &mut head)?;
        Ok(EncodedFrame {
            head: head.freeze(),
            bulk,
        })
    }

    /// Appends the header and the small fields to `buf` and returns the bulk chunks that
    /// must follow them.
    fn encode_head(
        &self,
        version: ProtocolVersion,
        request_id: RequestId,
        buf: &mut BytesMut,
    ) -> Result<Vec<Bytes>, EncodeError> {
        let start = buf.len();
        buf.put_bytes(0, HEADER_LEN);
        let mut out = PayloadWriter::new(buf);
        let written = self.write_payload(version, &mut out);
        let bulk = out.into_bulk();
        let head_payload_len = buf.len() - start - HEADER_LEN;
        let payload_len =
            head_payload_len as u64 + bulk.iter().map(|b| b.len() as u64).sum::<u64>();
        let frame_len = HEADER_LEN as u64 + payload_len;
        let checked = written.and_then(|()| {
            if frame_len > u64::from(MAX_FRAME_BYTES) {
                Err(EncodeError::FrameTooLarge {
                    frame_len,
                    max: MAX_FRAME_BYTES,
                })
            } else {
                Ok(())
            }
        });
        if let Err(error) = checked {
            buf.truncate(start);
            return Err(error);
        }
        let header = FrameHeader {
            version,
            message_type: self.message_type(),
            flags: FrameFlags::EMPTY,
            request_id,
            // Below MAX_FRAME_BYTES, checked above.
            payload_len: payload_len as u32,
        };
        buf[start..start + HEADER_LEN].copy_from_slice(&header.to_bytes());
        Ok(bulk)
    }

    fn write_payload(
        &self,
        version: ProtocolVersion,
        out: &mut PayloadWriter<'_>,
    ) -> Result<(), EncodeError> {
        match version {
            ProtocolVersion::V1 => match self {
                Message::Hello(m) => m.write(out),
                Message::HelloAck(m) => m.write(out),
                Message::MetadataRequest(m) => m.write(out),
                Message::MetadataResponse(m) => m.write(out),
                Message::CreateStream(m) => m.write(out),
                Message::CreateStreamResponse(m) => m.write(out),
                Message::DeleteStream(m) => m.write(out),
                Message::DeleteStreamResponse(m) => m.write(out),
                Message::Produce(m) => m.write(out),
                Message::ProduceAck(m) => m.write(out),
                Message::Fetch(m) => m.write(out),
                Message::FetchResponse(m) => m.write(out),
                Message::RepairPartition(m) => m.write(out),
                Message::RepairPartitionResponse(m) => m.write(out),
                Message::Error(m) => m.write(out),
                Message::ReplicaAppend(m) => m.write(out),
                Message::ReplicaAck(m) => m.write(out),
                Message::ReplicaMismatch(m) => m.write(out),
                Message::ReplicaStale(m) => m.write(out),
            },
        }
    }

    /// Decodes the payload of a frame whose header was accepted. `payload` must be exactly
    /// the header's payload length; byte strings and batches in the message are slices of it.
    ///
    /// Every length and count is checked against the bytes that remain and against `limits`
    /// before anything is allocated; the whole payload must be used.
    pub fn decode(
        header: &FrameHeader,
        payload: Bytes,
        limits: &FrameLimits,
    ) -> Result<Message, PayloadError> {
        if payload.len() != header.payload_len as usize {
            return Err(PayloadError::LengthMismatch {
                declared: header.payload_len,
                actual: payload.len(),
            });
        }
        let mut input = PayloadReader::new(payload, limits);
        let message = match header.version {
            ProtocolVersion::V1 => Self::read_v1(header.message_type, &mut input)?,
        };
        input.finish()?;
        Ok(message)
    }

    fn read_v1(
        message_type: MessageType,
        input: &mut PayloadReader,
    ) -> Result<Message, PayloadError> {
        Ok(match message_type {
            MessageType::Hello => Message::Hello(Hello::read(input)?),
            MessageType::HelloAck => Message::HelloAck(HelloAck::read(input)?),
            MessageType::MetadataRequest => Message::MetadataRequest(MetadataRequest::read(input)?),
            MessageType::MetadataResponse => {
                Message::MetadataResponse(MetadataResponse::read(input)?)
            }
            MessageType::CreateStream => {
                Message::CreateStream(Box::new(CreateStream::read(input)?))
            }
            MessageType::CreateStreamResponse => {
                Message::CreateStreamResponse(CreateStreamResponse::read(input)?)
            }
            MessageType::DeleteStream => Message::DeleteStream(DeleteStream::read(input)?),
            MessageType::DeleteStreamResponse => {
                Message::DeleteStreamResponse(DeleteStreamResponse::read(input)?)
            }
            MessageType::Produce => Message::Produce(Produce::read(input)?),
            MessageType::ProduceAck => Message::ProduceAck(ProduceAck::read(input)?),
            MessageType::Fetch => Message::Fetch(Fetch::read(input)?),
            MessageType::FetchResponse => Message::FetchResponse(FetchResponse::read(input)?),
            MessageType::RepairPartition => Message::RepairPartition(RepairPartition::read(input)?),
            MessageType::RepairPartitionResponse => {
                Message::RepairPartitionResponse(RepairPartitionResponse::read(input)?)
            }
            MessageType::Error => Message::Error(ErrorResponse::read(input)?),
            MessageType::ReplicaAppend => Message::ReplicaAppend(ReplicaAppend::read(input)?),
            MessageType::ReplicaAck => Message::ReplicaAck(ReplicaAck::read(input)?),
            MessageType::ReplicaMismatch => Message::ReplicaMismatch(ReplicaMismatch::read(input)?),
            MessageType::ReplicaStale => Message::ReplicaStale(ReplicaStale::read(input)?),
        })
    }
}

macro_rules! from_message {
    ($($variant:ident($message:ident)),*) => {$(
        impl From<$message> for Message {
            fn from(message: $message) -> Message {
                Message::$variant(message)
            }
        }
    )*};
}

from_message!(
    Hello(Hello),
    HelloAck(HelloAck),
    MetadataRequest(MetadataRequest),
    MetadataResponse(MetadataResponse),
    CreateStreamResponse(CreateStreamResponse),
    DeleteStream(DeleteStream),
    DeleteStreamResponse(DeleteStreamResponse),
    Produce(Produce),
    ProduceAck(ProduceAck),
    Fetch(Fetch),
    FetchResponse(FetchResponse),
    RepairPartition(RepairPartition),
    RepairPartitionResponse(RepairPartitionResponse),
    Error(ErrorResponse),
    ReplicaAppend(ReplicaAppend),
    ReplicaAck(ReplicaAck),
    ReplicaMismatch(ReplicaMismatch),
    ReplicaStale(ReplicaStale)
);

impl From<CreateStream> for Message {
    fn from(message: CreateStream) -> Message {
        Message::CreateStream(Box::new(message))
    }
}

//! The fixed 20-byte frame header: what a reader needs to find the next frame and decide,
//! before reading the payload, whether to accept it.
//!
//! ```text
//! offset size field
//!      0    4 magic           "FLOE" (0x46 0x4c 0x4f 0x45)
//!      4    1 version         protocol version of this frame
//!      5    1 message type    see [`MessageType`]
//!      6    1 flags           none defined in version 1: must be 0
//!      7    1 reserved        must be 0
//!      8    8 request id      u64 LE, chosen by the requester, echoed in the response
//!     16    4 payload length  u32 LE, bytes after the header
//! ```
//!
//! The positions and discriminants here are stable: they are the protocol.

use bytes::BufMut;

use super::error::FrameError;
use super::limits::FrameLimits;
use super::version::ProtocolVersion;

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"FLOE";
/// Length of the fixed frame header.
pub const HEADER_LEN: usize = 20;
/// The largest frame the format allows, header included; connections configure less.
pub const MAX_FRAME_BYTES: u32 = 64 * 1024 * 1024;

// Field positions after the magic (stable).
const VERSION_AT: usize = 4;
const TYPE_AT: usize = 5;
const FLAGS_AT: usize = 6;
const RESERVED_AT: usize = 7;
const REQUEST_ID_AT: usize = 8;
const PAYLOAD_LEN_AT: usize = 16;

/// The kind of message a frame carries. Requests have the high bit clear; responses, and
/// the error response, have it set. The discriminants are stable and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    Hello = 0x01,
    MetadataRequest = 0x02,
    CreateStream = 0x03,
    DeleteStream = 0x04,
    Produce = 0x05,
    Fetch = 0x06,
    RepairPartition = 0x07,
    /// Peer protocol (replication): one-way, never answered.
    ReplicaAppend = 0x10,
    ReplicaAck = 0x11,
    ReplicaMismatch = 0x12,
    ReplicaStale = 0x13,
    Error = 0x80,
    HelloAck = 0x81,
    MetadataResponse = 0x82,
    CreateStreamResponse = 0x83,
    DeleteStreamResponse = 0x84,
    ProduceAck = 0x85,
    FetchResponse = 0x86,
    RepairPartitionResponse = 0x87,
}

impl MessageType {
    /// Every message type, in discriminant order.
    pub const ALL: [MessageType; 19] = [
        MessageType::Hello,
        MessageType::MetadataRequest,
        MessageType::CreateStream,
        MessageType::DeleteStream,
        MessageType::Produce,
        MessageType::Fetch,
        MessageType::RepairPartition,
        MessageType::ReplicaAppend,
        MessageType::ReplicaAck,
        MessageType::ReplicaMismatch,
        MessageType::ReplicaStale,
        MessageType::Error,
        MessageType::HelloAck,
        MessageType::MetadataResponse,
        MessageType::CreateStreamResponse,
        MessageType::DeleteStreamResponse,
        MessageType::ProduceAck,
        MessageType::FetchResponse,
        MessageType::RepairPartitionResponse,
    ];

    /// The type with discriminant `value` in `version`, if there is one.
    pub fn from_u8(version: ProtocolVersion, value: u8) -> Option<MessageType> {
        match version {
            ProtocolVersion::V1 => MessageType::ALL.into_iter().find(|t| *t as u8 == value),
        }
    }

    /// The stable discriminant.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Whether the broker sends this type (a response), rather than the client (a request).
    pub fn is_response(self) -> bool {
        self.as_u8() & 0x80 != 0
    }
}

/// Per-frame flags. Version 1 defines none, so every bit must be zero; a later version may
/// define bits for some message types, and only a peer that negotiated it will see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FrameFlags(u8);

impl FrameFlags {
    /// No flag set.
    pub const EMPTY: FrameFlags = FrameFlags(0);

    /// The flag bits `message_type` may carry in `version`.
    pub fn known(version: ProtocolVersion, message_type: MessageType) -> FrameFlags {
        match (version, message_type) {
            (ProtocolVersion::V1, _) => FrameFlags::EMPTY,
        }
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

/// Correlates a response with its request. The requester picks ids, unique among its
/// requests in flight on the connection; the responder echoes them.
/// [`RequestId::CONNECTION`] is reserved for errors that concern the whole connection
/// rather than one request, so requests number from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RequestId(u64);

impl RequestId {
    /// The id of an error that answers no particular request.
    pub const CONNECTION: RequestId = RequestId(0);

    /// A request id from its raw value.
    pub const fn new(value: u64) -> RequestId {
        RequestId(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A decoded, validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub version: ProtocolVersion,
    pub message_type: MessageType,
    /// Only flags known for this version and type.
    pub flags: FrameFlags,
    pub request_id: RequestId,
    /// Bytes after the header; within the limits the header was decoded under.
    pub payload_len: u32,
}

impl FrameHeader {
    /// Decodes the header at the start of `bytes`.
    ///
    /// Returns `Ok(None)` while fewer than [`HEADER_LEN`] bytes are present, but rejects a
    /// wrong magic as soon as its first byte is, so garbage fails fast. Every field is
    /// checked, the payload length against `limits` included, from these 20 bytes alone:
    /// nothing is allocated or awaited for a frame that will be refused.
    pub fn decode(bytes: &[u8], limits: &FrameLimits) -> Result<Option<FrameHeader>, FrameError> {
        let present = bytes.len().min(MAGIC.len());
        if bytes[..present] != MAGIC[..present] {
            let mut found = [0u8; 4];
            found[..present].copy_from_slice(&bytes[..present]);
            return Err(FrameError::BadMagic { found });
        }
        let Some(head) = bytes.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let version =
            ProtocolVersion::from_u8(head[VERSION_AT]).ok_or(FrameError::UnsupportedVersion {
                version: head[VERSION_AT],
            })?;
        let message_type =
            MessageType::from_u8(version, head[TYPE_AT]).ok_or(FrameError::UnknownMessageType {
                message_type: head[TYPE_AT],
            })?;
        let flags = head[FLAGS_AT];
        if flags & !FrameFlags::known(version, message_type).bits() != 0 {
            return Err(FrameError::UnknownFlags {
                flags,
                message_type,
            });
        }
        if head[RESERVED_AT] != 0 {
            return Err(FrameError::ReservedNotZero {
                value: head[RESERVED_AT],
            });
        }
        let payload_len = u32::from_le_bytes([
            head[PAYLOAD_LEN_AT],
            head[PAYLOAD_LEN_AT + 1],
            head[PAYLOAD_LEN_AT + 2],
            head[PAYLOAD_LEN_AT + 3],
        ]);
        let frame_len = HEADER_LEN as u64 + u64::from(payload_len);
        let limit = limits.frame_bytes();
        if frame_len > u64::from(limit) {
            return Err(FrameError::FrameTooLarge { frame_len, limit });
        }
        let mut request_id = [0u8; 8];
        request_id.copy_from_slice(&head[REQUEST_ID_AT..REQUEST_ID_AT + 8]);
        Ok(Some(FrameHeader {
            version,
            message_type,
            flags: FrameFlags(flags),
            request_id: RequestId(u64::from_le_bytes(request_id)),
            payload_len,
        }))
    }

    /// The encoded header.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut head = [0u8; HEADER_LEN];
        {
            let mut out = &mut head[..];
            out.put_slice(&MAGIC);
            out.put_u8(self.version.as_u8());
            out.put_u8(self.message_type.as_u8());
            out.put_u8(self.flags.bits());
            out.put_u8(0);
            out.put_u64_le(self.request_id.get());
            out.put_u32_le(self.payload_len);
        }
        head
    }

    /// Bytes of the whole frame, header included.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }
}

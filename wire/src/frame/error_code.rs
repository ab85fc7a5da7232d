//! The error codes a broker sends, and what a client should do about each.
//!
//! Codes travel as a little-endian `u16`. They are stable: a discriminant is never
//! renumbered or reused. `0` is never an error code; lists of per-item results use it to mean
//! "no error". A code added later belongs to the protocol version that introduced it and is
//! sent only on connections that negotiated that version or a newer one, so a decoder may
//! reject codes it does not know.

use std::fmt;

/// What a client does when it receives an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryClass {
    /// Transient: retry the same request against the same broker after a backoff.
    Retry,
    /// The client's view of the cluster is stale: refresh metadata, then retry against the
    /// broker it names. A client bounds how often it does this before giving up.
    RefreshMetadata,
    /// Retrying the same request cannot succeed; report the error to the application.
    Fatal,
}

/// An error a broker reports, for a whole request or for one item of it (a stream in a
/// metadata response, a batch in a produce acknowledgement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    // Stable discriminants. 1–15: the frame or the request itself.
    /// A frame or payload could not be decoded.
    Malformed = 1,
    /// The frame's protocol version is not one the broker speaks, or `Hello` offered no
    /// version in common.
    UnsupportedVersion = 2,
    /// The frame exceeds the connection's `max_frame_bytes`.
    FrameTooLarge = 3,
    /// The request is well-formed but not acceptable (zero partitions, a setting out of
    /// range, a response type sent as a request, a second `Hello`…).
    InvalidRequest = 4,
    /// A request arrived before the `Hello` / `HelloAck` exchange completed.
    HandshakeRequired = 5,

    // 16–31: who is asking.
    /// No token, or one that is unknown or was revoked.
    Unauthorized = 16,
    /// The token is valid but its principal lacks the grant for this action on this stream;
    /// the details name both.
    Forbidden = 17,

    // 32–63: streams, partitions and leadership.
    /// No stream has this name (yet, as far as this broker knows).
    UnknownStream = 32,
    /// The stream has no partition with this id.
    UnknownPartition = 33,
    /// This broker does not lead the partition; the details may name the current leader.
    NotLeader = 34,
    /// The partition has no leader right now, e.g. during an election.
    LeaderNotAvailable = 35,
    /// A stream with this name already exists.
    StreamExists = 36,

    // 64–95: the data.
    /// The fetch position lies outside the partition's log; the details give its range.
    OffsetOutOfRange = 64,
    /// A record batch failed validation (checksum, structure, records).
    InvalidBatch = 65,
    /// A record batch exceeds the connection's `max_batch_bytes`.
    BatchTooLarge = 66,
    /// A newer epoch of this producer id exists; this producer must stop.
    ProducerFenced = 67,
    /// The batch's sequence does not follow the last one the partition accepted from this
    /// producer; batches were lost in between.
    OutOfOrderSequence = 68,
    /// Stored data (a segment or a tiered object) failed its checksum or structure checks;
    /// it is never served.
    CorruptData = 69,

    // 96–127: transient conditions.
    /// The broker sheds load (in-flight bytes, request rate): back off, then retry. The
    /// details may say how long.
    Throttled = 96,
    /// The broker's disk is past its high-water mark, or was full when the partition wrote;
    /// it refuses publishes until space is reclaimed rather than lose data.
    DiskHighWater = 97,
    /// The ack mode was not satisfied in time. The outcome of a publish is unknown; a retry
    /// with the same producer sequence is deduplicated.
    Timeout = 98,
    /// Too few replicas are in sync to satisfy the quorum.
    NotEnoughReplicas = 99,
    /// The broker is shutting down; its partitions move to other leaders.
    ShuttingDown = 100,
    /// The partition's log failed a write or fsync and refuses writes until it has been
    /// recovered, possibly under another leader.
    LogFailed = 101,
    /// History below the broker's local log could not be read from object storage right
    /// now (unreachable, slow or failing); retry.
    TierUnavailable = 102,
    /// The broker holds as many client connections as it allows, in all or from this
    /// source address. Sent only as the QUIC application close code of a connection refused
    /// at accept, the reason naming the limit; connect again later or to another broker.
    TooManyConnections = 103,
    /// A create would pass a limit of the cluster (partitions per broker, streams per
    /// principal); the message names it. Retry once streams are deleted, brokers added or
    /// the limit raised.
    LimitExceeded = 104,

    // 128–: the broker itself.
    /// An unexpected failure inside the broker.
    Internal = 128,
}

impl ErrorCode {
    /// Every code, in discriminant order.
    pub const ALL: [ErrorCode; 28] = [
        ErrorCode::Malformed,
        ErrorCode::UnsupportedVersion,
        ErrorCode::FrameTooLarge,
        ErrorCode::InvalidRequest,
        ErrorCode::HandshakeRequired,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::UnknownStream,
        ErrorCode::UnknownPartition,
        ErrorCode::NotLeader,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::StreamExists,
        ErrorCode::OffsetOutOfRange,
        ErrorCode::InvalidBatch,
        ErrorCode::BatchTooLarge,
        ErrorCode::ProducerFenced,
        ErrorCode::OutOfOrderSequence,
        ErrorCode::CorruptData,
        ErrorCode::Throttled,
        ErrorCode::DiskHighWater,
        ErrorCode::Timeout,
        ErrorCode::NotEnoughReplicas,
        ErrorCode::ShuttingDown,
        ErrorCode::LogFailed,
        ErrorCode::TierUnavailable,
        ErrorCode::TooManyConnections,
        ErrorCode::LimitExceeded,
        ErrorCode::Internal,
    ];

    /// The code with discriminant `value`, if there is one.
    pub fn from_u16(value: u16) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| *code as u16 == value)
    }

    /// The stable discriminant.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// What a client should do on receiving this code.
    pub fn retry_class(self) -> RetryClass {
        match self {
            ErrorCode::Throttled
            | ErrorCode::DiskHighWater
            | ErrorCode::Timeout
            | ErrorCode::NotEnoughReplicas
            | ErrorCode::TierUnavailable
            | ErrorCode::TooManyConnections
            | ErrorCode::LimitExceeded => RetryClass::Retry,
            ErrorCode::UnknownStream
            | ErrorCode::UnknownPartition
            | ErrorCode::NotLeader
            | ErrorCode::LeaderNotAvailable
            | ErrorCode::ShuttingDown
            | ErrorCode::LogFailed => RetryClass::RefreshMetadata,
            ErrorCode::Malformed
            | ErrorCode::UnsupportedVersion
            | ErrorCode::FrameTooLarge
            | ErrorCode::InvalidRequest
            | ErrorCode::HandshakeRequired
            | ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::StreamExists
            | ErrorCode::OffsetOutOfRange
            | ErrorCode::InvalidBatch
            | ErrorCode::BatchTooLarge
            | ErrorCode::ProducerFenced
            | ErrorCode::OutOfOrderSequence
            | ErrorCode::CorruptData
            | ErrorCode::Internal => RetryClass::Fatal,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?} ({})", self.as_u16())
    }
}

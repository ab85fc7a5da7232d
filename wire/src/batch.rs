//! The record-batch format, version 1: the unit of checksumming, storage, replication and
//! tiering.
//!
//! A batch is a fixed 64-byte little-endian header followed by its records. The leader stamps
//! the base offset and its leader epoch into the first 16 bytes, which the CRC does not cover,
//! so stamping never re-encodes or re-checksums the records. The CRC32C covers every byte from
//! the version field to the end of the batch. `docs/storage-format.md` has the diagram; the
//! constants below are persisted and stable.
//!
//! Decoding is zero-copy and bounded: [`RecordBatch::decode`] checks every length against the
//! bytes actually present before it looks further, never allocates, and returns a typed
//! [`BatchError`] on any bad input.

mod builder;
mod record;

pub use builder::{BatchBuilder, BuildError, Header, RecordFields, control_batch};
pub use record::{Headers, MIN_RECORD_LEN, Record, RecordFault, Records};

use bytes::Bytes;

use crate::{LeaderEpoch, Offset};

/// Length of the fixed batch header.
pub const HEADER_LEN: usize = 64;
/// The only batch format version this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// The largest batch the format allows; brokers and logs configure smaller limits.
pub const MAX_BATCH_BYTES: u32 = 32 * 1024 * 1024;
/// `producer_id` of a batch sent without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// `base_sequence` of a batch sent without idempotence.
pub const NO_SEQUENCE: i32 = -1;

// Field positions (stable: part of the persisted format).
const BASE_OFFSET_AT: usize = 0;
const BATCH_LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
const CRC_AT: usize = 16;
/// First byte covered by the CRC.
pub const CRC_COVERS_FROM: usize = 20;
const VERSION_AT: usize = 20;
const RESERVED_BYTE_AT: usize = 21;
const ATTRIBUTES_AT: usize = 22;
const RECORD_COUNT_AT: usize = 24;
const PRODUCER_EPOCH_AT: usize = 28;
const RESERVED_SHORT_AT: usize = 30;
const FIRST_TIMESTAMP_AT: usize = 32;
const MAX_TIMESTAMP_AT: usize = 40;
const PRODUCER_ID_AT: usize = 48;
const BASE_SEQUENCE_AT: usize = 56;
const RESERVED_INT_AT: usize = 60;

/// Attribute bit of a **control batch**: written by a partition's leader, never by a
/// producer, and skipped by consumers. Its offsets are taken like any batch's; its one record
/// names what it marks in its key (see [`ControlKind`]).
pub const ATTR_CONTROL: u16 = 1 << 4;

/// Attribute bits this version understands: bits 0–2 name the compression codec and only
/// `0` (none) exists so far; bit 4 is [`ATTR_CONTROL`]; every other bit must be zero.
const KNOWN_ATTRIBUTES: u16 = ATTR_CONTROL;

/// What a control batch marks: the key of its record is the version of the control record
/// (`u16`, 0) and then this kind (`u16`), both little-endian; its value is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ControlKind {
    /// A new leader's first entry of its epoch. Replication commits earlier epochs' entries
    /// only under an entry of the current epoch (`docs/replication.md`); this one lets a new
    /// leader commit the tail it inherited without waiting for a producer.
    EpochStart = 1,
}

/// Length of a control record's key.
const CONTROL_KEY_LEN: usize = 4;

impl ControlKind {
    /// The key of this kind's control record.
    pub fn key(self) -> [u8; CONTROL_KEY_LEN] {
        let mut key = [0u8; CONTROL_KEY_LEN];
        key[2..].copy_from_slice(&(self as u16).to_le_bytes());
        key
    }

    /// The kind a control record's key names, if this build knows it. Readers skip control
    /// batches of unknown kinds like any other.
    pub fn from_key(key: &[u8]) -> Option<ControlKind> {
        match key {
            [0, 0, 1, 0] => Some(ControlKind::EpochStart),
            _ => None,
        }
    }
}

/// Why bytes are not a valid record batch. Every variant says where and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {declared} outside {min}..={max}")]
    LengthOutOfRange { declared: u32, min: u32, max: u32 },
    #[error("batch declares {declared} bytes but {available} were given")]
    LengthMismatch { declared: u32, available: usize },
    #[error("unsupported batch format version {version} (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion { version: u8 },
    #[error("batch checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("unsupported batch attributes {attributes:#06x}")]
    UnsupportedAttributes { attributes: u16 },
    #[error("reserved batch header field `{field}` is not zero")]
    ReservedNotZero { field: &'static str },
    #[error("record count {count} impossible for a batch of {batch_length} bytes")]
    RecordCount { count: u32, batch_length: u32 },
    #[error("record {index}: {fault}")]
    Record { index: u32, fault: RecordFault },
    #[error("{extra} bytes after the last record")]
    TrailingBytes { extra: usize },
    #[error("max timestamp {declared} differs from the records' maximum {computed}")]
    MaxTimestamp { declared: i64, computed: i64 },
    #[error(
        "invalid producer fields: id {producer_id}, base sequence {base_sequence}, {count} records"
    )]
    ProducerFields {
        producer_id: i64,
        base_sequence: i32,
        count: u32,
    },
}

/// The decoded fixed header of a batch. Construct with [`BatchHeader::parse`] (structure only)
/// or through [`RecordBatch::decode`] (everything, checksum included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record; stamped by the leader.
    pub base_offset: Offset,
    /// Whole batch in bytes, header included.
    pub batch_length: u32,
    /// Epoch of the leader that assigned the offsets; stamped by the leader.
    pub leader_epoch: LeaderEpoch,
    /// CRC32C of bytes `[CRC_COVERS_FROM, batch_length)`.
    pub crc: u32,
    pub attributes: u16,
    /// At least 1.
    pub record_count: u32,
    pub producer_epoch: u16,
    /// Milliseconds since the Unix epoch; record timestamps are deltas from it.
    pub first_timestamp: i64,
    /// Largest record timestamp in the batch.
    pub max_timestamp: i64,
    /// [`NO_PRODUCER_ID`] unless the producer is idempotent.
    pub producer_id: i64,
    /// Sequence of the first record; [`NO_SEQUENCE`] unless the producer is idempotent.
    pub base_sequence: i32,
}

impl BatchHeader {
    /// Parses and checks the header's structure: enough bytes for the header, a batch length
    /// within bounds, a known version, zero reserved fields, known attributes and a plausible
    /// record count. Does not look at the records or the checksum.
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        let head: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(BatchError::Truncated {
                needed: HEADER_LEN,
                available: bytes.len(),
            })?;
        let batch_length = u32_at(head, BATCH_LENGTH_AT);
        let min = (HEADER_LEN + record::MIN_RECORD_LEN) as u32;
        if !(min..=MAX_BATCH_BYTES).contains(&batch_length) {
            return Err(BatchError::LengthOutOfRange {
                declared: batch_length,
                min,
                max: MAX_BATCH_BYTES,
            });
        }
        let version = head[VERSION_AT];
        if version != FORMAT_VERSION {
            return Err(BatchError::UnsupportedVersion { version });
        }
        for (field, nonzero) in [
            ("reserved byte", head[RESERVED_BYTE_AT] != 0),
            ("reserved short", u16_at(head, RESERVED_SHORT_AT) != 0),
            ("reserved int", u32_at(head, RESERVED_INT_AT) != 0),
        ] {
            if nonzero {
                return Err(BatchError::ReservedNotZero { field });
            }
        }
        let attributes = u16_at(head, ATTRIBUTES_AT);
        if attributes & !KNOWN_ATTRIBUTES != 0 {
            return Err(BatchError::UnsupportedAttributes { attributes });
        }
        let record_count = u32_at(head, RECORD_COUNT_AT);
        let room = (batch_length as usize - HEADER_LEN) / record::MIN_RECORD_LEN;
        if record_count == 0 || record_count as usize > room {
            return Err(BatchError::RecordCount {
                count: record_count,
                batch_length,
            });
        }
        let header = BatchHeader {
            base_offset: Offset::new(u64_at(head, BASE_OFFSET_AT)),
            batch_length,
            leader_epoch: LeaderEpoch::new(u32_at(head, LEADER_EPOCH_AT)),
            crc: u32_at(head, CRC_AT),
            attributes,
            record_count,
            producer_epoch: u16_at(head, PRODUCER_EPOCH_AT),
            first_timestamp: u64_at(head, FIRST_TIMESTAMP_AT) as i64,
            max_timestamp: u64_at(head, MAX_TIMESTAMP_AT) as i64,
            producer_id: u64_at(head, PRODUCER_ID_AT) as i64,
            base_sequence: u32_at(head, BASE_SEQUENCE_AT) as i32,
        };
        header.check_producer_fields()?;
        Ok(header)
    }

    fn check_producer_fields(&self) -> Result<(), BatchError> {
        if producer_fields_valid(self.producer_id, self.base_sequence, self.record_count) {
            Ok(())
        } else {
            Err(BatchError::ProducerFields {
                producer_id: self.producer_id,
                base_sequence: self.base_sequence,
                count: self.record_count,
            })
        }
    }

    /// Offset of the last record.
    pub fn last_offset(&self) -> Offset {
        Offset::new(
            self.base_offset
                .get()
                .saturating_add(u64::from(self.record_count.saturating_sub(1))),
        )
    }

    /// The offset after the last record.
    pub fn next_offset(&self) -> Offset {
        Offset::new(
            self.base_offset
                .get()
                .saturating_add(u64::from(self.record_count)),
        )
    }

    /// Whether this is a control batch ([`ATTR_CONTROL`]), which consumers skip.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether the batch carries idempotent-producer fields.
    pub fn has_producer(&self) -> bool {
        self.producer_id != NO_PRODUCER_ID
    }

    /// Sequence of the last record (meaningful only when [`Self::has_producer`]).
    pub fn last_sequence(&self) -> i32 {
        self.base_sequence
            .saturating_add(self.record_count.saturating_sub(1).min(i32::MAX as u32) as i32)
    }
}

/// Whether a batch of `record_count` records may carry these producer fields: either none
/// ([`NO_PRODUCER_ID`] with [`NO_SEQUENCE`]), or a non-negative id with a non-negative base
/// sequence that numbers every record without passing `i32::MAX`. The encoder and the decoder
/// share this rule so the builder cannot write a batch the decoder rejects.
pub(crate) fn producer_fields_valid(
    producer_id: i64,
    base_sequence: i32,
    record_count: u32,
) -> bool {
    match producer_id {
        NO_PRODUCER_ID => base_sequence == NO_SEQUENCE,
        id if id >= 0 => {
            base_sequence >= 0
                && i64::from(base_sequence) + i64::from(record_count) - 1 <= i64::from(i32::MAX)
        }
        _ => false,
    }
}

/// Reads the batch length from the start of `bytes`, if the length field is present. Lets a
/// reader of concatenated batches find boundaries before it has the whole batch.
pub fn peek_batch_length(bytes: &[u8]) -> Option<u32> {
    bytes
        .get(BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Writes the leader-assigned base offset and leader epoch into an encoded batch. These fields
/// sit before the checksummed range, so the batch stays valid.
pub fn stamp(
    batch: &mut [u8],
    base_offset: Offset,
    leader_epoch: LeaderEpoch,
) -> Result<(), BatchError> {
    let available = batch.len();
    let head = batch.get_mut(..HEADER_LEN).ok_or(BatchError::Truncated {
        needed: HEADER_LEN,
        available,
    })?;
    head[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.get().to_le_bytes());
    head[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&leader_epoch.get().to_le_bytes());
    Ok(())
}

/// The checksum the format stores for a batch: CRC32C of everything after the CRC field.
pub fn checksum(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_COVERS_FROM..).unwrap_or_default())
}

/// A fully validated batch over shared bytes. Cloning is cheap; records are read in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    header: BatchHeader,
    bytes: Bytes,
}

impl RecordBatch {
    /// Validates `bytes` as exactly one batch: header structure, length, checksum and every
    /// record. Never allocates and never panics, whatever the input.
    pub fn decode(bytes: Bytes) -> Result<RecordBatch, BatchError> {
        let header = validate(&bytes)?;
        if bytes.len() != header.batch_length as usize {
            return Err(BatchError::LengthMismatch {
                declared: header.batch_length,
                available: bytes.len(),
            });
        }
        Ok(RecordBatch { header, bytes })
    }

    /// Validates the batch at the start of `bytes` and returns it with the bytes that follow.
    pub fn decode_prefix(bytes: &Bytes) -> Result<(RecordBatch, Bytes), BatchError> {
        let header = validate(bytes)?;
        let length = header.batch_length as usize;
        let batch = RecordBatch {
            header,
            bytes: bytes.slice(..length),
        };
        Ok((batch, bytes.slice(length..)))
    }

    /// The header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch exactly as encoded.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Consumes the batch, returning its bytes.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// The records, in order, read in place. A control batch's records are markers, not
    /// data (see [`BatchHeader::is_control`]).
    pub fn records(&self) -> Records<'_> {
        Records::new(&self.bytes[HEADER_LEN..], self.header.record_count)
    }

    /// What a control batch marks: the kind its first record names, if this build knows it;
    /// `None` for any other batch.
    pub fn control_kind(&self) -> Option<ControlKind> {
        if !self.header.is_control() {
            return None;
        }
        self.records()
            .next()
            .and_then(|record| record.key)
            .and_then(ControlKind::from_key)
    }
}

/// Full validation of the batch at the start of `bytes`; returns its header.
///
/// Checks run cheapest first and each one bounds what the next may read: header structure,
/// declared length against the bytes present, checksum, then every record.
pub fn validate(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(bytes)?;
    let length = header.batch_length as usize;
    let batch = bytes.get(..length).ok_or(BatchError::Truncated {
        needed: length,
        available: bytes.len(),
    })?;
    let computed = checksum(batch);
    if computed != header.crc {
        return Err(BatchError::ChecksumMismatch {
            stored: header.crc,
            computed,
        });
    }
    let computed_max = record::validate_records(&batch[HEADER_LEN..], &header)?;
    if computed_max != header.max_timestamp {
        return Err(BatchError::MaxTimestamp {
            declared: header.max_timestamp,
            computed: computed_max,
        });
    }
    Ok(header)
}

fn u16_at(b: &[u8; HEADER_LEN], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8; HEADER_LEN], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8; HEADER_LEN], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Header layout used by the encoder; kept beside the decoder so the two cannot drift.
pub(crate) struct HeaderFields {
    pub batch_length: u32,
    pub attributes: u16,
    pub record_count: u32,
    pub producer_epoch: u16,
    pub first_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub base_sequence: i32,
}

impl HeaderFields {
    /// Writes the header (base offset and epoch zero) and then the CRC over `batch`.
    pub(crate) fn write(&self, batch: &mut [u8]) {
        let h = &mut batch[..HEADER_LEN];
        h.fill(0);
        h[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&self.batch_length.to_le_bytes());
        h[VERSION_AT] = FORMAT_VERSION;
        h[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&self.attributes.to_le_bytes());
        h[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&self.record_count.to_le_bytes());
        h[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2]
            .copy_from_slice(&self.producer_epoch.to_le_bytes());
        h[FIRST_TIMESTAMP_AT..FIRST_TIMESTAMP_AT + 8]
            .copy_from_slice(&self.first_timestamp.to_le_bytes());
        h[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8]
            .copy_from_slice(&self.max_timestamp.to_le_bytes());
        h[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&self.producer_id.to_le_bytes());
        h[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4]
            .copy_from_slice(&self.base_sequence.to_le_bytes());
        let crc = checksum(batch);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

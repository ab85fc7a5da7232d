//! Encoding a batch from records. Used by producers; the broker never re-encodes.

use bytes::{BufMut, Bytes, BytesMut};

use super::record::MIN_RECORD_LEN;
use super::{
    ATTR_CONTROL, ControlKind, HEADER_LEN, HeaderFields, MAX_BATCH_BYTES, NO_PRODUCER_ID,
    NO_SEQUENCE, producer_fields_valid,
};

/// Why a record cannot be added to a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("batch would grow to {would_be} bytes, over its limit of {limit}")]
    TooLarge { would_be: usize, limit: usize },
    #[error("a header name of {0} bytes is longer than 65535")]
    HeaderNameTooLong(usize),
    #[error("a record may carry at most 65535 headers, got {0}")]
    TooManyHeaders(usize),
    #[error("timestamp {timestamp} is too far from the batch's first timestamp {first}")]
    TimestampRange { timestamp: i64, first: i64 },
    #[error("the batch is empty")]
    Empty,
    #[error("producer sequence {base_sequence} + {count} records overflows")]
    SequenceOverflow { base_sequence: i32, count: u32 },
    #[error(
        "producer id {producer_id} with base sequence {base_sequence} is neither idempotent \
         (both non-negative) nor plain (both -1)"
    )]
    ProducerFields {
        producer_id: i64,
        base_sequence: i32,
    },
}

/// Builds one batch record by record.
///
/// ```
/// use floe_wire::{BatchBuilder, RecordBatch};
///
/// let mut builder = BatchBuilder::new(1 << 20);
/// builder.push(1_700_000_000_000, Some(b"user-1"), b"hello", &[("trace", b"abc")]).unwrap();
/// builder.push(1_700_000_000_005, None, b"world", &[]).unwrap();
/// let batch = RecordBatch::decode(builder.finish().unwrap()).unwrap();
/// assert_eq!(batch.header().record_count, 2);
/// assert_eq!(batch.records().nth(1).unwrap().value, b"world");
/// ```
#[derive(Debug)]
pub struct BatchBuilder {
    buf: BytesMut,
    limit: usize,
    record_count: u32,
    first_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: u16,
    base_sequence: i32,
    attributes: u16,
}

/// A control batch of `kind` at `timestamp` (ms): one record whose key names the kind, no
/// producer. Only a partition's leader writes one ([`super::ATTR_CONTROL`]).
pub fn control_batch(kind: ControlKind, timestamp: i64) -> Bytes {
    let mut builder = BatchBuilder::with_capacity(HEADER_LEN + MIN_RECORD_LEN + 4, 0);
    builder.attributes = ATTR_CONTROL;
    builder
        .push(timestamp, Some(&kind.key()), &[], &[])
        .and_then(|()| builder.finish())
        .expect("a control record fits any batch limit")
}

/// A record header as its producer holds it: a name and a value. Implemented for borrowed
/// pairs and for the owned `(String, Bytes)` pairs of a producer's records, so that a batch
/// is built from either without collecting the headers into another list first.
pub trait Header {
    fn name(&self) -> &str;
    fn value(&self) -> &[u8];
}

impl Header for (&str, &[u8]) {
    #[inline]
    fn name(&self) -> &str {
        self.0
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.1
    }
}

impl Header for (String, Bytes) {
    #[inline]
    fn name(&self) -> &str {
        &self.0
    }

    #[inline]
    fn value(&self) -> &[u8] {
        &self.1
    }
}

/// A record's fields, borrowed, checked once for what any batch requires of them (header
/// count and name lengths) and measured once: the bytes it takes in a batch.
#[derive(Debug)]
pub struct RecordFields<'a, H = (&'a str, &'a [u8])> {
    timestamp: i64,
    key: Option<&'a [u8]>,
    value: &'a [u8],
    headers: &'a [H],
    len: usize,
}

// Not derived: that would require `H: Copy`, and only a reference to the headers is copied.
impl<H> Clone for RecordFields<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H> Copy for RecordFields<'_, H> {}

impl<'a, H: Header> RecordFields<'a, H> {
    /// The fields of a record with an absolute timestamp in milliseconds; refused when no
    /// batch could hold its headers.
    #[inline]
    pub fn new(
        timestamp: i64,
        key: Option<&'a [u8]>,
        value: &'a [u8],
        headers: &'a [H],
    ) -> Result<RecordFields<'a, H>, BuildError> {
        if headers.len() > u16::MAX as usize {
            return Err(BuildError::TooManyHeaders(headers.len()));
        }
        if let Some(header) = headers.iter().find(|h| h.name().len() > u16::MAX as usize) {
            return Err(BuildError::HeaderNameTooLong(header.name().len()));
        }
        Ok(RecordFields {
            timestamp,
            key,
            value,
            headers,
            len: measure(key, value, headers),
        })
    }

    /// Bytes the record takes in a batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a record takes at least [`MIN_RECORD_LEN`] bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Milliseconds since the Unix epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }
}

/// Size a record takes in a batch.
#[inline]
fn measure<H: Header>(key: Option<&[u8]>, value: &[u8], headers: &[H]) -> usize {
    MIN_RECORD_LEN
        + key.map_or(0, <[u8]>::len)
        + value.len()
        + headers
            .iter()
            .map(|h| 2 + h.name().len() + 4 + h.value().len())
            .sum::<usize>()
}

impl BatchBuilder {
    /// A builder whose batch may grow to `max_batch_bytes` (capped by the format's limit).
    pub fn new(max_batch_bytes: usize) -> BatchBuilder {
        BatchBuilder::with_capacity(max_batch_bytes, 64 * 1024)
    }

    /// Like [`BatchBuilder::new`], with room for `capacity` bytes reserved up front (capped
    /// by the batch's limit), so that a batch expected to fill does not grow by copying.
    pub fn with_capacity(max_batch_bytes: usize, capacity: usize) -> BatchBuilder {
        let limit = max_batch_bytes.min(MAX_BATCH_BYTES as usize);
        let buf = BytesMut::with_capacity(capacity.clamp(HEADER_LEN, limit.max(HEADER_LEN)));
        BatchBuilder::with_buffer(max_batch_bytes, buf)
    }

    /// Like [`BatchBuilder::new`], building the batch in `buf` (cleared first), such as a
    /// buffer from a [`BufferPool`](crate::BufferPool).
    pub fn with_buffer(max_batch_bytes: usize, mut buf: BytesMut) -> BatchBuilder {
        let limit = max_batch_bytes.min(MAX_BATCH_BYTES as usize);
        buf.clear();
        buf.put_bytes(0, HEADER_LEN);
        BatchBuilder {
            buf,
            limit,
            record_count: 0,
            first_timestamp: 0,
            max_timestamp: i64::MIN,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: 0,
            base_sequence: NO_SEQUENCE,
            attributes: 0,
        }
    }

    /// Marks the batch as sent by an idempotent producer; `base_sequence` numbers its first
    /// record.
    pub fn producer(&mut self, producer_id: i64, producer_epoch: u16, base_sequence: i32) {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
    }

    /// Bytes the batch would have if finished now.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes the builder holds room for before it has to grow.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether no record has been pushed.
    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Records pushed so far.
    pub fn record_count(&self) -> u32 {
        self.record_count
    }

    /// Size a record takes in a batch.
    #[inline]
    pub fn record_len(key: Option<&[u8]>, value: &[u8], headers: &[(&str, &[u8])]) -> usize {
        measure(key, value, headers)
    }

    /// Appends a record with an absolute timestamp in milliseconds. On error the batch is
    /// unchanged.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(&str, &[u8])],
    ) -> Result<(), BuildError> {
        self.push_fields(&RecordFields::new(timestamp, key, value, headers)?)
    }

    /// Appends a record already checked and measured ([`RecordFields::new`]): what a
    /// producer uses when it needs the record's size before it picks a batch. On error
    /// the batch is unchanged.
    // Always inlined: a producer calls it once per record in a loop, and a call of its own
    // would save and reload the record's fields and the buffer's state every time.
    #[inline(always)]
    pub fn push_fields<H: Header>(
        &mut self,
        record: &RecordFields<'_, H>,
    ) -> Result<(), BuildError> {
        let RecordFields {
            timestamp,
            key,
            value,
            headers,
            len: record_len,
        } = *record;
        let would_be = self.buf.len() + record_len;
        if would_be > self.limit {
            return Err(BuildError::TooLarge {
                would_be,
                limit: self.limit,
            });
        }
        let first = if self.record_count == 0 {
            timestamp
        } else {
            self.first_timestamp
        };
        let delta = timestamp
            .checked_sub(first)
            .ok_or(BuildError::TimestampRange { timestamp, first })?;
        self.first_timestamp = first;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        // The length prefix excludes itself; all lengths fit in u32 because the batch limit
        // does. Room for the whole record is taken once, and the fixed fields up to the
        // value's length go in one write when there is no key (the common case).
        self.buf.reserve(record_len);
        let mut fixed = [0u8; 24];
        fixed[0..4].copy_from_slice(&((record_len - 4) as u32).to_le_bytes());
        fixed[4..8].copy_from_slice(&self.record_count.to_le_bytes());
        fixed[8..16].copy_from_slice(&delta.to_le_bytes());
        match key {
            Some(k) => {
                fixed[16..20].copy_from_slice(&(k.len() as i32).to_le_bytes());
                self.buf.extend_from_slice(&fixed[..20]);
                self.buf.extend_from_slice(k);
                self.buf
                    .extend_from_slice(&(value.len() as u32).to_le_bytes());
            }
            None => {
                fixed[16..20].copy_from_slice(&(-1i32).to_le_bytes());
                fixed[20..24].copy_from_slice(&(value.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(&fixed);
            }
        }
        self.buf.extend_from_slice(value);
        self.buf
            .extend_from_slice(&(headers.len() as u16).to_le_bytes());
        for header in headers {
            let (name, value) = (header.name(), header.value());
            self.buf.put_u16_le(name.len() as u16);
            self.buf.put_slice(name.as_bytes());
            self.buf.put_u32_le(value.len() as u32);
            self.buf.put_slice(value);
        }
        self.record_count += 1;
        Ok(())
    }

    /// Writes the header and checksum and returns the encoded batch, with base offset and
    /// leader epoch zero until a leader stamps them.
    pub fn finish(self) -> Result<Bytes, BuildError> {
        if self.record_count == 0 {
            return Err(BuildError::Empty);
        }
        if self.producer_id != NO_PRODUCER_ID
            && i64::from(self.base_sequence) + i64::from(self.record_count) - 1
                > i64::from(i32::MAX)
        {
            return Err(BuildError::SequenceOverflow {
                base_sequence: self.base_sequence,
                count: self.record_count,
            });
        }
        if !producer_fields_valid(self.producer_id, self.base_sequence, self.record_count) {
            return Err(BuildError::ProducerFields {
                producer_id: self.producer_id,
                base_sequence: self.base_sequence,
            });
        }
        let mut buf = self.buf;
        let fields = HeaderFields {
            batch_length: buf.len() as u32,
            attributes: self.attributes,
            record_count: self.record_count,
            producer_epoch: self.producer_epoch,
            first_timestamp: self.first_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: self.producer_id,
            base_sequence: self.base_sequence,
        };
        fields.write(&mut buf);
        Ok(buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordBatch;

    const T: i64 = 1_700_000_000_000;

    #[test]
    fn fields_no_batch_could_hold_are_refused_before_any_batch() {
        let name = "n".repeat(u16::MAX as usize + 1);
        let long = [(name.as_str(), &b"v"[..])];
        assert_eq!(
            RecordFields::new(T, None, b"x", &long).expect_err("a 65,536-byte header name"),
            BuildError::HeaderNameTooLong(u16::MAX as usize + 1)
        );
        let many = vec![("h", &b""[..]); u16::MAX as usize + 1];
        assert_eq!(
            RecordFields::new(T, None, b"x", &many).expect_err("65,536 headers"),
            BuildError::TooManyHeaders(u16::MAX as usize + 1)
        );
    }

    #[test]
    fn a_records_measured_length_is_what_it_takes_in_the_batch() -> Result<(), BuildError> {
        let headers = [("trace", &b"abc"[..]), ("", &b""[..])];
        for (key, value, headers) in [
            (None, &b""[..], &[][..]),
            (Some(&b"user-1"[..]), &b"hello"[..], &headers[..]),
            (Some(&b""[..]), &[7u8; 1024][..], &[][..]),
        ] {
            let fields = RecordFields::new(T, key, value, headers)?;
            let mut builder = BatchBuilder::new(1 << 20);
            let before = builder.len();
            builder.push_fields(&fields)?;
            assert_eq!(builder.len() - before, fields.len());
            let batch = RecordBatch::decode(builder.finish()?).expect("a built batch decodes");
            let record = batch.records().next().expect("one record");
            assert_eq!((record.key, record.value), (key, value));
        }
        Ok(())
    }

    #[test]
    fn a_record_over_the_batch_limit_leaves_the_batch_as_it_was() -> Result<(), BuildError> {
        let value = [1u8; 100];
        let fields: RecordFields<'_> = RecordFields::new(T, None, &value, &[])?;
        let mut builder = BatchBuilder::new(HEADER_LEN + fields.len() + 10);
        builder.push_fields(&fields)?;
        let len = builder.len();
        assert!(matches!(
            builder.push_fields(&fields),
            Err(BuildError::TooLarge { .. })
        ));
        assert_eq!((builder.len(), builder.record_count()), (len, 1));
        Ok(())
    }
}

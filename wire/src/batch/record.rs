//! Records inside a batch: layout, bounded parsing and zero-copy iteration.
//!
//! ```text
//! record := u32 length            bytes after this field
//!           u32 offset_delta      index of the record in its batch
//!           i64 timestamp_delta   ms, from the batch's first_timestamp
//!           i32 key_length        -1 = no key
//!           [key_length] key
//!           u32 value_length
//!           [value_length] value
//!           u16 header_count
//!           header_count × ( u16 name_length, name (UTF-8), u32 value_length, value )
//! ```

use super::{BatchError, BatchHeader};

/// Smallest possible record: all fixed fields, no key, empty value, no headers. So a batch
/// of `n` bytes holds at most `(n - HEADER_LEN) / MIN_RECORD_LEN` records.
pub const MIN_RECORD_LEN: usize = 4 + 4 + 8 + 4 + 4 + 2;

/// What is wrong with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordFault {
    #[error("field runs past the end of the record")]
    Truncated,
    #[error("record length {length} exceeds the {remaining} bytes left in the batch")]
    LengthOverrun { length: u32, remaining: usize },
    #[error("{unused} bytes inside the record were not used by its fields")]
    UnusedBytes { unused: usize },
    #[error("offset delta {found}, expected {expected}")]
    OffsetDelta { expected: u32, found: u32 },
    #[error("timestamp overflows")]
    TimestampOverflow,
    #[error("key length {0} is negative")]
    KeyLength(i32),
    #[error("header name is not UTF-8")]
    HeaderName,
}

/// One record, borrowed from its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Position within the batch: the record's offset is the batch base offset plus this.
    pub offset_delta: u32,
    /// Milliseconds from the batch's first timestamp.
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub headers: Headers<'a>,
}

/// The headers of a record: `(name, value)` pairs in the order they were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers<'a> {
    bytes: &'a [u8],
    remaining: u16,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let mut cursor = Cursor { bytes: self.bytes };
        // Validated when the batch was decoded; a failure here would be a bug, and ending the
        // iteration is the safe answer.
        let header = parse_header(&mut cursor).ok();
        debug_assert!(header.is_some(), "headers were validated at decode");
        self.remaining = if header.is_some() {
            self.remaining - 1
        } else {
            0
        };
        self.bytes = cursor.bytes;
        header
    }
}

/// Iterator over the records of a validated batch.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    bytes: &'a [u8],
    remaining: u32,
}

impl<'a> Records<'a> {
    pub(crate) fn new(bytes: &'a [u8], count: u32) -> Records<'a> {
        Records {
            bytes,
            remaining: count,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.remaining == 0 {
            return None;
        }
        match parse_record(self.bytes) {
            Ok((record, rest)) => {
                self.bytes = rest;
                self.remaining -= 1;
                Some(record)
            }
            Err(_) => {
                debug_assert!(false, "records were validated at decode");
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

/// Checks every record of a batch and returns the largest record timestamp.
pub(crate) fn validate_records(mut bytes: &[u8], header: &BatchHeader) -> Result<i64, BatchError> {
    let mut max_timestamp = i64::MIN;
    for index in 0..header.record_count {
        let fault = |fault| BatchError::Record { index, fault };
        let (record, rest) = parse_record(bytes).map_err(fault)?;
        if record.offset_delta != index {
            return Err(fault(RecordFault::OffsetDelta {
                expected: index,
                found: record.offset_delta,
            }));
        }
        let timestamp = header
            .first_timestamp
            .checked_add(record.timestamp_delta)
            .ok_or(fault(RecordFault::TimestampOverflow))?;
        max_timestamp = max_timestamp.max(timestamp);
        // Header names must be UTF-8: walk them once here so iteration cannot fail later.
        let mut cursor = Cursor {
            bytes: record.headers.bytes,
        };
        for _ in 0..record.headers.remaining {
            parse_header(&mut cursor).map_err(fault)?;
        }
        bytes = rest;
    }
    if !bytes.is_empty() {
        return Err(BatchError::TrailingBytes { extra: bytes.len() });
    }
    Ok(max_timestamp)
}

/// Parses one record at the start of `bytes`; returns it and the bytes after it.
fn parse_record(bytes: &[u8]) -> Result<(Record<'_>, &[u8]), RecordFault> {
    let mut outer = Cursor { bytes };
    let length = outer.u32()?;
    let body = outer
        .take(length as usize)
        .map_err(|_| RecordFault::LengthOverrun {
            length,
            remaining: outer.bytes.len(),
        })?;
    let rest = outer.bytes;
    let mut c = Cursor { bytes: body };
    let offset_delta = c.u32()?;
    let timestamp_delta = c.u64()? as i64;
    let key = match c.u32()? as i32 {
        -1 => None,
        n if n < 0 => return Err(RecordFault::KeyLength(n)),
        n => Some(c.take(n as usize)?),
    };
    let value_length = c.u32()?;
    let value = c.take(value_length as usize)?;
    let header_count = c.u16()?;
    let headers = Headers {
        bytes: c.bytes,
        remaining: header_count,
    };
    // Skip the headers to find where they end; their contents are checked separately.
    for _ in 0..header_count {
        let name_length = c.u16()?;
        c.take(name_length as usize)?;
        let value_length = c.u32()?;
        c.take(value_length as usize)?;
    }
    if !c.bytes.is_empty() {
        return Err(RecordFault::UnusedBytes {
            unused: c.bytes.len(),
        });
    }
    let record = Record {
        offset_delta,
        timestamp_delta,
        key,
        value,
        headers,
    };
    Ok((record, rest))
}

fn parse_header<'a>(c: &mut Cursor<'a>) -> Result<(&'a str, &'a [u8]), RecordFault> {
    let name_length = c.u16()?;
    let name =
        std::str::from_utf8(c.take(name_length as usize)?).map_err(|_| RecordFault::HeaderName)?;
    let value_length = c.u32()?;
    let value = c.take(value_length as usize)?;
    Ok((name, value))
}

/// A bounds-checked little-endian reader over a slice.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordFault> {
        if n > self.bytes.len() {
            return Err(RecordFault::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordFault> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, RecordFault> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, RecordFault> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, RecordFault> {
        self.array().map(u64::from_le_bytes)
    }
}

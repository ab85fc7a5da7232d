//! Bounded little-endian reading and writing of payload fields.
//!
//! The reader slices its input (`Bytes`), so byte strings and batches are never copied, and
//! checks every length and count against the bytes that remain before it takes or allocates
//! anything. The writer is the reader's mirror; bulk data (record batches) goes into separate
//! chunks so that it can be written without copying. Field layouts:
//!
//! ```text
//! string / bytes   u16 length, then that many bytes (UTF-8 for strings)
//! option<T>        u8 tag: 0 absent, 1 present followed by T
//! list<T>          u32 count, then count × T
//! result code      u16: 0 = success, else an error code
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::{AckMode, Endpoint, LeaderEpoch, StreamName};

use super::error::{EncodeError, PayloadError};
use super::error_code::ErrorCode;
use super::limits::FrameLimits;

const ABSENT: u8 = 0;
const PRESENT: u8 = 1;

/// Reads payload fields in order from shared bytes.
#[derive(Debug)]
pub(crate) struct PayloadReader {
    bytes: Bytes,
    limits: FrameLimits,
}

impl PayloadReader {
    pub(crate) fn new(bytes: Bytes, limits: &FrameLimits) -> PayloadReader {
        PayloadReader {
            bytes,
            limits: *limits,
        }
    }

    pub(crate) fn limits(&self) -> &FrameLimits {
        &self.limits
    }

    /// The bytes not read yet.
    pub(crate) fn remaining(&self) -> &[u8] {
        &self.bytes
    }

    /// The next `n` bytes, as a slice of the input.
    pub(crate) fn take(&mut self, field: &'static str, n: usize) -> Result<Bytes, PayloadError> {
        if n > self.bytes.len() {
            return Err(PayloadError::Truncated {
                field,
                needed: n,
                available: self.bytes.len(),
            });
        }
        Ok(self.bytes.split_to(n))
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], PayloadError> {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.take(field, N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, PayloadError> {
        self.array::<1>(field).map(|[b]| b)
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, PayloadError> {
        self.array(field).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, PayloadError> {
        self.array(field).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, PayloadError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// A leader epoch: a `u32`.
    pub(crate) fn leader_epoch(
        &mut self,
        field: &'static str,
    ) -> Result<LeaderEpoch, PayloadError> {
        self.u32(field).map(LeaderEpoch::new)
    }

    pub(crate) fn ack_mode(&mut self, field: &'static str) -> Result<AckMode, PayloadError> {
        let tag = self.u8(field)?;
        AckMode::from_u8(tag).ok_or(PayloadError::InvalidTag { field, tag })
    }

    /// A u16-length-prefixed byte string, sliced from the input.
    pub(crate) fn bytes_u16(&mut self, field: &'static str) -> Result<Bytes, PayloadError> {
        let len = self.u16(field)?;
        self.take(field, usize::from(len))
    }

    /// A u16-length-prefixed UTF-8 string. The copy is bounded by the bytes present.
    pub(crate) fn string_u16(&mut self, field: &'static str) -> Result<String, PayloadError> {
        let bytes = self.bytes_u16(field)?;
        std::str::from_utf8(&bytes)
            .map(str::to_owned)
            .map_err(|_| PayloadError::InvalidUtf8 { field })
    }

    pub(crate) fn stream_name(&mut self, field: &'static str) -> Result<StreamName, PayloadError> {
        let bytes = self.bytes_u16(field)?;
        StreamName::from_utf8(&bytes)
            .map_err(|source| PayloadError::InvalidStreamName { field, source })
    }

    pub(crate) fn endpoint(&mut self, field: &'static str) -> Result<Endpoint, PayloadError> {
        let bytes = self.bytes_u16(field)?;
        Endpoint::from_utf8(&bytes)
            .map_err(|source| PayloadError::InvalidEndpoint { field, source })
    }

    /// A list count, accepted only if `count` entries of at least `min_entry_len` bytes fit
    /// in what remains and the count is within the list limit. Callers may then allocate
    /// `count` entries.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        min_entry_len: usize,
    ) -> Result<u32, PayloadError> {
        let count = self.u32(field)?;
        let fit = (self.bytes.len() / min_entry_len.max(1)) as u64;
        let max = fit.min(u64::from(self.limits.max_list_entries));
        if u64::from(count) > max {
            return Err(PayloadError::CountTooLarge { field, count, max });
        }
        Ok(count)
    }

    /// An optional value: a presence tag, then the value if present.
    pub(crate) fn option<T>(
        &mut self,
        field: &'static str,
        read: impl FnOnce(&mut PayloadReader) -> Result<T, PayloadError>,
    ) -> Result<Option<T>, PayloadError> {
        match self.u8(field)? {
            ABSENT => Ok(None),
            PRESENT => read(self).map(Some),
            tag => Err(PayloadError::InvalidTag { field, tag }),
        }
    }

    /// A result code: `None` for success, else a known error code.
    pub(crate) fn result_code(
        &mut self,
        field: &'static str,
    ) -> Result<Option<ErrorCode>, PayloadError> {
        match self.u16(field)? {
            0 => Ok(None),
            code => ErrorCode::from_u16(code)
                .map(Some)
                .ok_or(PayloadError::UnknownErrorCode { field, code }),
        }
    }

    /// Succeeds only if every byte was read.
    pub(crate) fn finish(self) -> Result<(), PayloadError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(PayloadError::TrailingBytes {
                extra: self.bytes.len(),
            })
        }
    }
}

/// Writes payload fields: small fields into the frame's head buffer, bulk data as separate
/// chunks that follow it.
#[derive(Debug)]
pub(crate) struct PayloadWriter<'a> {
    head: &'a mut BytesMut,
    bulk: Vec<Bytes>,
}

impl<'a> PayloadWriter<'a> {
    pub(crate) fn new(head: &'a mut BytesMut) -> PayloadWriter<'a> {
        PayloadWriter {
            head,
            bulk: Vec::new(),
        }
    }

    /// The bulk chunks written, in order.
    pub(crate) fn into_bulk(self) -> Vec<Bytes> {
        self.bulk
    }

    fn head(&mut self) -> &mut BytesMut {
        // Bulk data ends the payload; a field after it would land in the wrong place.
        debug_assert!(
            self.bulk.is_empty(),
            "payload field written after bulk data"
        );
        self.head
    }

    pub(crate) fn u8(&mut self, value: u8) {
        self.head().put_u8(value);
    }

    pub(crate) fn u16(&mut self, value: u16) {
        self.head().put_u16_le(value);
    }

    pub(crate) fn u32(&mut self, value: u32) {
        self.head().put_u32_le(value);
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.head().put_u64_le(value);
    }

    /// A u16-length-prefixed byte string.
    pub(crate) fn bytes_u16(
        &mut self,
        field: &'static str,
        value: &[u8],
    ) -> Result<(), EncodeError> {
        let len = u16::try_from(value.len()).map_err(|_| EncodeError::FieldTooLong {
            field,
            len: value.len(),
            max: usize::from(u16::MAX),
        })?;
        self.u16(len);
        self.head().put_slice(value);
        Ok(())
    }

    /// A list count.
    pub(crate) fn count(&mut self, field: &'static str, count: usize) -> Result<(), EncodeError> {
        let value = u32::try_from(count).map_err(|_| EncodeError::TooManyEntries {
            field,
            count,
            max: u32::MAX,
        })?;
        self.u32(value);
        Ok(())
    }

    /// An optional value: a presence tag, then the value if present.
    pub(crate) fn option<T>(
        &mut self,
        value: Option<&T>,
        write: impl FnOnce(&mut PayloadWriter<'a>, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        match value {
            None => {
                self.u8(ABSENT);
                Ok(())
            }
            Some(value) => {
                self.u8(PRESENT);
                write(self, value)
            }
        }
    }

    /// A result code: 0 for success, else the error code.
    pub(crate) fn result_code(&mut self, code: Option<ErrorCode>) {
        self.u16(code.map_or(0, ErrorCode::as_u16));
    }

    /// Bulk data, appended after every other field without being copied here.
    pub(crate) fn bulk(&mut self, chunk: Bytes) {
        self.bulk.push(chunk);
    }
}

/// Turns an invariant check's failure into the decoder's error.
pub(crate) fn invalid_payload((field, reason): (&'static str, &'static str)) -> PayloadError {
    PayloadError::InvalidValue { field, reason }
}

/// Turns an invariant check's failure into the encoder's error.
pub(crate) fn invalid_message((field, reason): (&'static str, &'static str)) -> EncodeError {
    EncodeError::InvalidValue { field, reason }
}

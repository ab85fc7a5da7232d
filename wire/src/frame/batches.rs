//! Framing of record batches inside Produce and FetchResponse payloads: lengths only.
//!
//! Each batch states its own length (see [`batch::peek_batch_length`]). Here we only check
//! that those lengths cut the payload into whole batches within the limits, so each batch can
//! travel on as a zero-copy slice. Checksums and records are the receiver's business
//! ([`crate::RecordBatch`]); this module never reads past a length field.

use crate::batch;

/// Batches in a payload do not frame correctly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchFramingError {
    #[error("batch {index} needs {needed} bytes, {available} remain")]
    Truncated {
        index: u32,
        needed: u64,
        available: usize,
    },
    #[error("batch {index} declares {declared} bytes, less than a batch header")]
    TooShort { index: u32, declared: u32 },
    #[error("batch {index} of {length} bytes exceeds the limit of {limit}")]
    TooLarge { index: u32, length: u32, limit: u32 },
    #[error("batch {index} declares {declared} bytes but holds {actual}")]
    LengthMismatch {
        index: u32,
        declared: u32,
        actual: usize,
    },
}

/// The length of the batch at the start of `bytes`, checked against the bytes present and
/// `limit`.
pub(crate) fn frame_one(bytes: &[u8], index: u32, limit: u32) -> Result<usize, BatchFramingError> {
    let truncated = |needed: u64| BatchFramingError::Truncated {
        index,
        needed,
        available: bytes.len(),
    };
    let length = match batch::peek_batch_length(bytes) {
        Some(length) if bytes.len() >= batch::HEADER_LEN => length,
        _ => return Err(truncated(batch::HEADER_LEN as u64)),
    };
    if (length as usize) < batch::HEADER_LEN {
        return Err(BatchFramingError::TooShort {
            index,
            declared: length,
        });
    }
    if length > limit {
        return Err(BatchFramingError::TooLarge {
            index,
            length,
            limit,
        });
    }
    if length as usize > bytes.len() {
        return Err(truncated(u64::from(length)));
    }
    Ok(length as usize)
}

/// Checks that `bytes` is exactly one batch within `limit`, as an encoder must before it
/// sends it.
pub(crate) fn check_exact(bytes: &[u8], index: u32, limit: u32) -> Result<(), BatchFramingError> {
    let length = frame_one(bytes, index, limit)?;
    if length != bytes.len() {
        return Err(BatchFramingError::LengthMismatch {
            index,
            declared: length as u32,
            actual: bytes.len(),
        });
    }
    Ok(())
}

/// Checks that `bytes` is a sequence of whole batches within `limit`; returns how many.
pub(crate) fn check_sequence(mut bytes: &[u8], limit: u32) -> Result<u32, BatchFramingError> {
    let mut count = 0u32;
    while !bytes.is_empty() {
        let length = frame_one(bytes, count, limit)?;
        bytes = &bytes[length..];
        count = count.saturating_add(1);
    }
    Ok(count)
}

//! `Produce` and `ProduceAck`: publishing record batches to one partition.
//!
//! ```text
//! Produce      string stream, u32 partition, u32 batch_count (≥ 1),
//!              batch_count × record batch, back to back, each framed by its own length
//! ProduceAck   list<result>, one per batch in the order sent
//!   result     u16 result code, and when it is 0: u64 base_offset, u64 last_offset
//! ```
//!
//! The batches carry the producer id, epoch and sequence; this layer only frames them. The
//! broker validates each with [`crate::RecordBatch`] and stamps offsets into the same bytes.

use bytes::Bytes;

use crate::batch;
use crate::frame::batches;
use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::error_code::ErrorCode;
use crate::frame::payload::{PayloadReader, PayloadWriter, invalid_message, invalid_payload};
use crate::{Offset, PartitionId, StreamName};

/// Smallest result entry: an error code alone.
const MIN_RESULT_ENTRY_LEN: usize = 2;

/// Publishes one or more record batches to a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produce {
    pub stream: StreamName,
    pub partition: PartitionId,
    /// At least one; each exactly one encoded batch. Decoded batches are slices of the frame,
    /// and encoding sends them without copying them into the head buffer.
    pub batches: Vec<Bytes>,
}

/// The outcome for each batch of a `Produce`, in the order the batches were sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceAck {
    pub results: Vec<Result<BatchAck, ErrorCode>>,
}

/// Where an accepted batch landed. For a retried batch the leader recognised by its producer
/// sequence, these are the offsets it got the first time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchAck {
    pub base_offset: Offset,
    /// Not below `base_offset`.
    pub last_offset: Offset,
}

impl BatchAck {
    fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if self.last_offset < self.base_offset {
            Err(("last_offset", "below base_offset"))
        } else {
            Ok(())
        }
    }
}

impl Produce {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        if self.batches.is_empty() {
            return Err(invalid_message((
                "batches",
                "a produce carries at least one batch",
            )));
        }
        for (index, bytes) in self.batches.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            batches::check_exact(bytes, index, batch::MAX_BATCH_BYTES)?;
        }
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.count("batches", self.batches.len())?;
        for bytes in &self.batches {
            out.bulk(bytes.clone());
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<Produce, PayloadError> {
        let stream = input.stream_name("stream")?;
        let partition = PartitionId::new(input.u32("partition")?);
        let count = input.count("batches", batch::HEADER_LEN)?;
        if count == 0 {
            return Err(invalid_payload((
                "batches",
                "a produce carries at least one batch",
            )));
        }
        let limit = input.limits().batch_bytes();
        let mut batches = Vec::with_capacity(count as usize);
        for index in 0..count {
            let length = batches::frame_one(input.remaining(), index, limit)?;
            batches.push(input.take("batch", length)?);
        }
        Ok(Produce {
            stream,
            partition,
            batches,
        })
    }
}

impl ProduceAck {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.count("results", self.results.len())?;
        for result in &self.results {
            match result {
                Err(code) => out.result_code(Some(*code)),
                Ok(ack) => {
                    ack.check().map_err(invalid_message)?;
                    out.result_code(None);
                    out.u64(ack.base_offset.get());
                    out.u64(ack.last_offset.get());
                }
            }
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<ProduceAck, PayloadError> {
        let count = input.count("results", MIN_RESULT_ENTRY_LEN)?;
        let mut results = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let result = match input.result_code("error_code")? {
                Some(code) => Err(code),
                None => {
                    let ack = BatchAck {
                        base_offset: Offset::new(input.u64("base_offset")?),
                        last_offset: Offset::new(input.u64("last_offset")?),
                    };
                    ack.check().map_err(invalid_payload)?;
                    Ok(ack)
                }
            };
            results.push(result);
        }
        Ok(ProduceAck { results })
    }
}

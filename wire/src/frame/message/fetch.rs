//! `Fetch` and `FetchResponse`: reading committed record batches from one partition.
//!
//! ```text
//! Fetch           string stream, u32 partition,
//!                 u8 position kind (0 offset, 1 earliest, 2 latest, 3 timestamp),
//!                 u64 position value (offset, or i64 ms for a timestamp; 0 otherwise),
//!                 u32 max_bytes, u32 max_wait_ms
//! FetchResponse   u64 log_start, u64 high_watermark, u64 next_offset,
//!                 u32 records_len, records_len bytes of whole stored batches
//! ```
//!
//! A consumer sees committed data only (below the high watermark); there is no isolation
//! setting to choose.

use bytes::Bytes;

use crate::batch;
use crate::frame::batches;
use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::payload::{PayloadReader, PayloadWriter};
use crate::{Offset, PartitionId, StreamName};

const POSITION_OFFSET: u8 = 0;
const POSITION_EARLIEST: u8 = 1;
const POSITION_LATEST: u8 = 2;
const POSITION_TIMESTAMP: u8 = 3;

/// Reads batches from a partition, starting at a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub position: FetchPosition,
    /// Soft cap on the records returned. The broker returns whole batches only, and at least
    /// one batch when one is available, even if it alone exceeds the cap, so a consumer
    /// always makes progress.
    pub max_bytes: u32,
    /// How long the broker may hold the request at the tail of the log waiting for data;
    /// 0 answers at once.
    pub max_wait_ms: u32,
}

/// Where a fetch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchPosition {
    /// At this offset; `OffsetOutOfRange` if it lies outside the log.
    Offset(Offset),
    /// At the first offset still readable.
    Earliest,
    /// At the high watermark: only records committed from now on.
    Latest,
    /// At the first batch whose records reach this time (ms since the Unix epoch).
    Timestamp(i64),
}

/// Committed batches of a partition, exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    pub log_start: Offset,
    pub high_watermark: Offset,
    /// Where the next fetch should start: after the last record returned, or the resolved
    /// start position when nothing was.
    pub next_offset: Offset,
    /// Whole stored batches, back to back, possibly none. A slice of the frame when decoded;
    /// sent as its own chunk when encoded. Iterate with
    /// [`RecordBatch::decode_prefix`](crate::RecordBatch::decode_prefix).
    pub records: Bytes,
}

impl Fetch {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        let (kind, value) = match self.position {
            FetchPosition::Offset(offset) => (POSITION_OFFSET, offset.get()),
            FetchPosition::Earliest => (POSITION_EARLIEST, 0),
            FetchPosition::Latest => (POSITION_LATEST, 0),
            FetchPosition::Timestamp(ms) => (POSITION_TIMESTAMP, ms as u64),
        };
        out.u8(kind);
        out.u64(value);
        out.u32(self.max_bytes);
        out.u32(self.max_wait_ms);
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<Fetch, PayloadError> {
        let stream = input.stream_name("stream")?;
        let partition = PartitionId::new(input.u32("partition")?);
        let kind = input.u8("position")?;
        let value = input.u64("position_value")?;
        let position = match (kind, value) {
            (POSITION_OFFSET, offset) => FetchPosition::Offset(Offset::new(offset)),
            (POSITION_EARLIEST, 0) => FetchPosition::Earliest,
            (POSITION_LATEST, 0) => FetchPosition::Latest,
            (POSITION_TIMESTAMP, ms) => FetchPosition::Timestamp(ms as i64),
            (POSITION_EARLIEST | POSITION_LATEST, _) => {
                return Err(PayloadError::InvalidValue {
                    field: "position_value",
                    reason: "must be 0 for earliest and latest",
                });
            }
            (tag, _) => {
                return Err(PayloadError::InvalidTag {
                    field: "position",
                    tag,
                });
            }
        };
        Ok(Fetch {
            stream,
            partition,
            position,
            max_bytes: input.u32("max_bytes")?,
            max_wait_ms: input.u32("max_wait_ms")?,
        })
    }
}

impl FetchResponse {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        // Stored batches may predate a lowered batch limit, so only the format's cap applies.
        batches::check_sequence(&self.records, batch::MAX_BATCH_BYTES)?;
        let records_len =
            u32::try_from(self.records.len()).map_err(|_| EncodeError::FieldTooLong {
                field: "records",
                len: self.records.len(),
                max: u32::MAX as usize,
            })?;
        out.u64(self.log_start.get());
        out.u64(self.high_watermark.get());
        out.u64(self.next_offset.get());
        out.u32(records_len);
        if !self.records.is_empty() {
            out.bulk(self.records.clone());
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<FetchResponse, PayloadError> {
        let log_start = Offset::new(input.u64("log_start")?);
        let high_watermark = Offset::new(input.u64("high_watermark")?);
        let next_offset = Offset::new(input.u64("next_offset")?);
        let records_len = input.u32("records_len")?;
        let records = input.take("records", records_len as usize)?;
        batches::check_sequence(&records, batch::MAX_BATCH_BYTES)?;
        Ok(FetchResponse {
            log_start,
            high_watermark,
            next_offset,
            records,
        })
    }
}

//! `RepairPartition` and its response: an operator's repair of a partition in the `corrupt`
//! state (its log holds damaged data that recovery did not cut). Without `discard_from` the
//! broker only says what a repair would discard; with it, it repairs — when, and only when,
//! `discard_from` is exactly the first offset the repair discards, so that nothing is cut
//! that the operator did not acknowledge.
//!
//! ```text
//! RepairPartition          string stream, u32 partition, option<u64 discard_from>
//! RepairPartitionResponse  string stream, u32 partition, u8 repaired (0 or 1),
//!                          u64 discard_from, u64 discarded_bytes, u32 discarded_segments,
//!                          u8 restart (0 or 1), string segment, u64 position,
//!                          string damage
//! ```

use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::payload::{PayloadReader, PayloadWriter, invalid_payload};
use crate::{Offset, PartitionId, StreamName};

/// Asks the broker holding a corrupt partition what a repair would discard, or, with
/// `discard_from`, to repair it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPartition {
    pub stream: StreamName,
    pub partition: PartitionId,
    /// The operator's acknowledgement: the first offset the repair discards, as a previous
    /// answer gave it. Absent: only plan.
    pub discard_from: Option<Offset>,
}

/// What a repair discards (or discarded, when `repaired`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPartitionResponse {
    pub stream: StreamName,
    pub partition: PartitionId,
    /// The repair was carried out: the partition serves again.
    pub repaired: bool,
    /// Every record at or after this offset is discarded; the log continues from it.
    pub discard_from: Offset,
    /// Bytes of segment data discarded.
    pub discarded_bytes: u64,
    /// Whole segment files discarded.
    pub discarded_segments: u32,
    /// The damaged range is still in object storage: the local log is dropped whole and
    /// starts again at `discard_from`, the end of the tiered history.
    pub restart: bool,
    /// The damaged segment's file name (never the server's path).
    pub segment: String,
    /// The first damaged byte in it.
    pub position: u64,
    /// What was found there.
    pub damage: String,
}

fn flag(input: &mut PayloadReader, field: &'static str) -> Result<bool, PayloadError> {
    match input.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(invalid_payload((field, "must be 0 or 1"))),
    }
}

impl RepairPartition {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.option(self.discard_from.as_ref(), |out, offset| {
            out.u64(offset.get());
            Ok(())
        })
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<RepairPartition, PayloadError> {
        Ok(RepairPartition {
            stream: input.stream_name("stream")?,
            partition: PartitionId::new(input.u32("partition")?),
            discard_from: input.option("discard_from", |input| {
                Ok(Offset::new(input.u64("discard_from")?))
            })?,
        })
    }
}

impl RepairPartitionResponse {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.u8(u8::from(self.repaired));
        out.u64(self.discard_from.get());
        out.u64(self.discarded_bytes);
        out.u32(self.discarded_segments);
        out.u8(u8::from(self.restart));
        out.bytes_u16("segment", self.segment.as_bytes())?;
        out.u64(self.position);
        out.bytes_u16("damage", self.damage.as_bytes())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<RepairPartitionResponse, PayloadError> {
        Ok(RepairPartitionResponse {
            stream: input.stream_name("stream")?,
            partition: PartitionId::new(input.u32("partition")?),
            repaired: flag(input, "repaired")?,
            discard_from: Offset::new(input.u64("discard_from")?),
            discarded_bytes: input.u64("discarded_bytes")?,
            discarded_segments: input.u32("discarded_segments")?,
            restart: flag(input, "restart")?,
            segment: input.string_u16("segment")?,
            position: input.u64("position")?,
            damage: input.string_u16("damage")?,
        })
    }
}

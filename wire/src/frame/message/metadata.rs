//! `MetadataRequest` and `MetadataResponse`: where each partition lives and how far its log
//! reaches.
//!
//! ```text
//! MetadataRequest    list<string stream>                  (empty list = every stream)
//! MetadataResponse   list<stream entry>
//!   stream entry     string name, u16 result code,
//!                    and when the code is 0: u8 ack_mode, u32 partition_count,
//!                                            settings (as in CreateStream),
//!                                            list<partition entry>
//!   partition entry  u32 id, option<string leader endpoint>, u32 leader_epoch,
//!                    u64 log_start, u64 high_watermark,
//!                    u64 local_start, u64 tier_end,
//!                    u64 upload_backlog_segments, u64 upload_backlog_bytes,
//!                    option<damaged range>
//!   damaged range    u64 start, option<u64 end>     (the partition is corrupt)
//! ```

use crate::frame::StreamSettings;
use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::error_code::ErrorCode;
use crate::frame::payload::{PayloadReader, PayloadWriter, invalid_message, invalid_payload};
use crate::{AckMode, Endpoint, LeaderEpoch, Offset, PartitionId, StreamName};

/// Smallest encoded stream name: a length and one byte.
const MIN_NAME_LEN: usize = 2 + 1;
/// Smallest stream entry: a name and an error code.
const MIN_STREAM_ENTRY_LEN: usize = MIN_NAME_LEN + 2;
/// Smallest partition entry: every fixed field and an absent leader.
const MIN_PARTITION_ENTRY_LEN: usize = 4 + 1 + 4 + 8 + 8 + 4 * 8 + 1;

/// Asks for the metadata of some streams, or of all of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataRequest {
    /// The streams wanted; empty means every stream.
    pub streams: Vec<StreamName>,
}

/// The metadata of the streams asked for, one entry per stream, in the order asked (all
/// streams in name order when none were named).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataResponse {
    pub streams: Vec<StreamMetadata>,
}

/// One stream's metadata, or why it cannot be given (e.g. [`ErrorCode::UnknownStream`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMetadata {
    pub name: StreamName,
    pub result: Result<StreamInfo, ErrorCode>,
}

/// What a client needs to publish to and read from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub ack_mode: AckMode,
    /// Number of partitions; at least 1.
    pub partition_count: u32,
    /// The stream's settings as the broker applies them (its defaults filled in).
    pub settings: StreamSettings,
    /// Partitions in strictly increasing id order, each id below `partition_count`. Normally
    /// every partition; a broker that knows only some lists those.
    pub partitions: Vec<PartitionMetadata>,
}

/// Where a partition is led and how far its log reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub id: PartitionId,
    /// The client endpoint of the leader; absent while the partition has none.
    pub leader: Option<Endpoint>,
    /// The current leadership term; a client drops answers from older epochs.
    pub leader_epoch: LeaderEpoch,
    /// First offset still readable, tiered history included.
    pub log_start: Offset,
    /// Offsets below it are committed and visible to consumers.
    pub high_watermark: Offset,
    /// First offset on the leader's local disk; history below it is read from the tier.
    pub local_start: Offset,
    /// End of the tiered range `[log_start, tier_end)`; equal to `log_start` when nothing is
    /// tiered.
    pub tier_end: Offset,
    /// Sealed, committed data waiting to be tiered.
    pub upload_backlog: UploadBacklog,
    /// The partition is in the `corrupt` state: its log holds damaged data that was not cut,
    /// at these offsets. It refuses publishes and fetches (`CorruptData`) until an operator
    /// repairs it ([`RepairPartition`](crate::frame::RepairPartition)).
    pub damaged: Option<DamagedRange>,
}

/// The offsets a corrupt partition's damaged segment holds: from `start` to `end`
/// (exclusive), or to the log's end when `end` is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DamagedRange {
    pub start: Offset,
    pub end: Option<Offset>,
}

/// Sealed data of a partition waiting for upload to object storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UploadBacklog {
    pub segments: u64,
    pub bytes: u64,
}

impl StreamInfo {
    /// The invariants a decoder checks, as `(field, reason)`.
    fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if self.partition_count == 0 {
            return Err(("partition_count", "a stream has at least one partition"));
        }
        let mut previous: Option<PartitionId> = None;
        for partition in &self.partitions {
            if partition.id.get() >= self.partition_count {
                return Err(("partitions", "partition id not below partition_count"));
            }
            if previous.is_some_and(|previous| previous >= partition.id) {
                return Err(("partitions", "partition ids not strictly increasing"));
            }
            previous = Some(partition.id);
        }
        Ok(())
    }
}

impl MetadataRequest {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.count("streams", self.streams.len())?;
        for name in &self.streams {
            out.bytes_u16("stream", name.as_str().as_bytes())?;
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<MetadataRequest, PayloadError> {
        let count = input.count("streams", MIN_NAME_LEN)?;
        let mut streams = Vec::with_capacity(count as usize);
        for _ in 0..count {
            streams.push(input.stream_name("stream")?);
        }
        Ok(MetadataRequest { streams })
    }
}

impl MetadataResponse {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.count("streams", self.streams.len())?;
        for stream in &self.streams {
            out.bytes_u16("name", stream.name.as_str().as_bytes())?;
            match &stream.result {
                Err(code) => out.result_code(Some(*code)),
                Ok(info) => {
                    info.check().map_err(invalid_message)?;
                    out.result_code(None);
                    out.u8(info.ack_mode.as_u8());
                    out.u32(info.partition_count);
                    info.settings.write(out)?;
                    out.count("partitions", info.partitions.len())?;
                    for partition in &info.partitions {
                        write_partition(out, partition)?;
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<MetadataResponse, PayloadError> {
        let count = input.count("streams", MIN_STREAM_ENTRY_LEN)?;
        let mut streams = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let name = input.stream_name("name")?;
            let result = match input.result_code("error_code")? {
                Some(code) => Err(code),
                None => Ok(read_info(input)?),
            };
            streams.push(StreamMetadata { name, result });
        }
        Ok(MetadataResponse { streams })
    }
}

fn read_info(input: &mut PayloadReader) -> Result<StreamInfo, PayloadError> {
    let ack_mode = input.ack_mode("ack_mode")?;
    let partition_count = input.u32("partition_count")?;
    let settings = StreamSettings::read(input)?;
    let count = input.count("partitions", MIN_PARTITION_ENTRY_LEN)?;
    let mut partitions = Vec::with_capacity(count as usize);
    for _ in 0..count {
        partitions.push(PartitionMetadata {
            id: PartitionId::new(input.u32("partition")?),
            leader: input.option("leader", |input| input.endpoint("leader"))?,
            leader_epoch: input.leader_epoch("leader_epoch")?,
            log_start: Offset::new(input.u64("log_start")?),
            high_watermark: Offset::new(input.u64("high_watermark")?),
            local_start: Offset::new(input.u64("local_start")?),
            tier_end: Offset::new(input.u64("tier_end")?),
            upload_backlog: UploadBacklog {
                segments: input.u64("upload_backlog_segments")?,
                bytes: input.u64("upload_backlog_bytes")?,
            },
            damaged: input.option("damaged", |input| {
                Ok(DamagedRange {
                    start: Offset::new(input.u64("damaged_start")?),
                    end: input.option("damaged_end", |input| {
                        Ok(Offset::new(input.u64("damaged_end")?))
                    })?,
                })
            })?,
        });
    }
    let info = StreamInfo {
        ack_mode,
        partition_count,
        settings,
        partitions,
    };
    info.check().map_err(invalid_payload)?;
    Ok(info)
}

fn write_partition(
    out: &mut PayloadWriter<'_>,
    partition: &PartitionMetadata,
) -> Result<(), EncodeError> {
    out.u32(partition.id.get());
    out.option(partition.leader.as_ref(), |out, leader| {
        out.bytes_u16("leader", leader.as_str().as_bytes())
    })?;
    out.u32(partition.leader_epoch.get());
    out.u64(partition.log_start.get());
    out.u64(partition.high_watermark.get());
    out.u64(partition.local_start.get());
    out.u64(partition.tier_end.get());
    out.u64(partition.upload_backlog.segments);
    out.u64(partition.upload_backlog.bytes);
    out.option(partition.damaged.as_ref(), |out, damaged| {
        out.u64(damaged.start.get());
        out.option(damaged.end.as_ref(), |out, end| {
            out.u64(end.get());
            Ok(())
        })
    })
}

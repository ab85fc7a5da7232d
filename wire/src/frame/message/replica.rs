//! The peer protocol of replication: what partition replicas send each other on the peer
//! port. These messages are one-way — nothing answers a frame — and each names its
//! partition, so one peer connection carries every partition two brokers share.
//! (`docs/replication.md` gives their meaning; `floe-replication` their state machine.)
//!
//! ```text
//! ReplicaAppend    string stream, u32 partition, u32 epoch, u64 prev_offset, u32 prev_epoch,
//!                  u8 reset (0 or 1), u64 high_watermark, u32 batch_count (may be 0),
//!                  batch_count × record batch, back to back, each framed by its own length
//! ReplicaAck       string stream, u32 partition, u32 epoch, u64 end
//! ReplicaMismatch  string stream, u32 partition, u32 epoch, u64 start, u64 end,
//!                  list<epoch start>: u32 epoch, u64 start_offset — epochs strictly
//!                  increasing, offsets strictly increasing, within [start, end)
//! ReplicaStale     string stream, u32 partition, u32 epoch
//! ```

use bytes::Bytes;

use crate::batch;
use crate::frame::batches;
use crate::frame::error::{EncodeError, PayloadError};
use crate::frame::payload::{PayloadReader, PayloadWriter, invalid_message, invalid_payload};
use crate::{LeaderEpoch, PartitionId, StreamName};

/// One epoch-history entry: 4 + 8 bytes.
const EPOCH_ENTRY_LEN: usize = 12;

/// Leader → follower: batches that continue the leader's log after `prev_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAppend {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub epoch: LeaderEpoch,
    pub prev_offset: u64,
    pub prev_epoch: LeaderEpoch,
    pub reset: bool,
    pub high_watermark: u64,
    /// Stamped record batches, each exactly one encoded batch; empty for a heartbeat.
    pub batches: Vec<Bytes>,
}

/// Follower → leader: durable, and agreeing with this epoch's leader, below `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAck {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub epoch: LeaderEpoch,
    pub end: u64,
}

/// Follower → leader: where the follower's log stands, to find where the logs agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaMismatch {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub epoch: LeaderEpoch,
    pub start: u64,
    pub end: u64,
    /// (epoch, first offset), both strictly increasing, offsets within `[start, end)`.
    pub epochs: Vec<(LeaderEpoch, u64)>,
}

/// The sender's epoch is older than the receiver's promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStale {
    pub stream: StreamName,
    pub partition: PartitionId,
    pub epoch: LeaderEpoch,
}

fn check_epochs(
    epochs: &[(LeaderEpoch, u64)],
    start: u64,
    end: u64,
) -> Result<(), (&'static str, &'static str)> {
    if start > end {
        return Err(("end", "below start"));
    }
    for pair in epochs.windows(2) {
        if pair[1].0 <= pair[0].0 {
            return Err(("epochs", "epochs not strictly increasing"));
        }
        if pair[1].1 <= pair[0].1 {
            return Err(("epochs", "start offsets not strictly increasing"));
        }
    }
    if epochs
        .iter()
        .any(|&(_, offset)| offset < start || offset >= end)
    {
        return Err(("epochs", "a start offset outside the log"));
    }
    Ok(())
}

impl ReplicaAppend {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        for (index, bytes) in self.batches.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            batches::check_exact(bytes, index, batch::MAX_BATCH_BYTES)?;
        }
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.u32(self.epoch.get());
        out.u64(self.prev_offset);
        out.u32(self.prev_epoch.get());
        out.u8(u8::from(self.reset));
        out.u64(self.high_watermark);
        out.count("batches", self.batches.len())?;
        for bytes in &self.batches {
            out.bulk(bytes.clone());
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<ReplicaAppend, PayloadError> {
        let stream = input.stream_name("stream")?;
        let partition = PartitionId::new(input.u32("partition")?);
        let epoch = input.leader_epoch("epoch")?;
        let prev_offset = input.u64("prev_offset")?;
        let prev_epoch = input.leader_epoch("prev_epoch")?;
        let reset = match input.u8("reset")? {
            0 => false,
            1 => true,
            _ => return Err(invalid_payload(("reset", "neither 0 nor 1"))),
        };
        let high_watermark = input.u64("high_watermark")?;
        let count = input.count("batches", batch::HEADER_LEN)?;
        let limit = input.limits().batch_bytes();
        let mut batches = Vec::with_capacity(count as usize);
        for index in 0..count {
            let length = batches::frame_one(input.remaining(), index, limit)?;
            batches.push(input.take("batch", length)?);
        }
        Ok(ReplicaAppend {
            stream,
            partition,
            epoch,
            prev_offset,
            prev_epoch,
            reset,
            high_watermark,
            batches,
        })
    }
}

impl ReplicaAck {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.u32(self.epoch.get());
        out.u64(self.end);
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<ReplicaAck, PayloadError> {
        Ok(ReplicaAck {
            stream: input.stream_name("stream")?,
            partition: PartitionId::new(input.u32("partition")?),
            epoch: input.leader_epoch("epoch")?,
            end: input.u64("end")?,
        })
    }
}

impl ReplicaMismatch {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        check_epochs(&self.epochs, self.start, self.end).map_err(invalid_message)?;
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.u32(self.epoch.get());
        out.u64(self.start);
        out.u64(self.end);
        out.count("epochs", self.epochs.len())?;
        for &(epoch, start) in &self.epochs {
            out.u32(epoch.get());
            out.u64(start);
        }
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<ReplicaMismatch, PayloadError> {
        let stream = input.stream_name("stream")?;
        let partition = PartitionId::new(input.u32("partition")?);
        let epoch = input.leader_epoch("epoch")?;
        let start = input.u64("start")?;
        let end = input.u64("end")?;
        let count = input.count("epochs", EPOCH_ENTRY_LEN)?;
        let mut epochs = Vec::with_capacity(count as usize);
        for _ in 0..count {
            epochs.push((input.leader_epoch("epoch")?, input.u64("start_offset")?));
        }
        check_epochs(&epochs, start, end).map_err(invalid_payload)?;
        Ok(ReplicaMismatch {
            stream,
            partition,
            epoch,
            start,
            end,
            epochs,
        })
    }
}

impl ReplicaStale {
    pub(crate) fn write(&self, out: &mut PayloadWriter<'_>) -> Result<(), EncodeError> {
        out.bytes_u16("stream", self.stream.as_str().as_bytes())?;
        out.u32(self.partition.get());
        out.u32(self.epoch.get());
        Ok(())
    }

    pub(crate) fn read(input: &mut PayloadReader) -> Result<ReplicaStale, PayloadError> {
        Ok(ReplicaStale {
            stream: input.stream_name("stream")?,
            partition: PartitionId::new(input.u32("partition")?),
            epoch: input.leader_epoch("epoch")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use crate::frame::{FrameLimits, Message, ProtocolVersion, RequestId, decode_frame};
    use crate::{LeaderEpoch, PartitionId, StreamName};

    use super::ReplicaMismatch;

    fn mismatch(epochs: Vec<(u32, u64)>, start: u64, end: u64) -> ReplicaMismatch {
        ReplicaMismatch {
            stream: StreamName::new("s").expect("name"),
            partition: PartitionId::new(0),
            epoch: LeaderEpoch::new(3),
            start,
            end,
            epochs: epochs
                .into_iter()
                .map(|(epoch, start)| (LeaderEpoch::new(epoch), start))
                .collect(),
        }
    }

    #[test]
    fn an_epoch_history_out_of_order_or_outside_the_log_is_refused_both_ways() {
        for bad in [
            mismatch(vec![(2, 0), (1, 5)], 0, 10),
            mismatch(vec![(1, 5), (2, 5)], 0, 10),
            mismatch(vec![(1, 10)], 0, 10),
            mismatch(vec![(1, 0)], 5, 10),
            mismatch(vec![], 10, 5),
        ] {
            let mut buf = BytesMut::new();
            assert!(
                Message::ReplicaMismatch(bad.clone())
                    .encode(ProtocolVersion::V1, RequestId::new(1), &mut buf)
                    .is_err(),
                "{bad:?} encodes"
            );
        }
        // The same history forged on the wire: encode a good one, then swap the epochs.
        let good = mismatch(vec![(1, 0), (2, 5)], 0, 10);
        let mut buf = BytesMut::new();
        Message::ReplicaMismatch(good)
            .encode(ProtocolVersion::V1, RequestId::new(1), &mut buf)
            .expect("encodes");
        let len = buf.len();
        // The last entry is (u32 epoch, u64 start): make its epoch 0.
        buf[len - 12..len - 8].copy_from_slice(&0u32.to_le_bytes());
        let bytes = Bytes::from(buf);
        let (frame, _) = decode_frame(&bytes, &FrameLimits::FORMAT_MAX)
            .expect("header")
            .expect("whole");
        assert!(frame.message(&FrameLimits::FORMAT_MAX).is_err());
    }
}

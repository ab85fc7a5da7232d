//! The state machine's messages as `floe-wire` peer frames, and back.

use floe_wire::frame::{ReplicaAck, ReplicaAppend, ReplicaMismatch, ReplicaStale};
use floe_wire::{PartitionId, StreamName};

use crate::history::EpochStart;
use crate::log_binding::WireBatch;
use crate::message::Message;

/// The wire form of `message`, for the replica of `partition` of `stream`.
pub fn to_wire(
    stream: &StreamName,
    partition: PartitionId,
    message: Message<WireBatch>,
) -> floe_wire::Message {
    let stream = stream.clone();
    match message {
        Message::Append {
            epoch,
            prev_offset,
            prev_epoch,
            reset,
            batches,
            high_watermark,
        } => floe_wire::Message::ReplicaAppend(ReplicaAppend {
            stream,
            partition,
            epoch,
            prev_offset,
            prev_epoch,
            reset,
            high_watermark,
            batches: batches.into_iter().map(|b| b.bytes().clone()).collect(),
        }),
        Message::Ack { epoch, end } => floe_wire::Message::ReplicaAck(ReplicaAck {
            stream,
            partition,
            epoch,
            end,
        }),
        Message::Mismatch {
            epoch,
            start,
            end,
            epochs,
        } => floe_wire::Message::ReplicaMismatch(ReplicaMismatch {
            stream,
            partition,
            epoch,
            start,
            end,
            epochs: epochs.iter().map(|e| (e.epoch, e.start)).collect(),
        }),
        Message::Stale { epoch } => floe_wire::Message::ReplicaStale(ReplicaStale {
            stream,
            partition,
            epoch,
        }),
    }
}

/// Why a peer frame is not a replication message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerError {
    /// A request or response of the client protocol on the peer port.
    NotPeerMessage,
    /// A batch in an append whose header does not parse.
    Batch(floe_wire::BatchError),
}

/// The partition a peer frame is for, and its message.
pub fn from_wire(
    message: floe_wire::Message,
) -> Result<(StreamName, PartitionId, Message<WireBatch>), PeerError> {
    Ok(match message {
        floe_wire::Message::ReplicaAppend(m) => {
            let batches = m
                .batches
                .into_iter()
                .map(WireBatch::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(PeerError::Batch)?;
            (
                m.stream,
                m.partition,
                Message::Append {
                    epoch: m.epoch,
                    prev_offset: m.prev_offset,
                    prev_epoch: m.prev_epoch,
                    reset: m.reset,
                    batches,
                    high_watermark: m.high_watermark,
                },
            )
        }
        floe_wire::Message::ReplicaAck(m) => (
            m.stream,
            m.partition,
            Message::Ack {
                epoch: m.epoch,
                end: m.end,
            },
        ),
        floe_wire::Message::ReplicaMismatch(m) => (
            m.stream,
            m.partition,
            Message::Mismatch {
                epoch: m.epoch,
                start: m.start,
                end: m.end,
                epochs: m
                    .epochs
                    .into_iter()
                    .map(|(epoch, start)| EpochStart { epoch, start })
                    .collect(),
            },
        ),
        floe_wire::Message::ReplicaStale(m) => {
            (m.stream, m.partition, Message::Stale { epoch: m.epoch })
        }
        _ => return Err(PeerError::NotPeerMessage),
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use floe_wire::frame::{FrameLimits, ProtocolVersion, RequestId, decode_frame};
    use floe_wire::{BatchBuilder, Offset};

    use super::*;
    use crate::message::Batch;

    fn epoch(value: u32) -> floe_wire::LeaderEpoch {
        floe_wire::LeaderEpoch::new(value)
    }

    fn through_the_wire(message: Message<WireBatch>) -> Message<WireBatch> {
        let stream = StreamName::new("orders").expect("name");
        let mut buf = BytesMut::new();
        to_wire(&stream, PartitionId::new(7), message)
            .encode(ProtocolVersion::V1, RequestId::new(1), &mut buf)
            .expect("encodes");
        let bytes = buf.freeze();
        let (frame, _) = decode_frame(&bytes, &FrameLimits::FORMAT_MAX)
            .expect("header")
            .expect("whole");
        let decoded = frame.message(&FrameLimits::FORMAT_MAX).expect("decodes");
        let (name, partition, message) = from_wire(decoded).expect("a peer message");
        assert_eq!((name, partition), (stream, PartitionId::new(7)));
        message
    }

    #[test]
    fn every_message_survives_the_wire() {
        let mut builder = BatchBuilder::new(4096);
        builder.push(1, None, b"value", &[]).expect("push");
        let mut bytes = BytesMut::from(&builder.finish().expect("finish")[..]);
        floe_wire::batch::stamp(&mut bytes, Offset::new(40), epoch(3)).expect("stamp");
        let batch = WireBatch::parse(bytes.freeze()).expect("parses");
        assert_eq!(
            (batch.base(), batch.end(), batch.epoch()),
            (40, 41, epoch(3))
        );
        let messages = [
            Message::Append {
                epoch: epoch(3),
                prev_offset: 40,
                prev_epoch: epoch(2),
                reset: false,
                batches: vec![batch],
                high_watermark: 12,
            },
            Message::Ack {
                epoch: epoch(3),
                end: 41,
            },
            Message::Mismatch {
                epoch: epoch(3),
                start: 0,
                end: 41,
                epochs: vec![
                    EpochStart {
                        epoch: epoch(1),
                        start: 0,
                    },
                    EpochStart {
                        epoch: epoch(3),
                        start: 40,
                    },
                ],
            },
            Message::Stale { epoch: epoch(4) },
        ];
        for message in messages {
            assert_eq!(through_the_wire(message.clone()), message);
        }
    }
}

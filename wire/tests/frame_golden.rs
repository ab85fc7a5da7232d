//! Golden bytes for every frame type of protocol version 1.
//!
//! Each fixture under `golden/` was written once by an encoder independent of this crate and
//! is annotated field by field. The encoder must reproduce it byte for byte (as one buffer
//! and as vectored chunks), and the decoder must read it back into the same message. Never
//! regenerate a fixture to make a test pass: a changed layout is a new protocol version with
//! its own fixtures, and decoders keep reading these.

mod common;

use bytes::{Bytes, BytesMut};
use common::{decode_one, hex_rows, name, parse_hex, produced_batch, stored_batch};
use floe_wire::frame::{AuthToken, ConnectionLimits};
use floe_wire::frame::{
    BatchAck, CreateStream, CreateStreamResponse, DamagedRange, DeleteStream, DeleteStreamResponse,
    ErrorDetails, ErrorResponse, Fetch, FetchPosition, FetchResponse, Frame, FrameFlags,
    FrameLimits, HEADER_LEN, Hello, HelloAck, MessageType, MetadataRequest, MetadataResponse,
    PartitionMetadata, Produce, ProduceAck, ProtocolVersion, RepairPartition,
    RepairPartitionResponse, RequestId, StreamInfo, StreamMetadata, StreamSettings, UploadBacklog,
};
use floe_wire::{
    AckMode, BrokerId, Endpoint, ErrorCode, LeaderEpoch, Message, Offset, PartitionId, RecordBatch,
    RetryClass,
};

/// Checks one fixture both ways and returns the decoded frame for further checks.
fn check_golden(fixture: &str, request_id: u64, message: Message) -> Frame {
    let expected = parse_hex(fixture);

    let mut buf = BytesMut::new();
    message
        .encode(ProtocolVersion::V1, RequestId::new(request_id), &mut buf)
        .expect("golden message encodes");
    assert_eq!(hex_rows(&buf), hex_rows(&expected), "encode");

    let chunks = message
        .encode_chunks(ProtocolVersion::V1, RequestId::new(request_id))
        .expect("golden message encodes as chunks");
    assert_eq!(chunks.frame_len(), expected.len());
    let joined: Vec<u8> = chunks.into_chunks().concat();
    assert_eq!(hex_rows(&joined), hex_rows(&expected), "encode_chunks");

    let bytes = Bytes::from(expected);
    let frame = decode_one(&bytes, &FrameLimits::FORMAT_MAX);
    assert_eq!(frame.header.version, ProtocolVersion::V1);
    assert_eq!(frame.header.message_type, message.message_type());
    assert_eq!(frame.header.flags, FrameFlags::EMPTY);
    assert_eq!(frame.header.request_id, RequestId::new(request_id));
    assert_eq!(frame.header.payload_len as usize, bytes.len() - HEADER_LEN);
    assert_eq!(frame.message(&FrameLimits::FORMAT_MAX), Ok(message));
    frame
}

/// Whether `inner` lies inside `outer`'s memory: proof that decoding sliced, not copied.
fn shares_memory(outer: &Bytes, inner: &Bytes) -> bool {
    let outer_range = outer.as_ptr() as usize..outer.as_ptr() as usize + outer.len();
    outer_range.contains(&(inner.as_ptr() as usize))
        && inner.as_ptr() as usize + inner.len() <= outer_range.end
}

#[test]
fn hello_golden_bytes() {
    let hello = Hello {
        min_version: 1,
        max_version: 1,
        client_name: "floe-cli/0.1.0".to_owned(),
        auth_token: Some(AuthToken::new(&b"tok-3f9a"[..])),
    };
    check_golden(include_str!("golden/frame_hello_v1.hex"), 1, hello.into());
}

#[test]
fn hello_ack_golden_bytes() {
    let ack = HelloAck {
        version: ProtocolVersion::V1,
        broker_id: BrokerId::new(3),
        limits: ConnectionLimits {
            max_frame_bytes: 16 << 20,
            max_batch_bytes: 8 << 20,
            max_list_entries: 10_000,
            max_in_flight_bytes: 64 << 20,
            max_in_flight_batches: 16,
        },
    };
    check_golden(include_str!("golden/frame_hello_ack_v1.hex"), 1, ack.into());
}

#[test]
fn metadata_request_golden_bytes() {
    let request = MetadataRequest {
        streams: vec![name("orders"), name("clicks")],
    };
    check_golden(
        include_str!("golden/frame_metadata_request_v1.hex"),
        2,
        request.into(),
    );
}

#[test]
fn metadata_response_golden_bytes() {
    let orders = StreamInfo {
        ack_mode: AckMode::Quorum,
        partition_count: 2,
        settings: StreamSettings {
            segment_bytes: Some(64 << 20),
            retention_ms: Some(7 * 24 * 3600 * 1000),
            ..StreamSettings::default()
        },
        partitions: vec![
            PartitionMetadata {
                id: PartitionId::new(0),
                leader: Some(Endpoint::new("broker-1:7400").expect("valid endpoint")),
                leader_epoch: LeaderEpoch::new(5),
                log_start: Offset::new(0),
                high_watermark: Offset::new(1200),
                local_start: Offset::new(800),
                tier_end: Offset::new(800),
                upload_backlog: UploadBacklog {
                    segments: 1,
                    bytes: 4096,
                },
                damaged: None,
            },
            PartitionMetadata {
                id: PartitionId::new(1),
                leader: None,
                leader_epoch: LeaderEpoch::new(4),
                log_start: Offset::new(10),
                high_watermark: Offset::new(10),
                local_start: Offset::new(10),
                tier_end: Offset::new(10),
                upload_backlog: UploadBacklog::default(),
                damaged: Some(DamagedRange {
                    start: Offset::new(10),
                    end: None,
                }),
            },
        ],
    };
    let response = MetadataResponse {
        streams: vec![
            StreamMetadata {
                name: name("orders"),
                result: Ok(orders),
            },
            StreamMetadata {
                name: name("clicks"),
                result: Err(ErrorCode::UnknownStream),
            },
        ],
    };
    check_golden(
        include_str!("golden/frame_metadata_response_v1.hex"),
        2,
        response.into(),
    );
}

#[test]
fn create_stream_golden_bytes() {
    let create = CreateStream {
        name: name("orders"),
        partition_count: 2,
        ack_mode: AckMode::Quorum,
        settings: StreamSettings {
            segment_bytes: Some(64 << 20),
            segment_age_ms: None,
            local_retention_bytes: None,
            local_retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: Some(1 << 40),
            retention_ms: None,
        },
    };
    check_golden(
        include_str!("golden/frame_create_stream_v1.hex"),
        3,
        create.into(),
    );
}

#[test]
fn create_stream_response_golden_bytes() {
    let response = CreateStreamResponse {
        name: name("orders"),
    };
    check_golden(
        include_str!("golden/frame_create_stream_response_v1.hex"),
        3,
        response.into(),
    );
}

#[test]
fn delete_stream_golden_bytes() {
    let delete = DeleteStream {
        name: name("orders"),
    };
    check_golden(
        include_str!("golden/frame_delete_stream_v1.hex"),
        4,
        delete.into(),
    );
}

#[test]
fn delete_stream_response_golden_bytes() {
    let response = DeleteStreamResponse {
        name: name("orders"),
    };
    check_golden(
        include_str!("golden/frame_delete_stream_response_v1.hex"),
        4,
        response.into(),
    );
}

#[test]
fn produce_golden_bytes_carry_valid_batches_as_slices() {
    let produce = Produce {
        stream: name("orders"),
        partition: PartitionId::new(1),
        batches: vec![produced_batch(0), produced_batch(1)],
    };
    let frame = check_golden(
        include_str!("golden/frame_produce_v1.hex"),
        5,
        produce.into(),
    );
    let Ok(Message::Produce(produce)) = frame.message(&FrameLimits::FORMAT_MAX) else {
        panic!("golden produce decodes");
    };
    for (index, batch) in produce.batches.iter().enumerate() {
        assert!(
            shares_memory(&frame.payload, batch),
            "batch {index} was copied"
        );
        let decoded = RecordBatch::decode(batch.clone()).expect("golden batch is valid");
        assert_eq!(decoded.header().producer_id, 42);
        assert_eq!(decoded.header().base_sequence, index as i32);
    }
}

#[test]
fn produce_ack_golden_bytes() {
    let ack = ProduceAck {
        results: vec![
            Ok(BatchAck {
                base_offset: Offset::new(100),
                last_offset: Offset::new(100),
            }),
            Err(ErrorCode::OutOfOrderSequence),
        ],
    };
    check_golden(
        include_str!("golden/frame_produce_ack_v1.hex"),
        5,
        ack.into(),
    );
}

#[test]
fn fetch_golden_bytes() {
    let fetch = Fetch {
        stream: name("orders"),
        partition: PartitionId::new(1),
        position: FetchPosition::Offset(Offset::new(100)),
        max_bytes: 1 << 20,
        max_wait_ms: 500,
    };
    check_golden(include_str!("golden/frame_fetch_v1.hex"), 6, fetch.into());
}

#[test]
fn fetch_response_golden_bytes_carry_stored_batches_as_one_slice() {
    let records = [stored_batch(0, 100, 5), stored_batch(1, 101, 5)].concat();
    let response = FetchResponse {
        log_start: Offset::new(0),
        high_watermark: Offset::new(102),
        next_offset: Offset::new(102),
        records: Bytes::from(records),
    };
    let frame = check_golden(
        include_str!("golden/frame_fetch_response_v1.hex"),
        6,
        response.into(),
    );
    let Ok(Message::FetchResponse(response)) = frame.message(&FrameLimits::FORMAT_MAX) else {
        panic!("golden fetch response decodes");
    };
    assert!(
        shares_memory(&frame.payload, &response.records),
        "records were copied"
    );
    let (first, rest) = RecordBatch::decode_prefix(&response.records).expect("first batch");
    let (second, rest) = RecordBatch::decode_prefix(&rest).expect("second batch");
    assert!(rest.is_empty());
    assert_eq!(first.header().base_offset, Offset::new(100));
    assert_eq!(second.header().base_offset, Offset::new(101));
    assert_eq!(second.header().leader_epoch, LeaderEpoch::new(5));
}

#[test]
fn error_golden_bytes() {
    let error = ErrorResponse {
        code: ErrorCode::OffsetOutOfRange,
        message: "offset 5000 is past the log end 102".to_owned(),
        details: Some(ErrorDetails::OffsetRange {
            log_start: Offset::new(0),
            log_end: Offset::new(102),
        }),
    };
    check_golden(include_str!("golden/frame_error_v1.hex"), 7, error.into());
}

#[test]
fn golden_header_fields_sit_at_their_positions() {
    // Read straight from a fixture, independently of the decoder.
    let bytes = parse_hex(include_str!("golden/frame_produce_ack_v1.hex"));
    assert_eq!(&bytes[0..4], b"FLOE");
    assert_eq!(bytes[4], 1, "version");
    assert_eq!(bytes[5], 0x85, "message type");
    assert_eq!(bytes[6], 0, "flags");
    assert_eq!(bytes[7], 0, "reserved");
    assert_eq!(bytes[8..16], 5u64.to_le_bytes(), "request id");
    assert_eq!(bytes[16..20], ((bytes.len() - 20) as u32).to_le_bytes());
}

#[test]
fn message_type_discriminants_are_stable() {
    let expected: [(MessageType, u8, bool); 19] = [
        (MessageType::Hello, 0x01, false),
        (MessageType::MetadataRequest, 0x02, false),
        (MessageType::CreateStream, 0x03, false),
        (MessageType::DeleteStream, 0x04, false),
        (MessageType::Produce, 0x05, false),
        (MessageType::Fetch, 0x06, false),
        (MessageType::RepairPartition, 0x07, false),
        (MessageType::ReplicaAppend, 0x10, false),
        (MessageType::ReplicaAck, 0x11, false),
        (MessageType::ReplicaMismatch, 0x12, false),
        (MessageType::ReplicaStale, 0x13, false),
        (MessageType::Error, 0x80, true),
        (MessageType::HelloAck, 0x81, true),
        (MessageType::MetadataResponse, 0x82, true),
        (MessageType::CreateStreamResponse, 0x83, true),
        (MessageType::DeleteStreamResponse, 0x84, true),
        (MessageType::ProduceAck, 0x85, true),
        (MessageType::FetchResponse, 0x86, true),
        (MessageType::RepairPartitionResponse, 0x87, true),
    ];
    assert_eq!(MessageType::ALL.len(), expected.len());
    for (message_type, value, is_response) in expected {
        assert_eq!(message_type.as_u8(), value, "{message_type:?}");
        assert_eq!(message_type.is_response(), is_response, "{message_type:?}");
        assert_eq!(
            MessageType::from_u8(ProtocolVersion::V1, value),
            Some(message_type)
        );
    }
    assert_eq!(AckMode::None.as_u8(), 0);
    assert_eq!(AckMode::Leader.as_u8(), 1);
    assert_eq!(AckMode::Quorum.as_u8(), 2);
}

#[test]
fn error_codes_and_retry_classes_are_stable() {
    use RetryClass::{Fatal, RefreshMetadata, Retry};
    let expected: [(ErrorCode, u16, RetryClass); 28] = [
        (ErrorCode::Malformed, 1, Fatal),
        (ErrorCode::UnsupportedVersion, 2, Fatal),
        (ErrorCode::FrameTooLarge, 3, Fatal),
        (ErrorCode::InvalidRequest, 4, Fatal),
        (ErrorCode::HandshakeRequired, 5, Fatal),
        (ErrorCode::Unauthorized, 16, Fatal),
        (ErrorCode::Forbidden, 17, Fatal),
        (ErrorCode::UnknownStream, 32, RefreshMetadata),
        (ErrorCode::UnknownPartition, 33, RefreshMetadata),
        (ErrorCode::NotLeader, 34, RefreshMetadata),
        (ErrorCode::LeaderNotAvailable, 35, RefreshMetadata),
        (ErrorCode::StreamExists, 36, Fatal),
        (ErrorCode::OffsetOutOfRange, 64, Fatal),
        (ErrorCode::InvalidBatch, 65, Fatal),
        (ErrorCode::BatchTooLarge, 66, Fatal),
        (ErrorCode::ProducerFenced, 67, Fatal),
        (ErrorCode::OutOfOrderSequence, 68, Fatal),
        (ErrorCode::CorruptData, 69, Fatal),
        (ErrorCode::Throttled, 96, Retry),
        (ErrorCode::DiskHighWater, 97, Retry),
        (ErrorCode::Timeout, 98, Retry),
        (ErrorCode::NotEnoughReplicas, 99, Retry),
        (ErrorCode::ShuttingDown, 100, RefreshMetadata),
        (ErrorCode::LogFailed, 101, RefreshMetadata),
        (ErrorCode::TierUnavailable, 102, Retry),
        (ErrorCode::TooManyConnections, 103, Retry),
        (ErrorCode::LimitExceeded, 104, Retry),
        (ErrorCode::Internal, 128, Fatal),
    ];
    assert_eq!(ErrorCode::ALL.len(), expected.len());
    for (code, value, class) in expected {
        assert_eq!(code.as_u16(), value, "{code:?}");
        assert_eq!(code.retry_class(), class, "{code:?}");
        assert_eq!(ErrorCode::from_u16(value), Some(code));
    }
    for value in 0..=u16::MAX {
        if !expected.iter().any(|(_, known, _)| *known == value) {
            assert_eq!(ErrorCode::from_u16(value), None, "{value} is not a code");
        }
    }
}

#[test]
fn repair_partition_golden_bytes() {
    check_golden(
        include_str!("golden/frame_repair_partition_v1.hex"),
        7,
        RepairPartition {
            stream: name("orders"),
            partition: PartitionId::new(2),
            discard_from: Some(Offset::new(300)),
        }
        .into(),
    );
}

#[test]
fn repair_partition_response_golden_bytes() {
    check_golden(
        include_str!("golden/frame_repair_partition_response_v1.hex"),
        7,
        RepairPartitionResponse {
            stream: name("orders"),
            partition: PartitionId::new(2),
            repaired: true,
            discard_from: Offset::new(300),
            discarded_bytes: 70_000,
            discarded_segments: 1,
            restart: false,
            segment: "00000000000000000000.log".into(),
            position: 25_000,
            damage: "checksum mismatch".into(),
        }
        .into(),
    );
}

//! One named scenario per way a frame can be refused, on the decoding and the encoding side.
//!
//! Header errors ([`FrameError`]) lose the stream's framing; payload errors ([`PayloadError`])
//! cost one request. Each test asserts the exact error, so a check that moves or weakens
//! fails here.

mod common;

use bytes::{Bytes, BytesMut};
use common::{decode_one, encode, name, parse_hex, produced_batch, raw_frame};
use floe_wire::frame::{
    self, BatchAck, BatchFramingError, ConnectionLimits, CreateStream, DeleteStream, EncodeError,
    FetchResponse, FrameDecoder, FrameError, FrameHeader, FrameLimits, HEADER_LEN, Hello, HelloAck,
    MAX_FRAME_BYTES, MessageType, MetadataResponse, PartitionMetadata, PayloadError, Produce,
    ProduceAck, ProtocolVersion, RequestId, StreamInfo, StreamMetadata, StreamSettings,
    UploadBacklog,
};
use floe_wire::{
    AckMode, BrokerId, EndpointError, ErrorCode, LeaderEpoch, Message, Offset, PartitionId,
    RetryClass, StreamNameError, batch,
};
use proptest::prelude::*;

const LIMITS: FrameLimits = FrameLimits::FORMAT_MAX;

const GOLDEN: [&str; 15] = [
    include_str!("golden/frame_hello_v1.hex"),
    include_str!("golden/frame_hello_ack_v1.hex"),
    include_str!("golden/frame_metadata_request_v1.hex"),
    include_str!("golden/frame_metadata_response_v1.hex"),
    include_str!("golden/frame_create_stream_v1.hex"),
    include_str!("golden/frame_create_stream_response_v1.hex"),
    include_str!("golden/frame_delete_stream_v1.hex"),
    include_str!("golden/frame_delete_stream_response_v1.hex"),
    include_str!("golden/frame_produce_v1.hex"),
    include_str!("golden/frame_produce_ack_v1.hex"),
    include_str!("golden/frame_fetch_v1.hex"),
    include_str!("golden/frame_fetch_response_v1.hex"),
    include_str!("golden/frame_error_v1.hex"),
    include_str!("golden/frame_repair_partition_v1.hex"),
    include_str!("golden/frame_repair_partition_response_v1.hex"),
];

/// A valid frame header with one byte replaced.
fn header_with(at: usize, value: u8) -> Vec<u8> {
    let mut bytes = encode(
        &DeleteStream {
            name: name("orders"),
        }
        .into(),
        1,
    )
    .to_vec();
    bytes[at] = value;
    bytes
}

fn header_error(bytes: Vec<u8>) -> FrameError {
    frame::decode_frame(&Bytes::from(bytes), &LIMITS).expect_err("header is refused")
}

/// Decodes `payload` as a message of `message_type` under `limits`.
fn decode_payload(
    message_type: MessageType,
    payload: &[u8],
    limits: &FrameLimits,
) -> Result<Message, PayloadError> {
    let bytes = raw_frame(message_type.as_u8(), 1, payload);
    decode_one(&bytes, limits).message(limits)
}

/// A u16-length-prefixed string field.
fn string(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// A Fetch payload for `stream` with the given position kind and value.
fn fetch_payload(stream: &[u8], kind: u8, value: u64) -> Vec<u8> {
    let mut payload = string(stream);
    payload.extend_from_slice(&1u32.to_le_bytes());
    payload.push(kind);
    payload.extend_from_slice(&value.to_le_bytes());
    payload.extend_from_slice(&(1u32 << 20).to_le_bytes());
    payload.extend_from_slice(&0u32.to_le_bytes());
    payload
}

/// The payload of a Produce of `orders`/1 declaring `count` batches, followed by `batches`.
fn produce_payload(count: u32, batches: &[u8]) -> Vec<u8> {
    let mut payload = string(b"orders");
    payload.extend_from_slice(&1u32.to_le_bytes());
    payload.extend_from_slice(&count.to_le_bytes());
    payload.extend_from_slice(batches);
    payload
}

fn valid_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_frame_bytes: 16 << 20,
        max_batch_bytes: 8 << 20,
        max_list_entries: 10_000,
        max_in_flight_bytes: 64 << 20,
        max_in_flight_batches: 16,
    }
}

fn hello_ack_payload(limits: &ConnectionLimits, version: u8) -> Vec<u8> {
    let mut payload = vec![version];
    payload.extend_from_slice(&3u32.to_le_bytes());
    payload.extend_from_slice(&limits.max_frame_bytes.to_le_bytes());
    payload.extend_from_slice(&limits.max_batch_bytes.to_le_bytes());
    payload.extend_from_slice(&limits.max_list_entries.to_le_bytes());
    payload.extend_from_slice(&limits.max_in_flight_bytes.to_le_bytes());
    payload.extend_from_slice(&limits.max_in_flight_batches.to_le_bytes());
    payload
}

// ---- header ----

#[test]
fn unknown_version_is_rejected() {
    for version in [0u8, 2, 0x7f, 0xff] {
        let error = header_error(header_with(4, version));
        assert_eq!(error, FrameError::UnsupportedVersion { version });
        assert_eq!(error.error_code(), ErrorCode::UnsupportedVersion);
    }
}

#[test]
fn unknown_message_type_is_rejected() {
    for message_type in [0x00u8, 0x08, 0x7f, 0x88, 0xff] {
        assert_eq!(
            header_error(header_with(5, message_type)),
            FrameError::UnknownMessageType { message_type }
        );
    }
}

#[test]
fn unknown_flags_are_rejected_for_every_type() {
    for message_type in MessageType::ALL {
        for bit in 0..8 {
            let mut bytes = header_with(5, message_type.as_u8());
            bytes[6] = 1 << bit;
            assert_eq!(
                header_error(bytes),
                FrameError::UnknownFlags {
                    flags: 1 << bit,
                    message_type
                }
            );
        }
    }
}

#[test]
fn nonzero_reserved_byte_is_rejected() {
    for value in [1u8, 0x80, 0xff] {
        let error = header_error(header_with(7, value));
        assert_eq!(error, FrameError::ReservedNotZero { value });
        assert_eq!(error.error_code(), ErrorCode::Malformed);
    }
}

#[test]
fn bad_magic_is_rejected_from_its_first_byte() {
    assert_eq!(
        frame::decode_frame(&Bytes::from_static(b"X"), &LIMITS),
        Err(FrameError::BadMagic {
            found: [b'X', 0, 0, 0]
        })
    );
    assert_eq!(
        frame::bytes_needed(b"FLx", &LIMITS),
        Err(FrameError::BadMagic {
            found: [b'F', b'L', b'x', 0]
        })
    );
    assert_eq!(
        frame::decode_frame(&Bytes::from_static(b"FL"), &LIMITS),
        Ok(None)
    );
    assert_eq!(
        header_error(header_with(3, b'e')),
        FrameError::BadMagic { found: *b"FLOe" }
    );
}

#[test]
fn oversized_frame_is_rejected_from_the_header_alone() {
    let limits = FrameLimits {
        max_frame_bytes: 64 * 1024,
        ..LIMITS
    };
    // Only the 20 header bytes arrive; the declared payload is never awaited or reserved.
    let at_limit = (64 * 1024 - HEADER_LEN) as u32;
    let mut header = raw_frame(MessageType::Produce.as_u8(), 1, &[]).to_vec();
    header[16..20].copy_from_slice(&(at_limit + 1).to_le_bytes());
    let expected = FrameError::FrameTooLarge {
        frame_len: 64 * 1024 + 1,
        limit: 64 * 1024,
    };
    assert_eq!(
        frame::decode_frame(&Bytes::from(header.clone()), &limits),
        Err(expected.clone())
    );
    assert_eq!(frame::bytes_needed(&header, &limits), Err(expected.clone()));
    assert_eq!(expected.error_code(), ErrorCode::FrameTooLarge);
    let mut decoder = FrameDecoder::new(limits);
    decoder.extend_from_slice(&header);
    assert_eq!(decoder.next_frame(), Err(expected));
    assert_eq!(decoder.buffered(), HEADER_LEN);

    // Exactly at the limit the header is accepted and the payload awaited.
    header[16..20].copy_from_slice(&at_limit.to_le_bytes());
    assert_eq!(frame::bytes_needed(&header, &limits), Ok(at_limit as usize));
}

#[test]
fn frame_limit_is_capped_at_the_format_maximum() {
    let generous = FrameLimits {
        max_frame_bytes: u32::MAX,
        ..LIMITS
    };
    let mut header = raw_frame(MessageType::FetchResponse.as_u8(), 1, &[]).to_vec();
    header[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        frame::bytes_needed(&header, &generous),
        Err(FrameError::FrameTooLarge {
            frame_len: HEADER_LEN as u64 + u64::from(u32::MAX),
            limit: MAX_FRAME_BYTES,
        })
    );
}

#[test]
fn truncated_frames_need_more_at_every_length() {
    for fixture in GOLDEN {
        let bytes = Bytes::from(parse_hex(fixture));
        let mut decoder = FrameDecoder::new(LIMITS);
        for len in 0..bytes.len() {
            let prefix = bytes.slice(..len);
            assert_eq!(frame::decode_frame(&prefix, &LIMITS), Ok(None), "{len}");
            let needed = frame::bytes_needed(&prefix, &LIMITS).expect("valid prefix");
            let expected = if len < HEADER_LEN {
                HEADER_LEN - len
            } else {
                bytes.len() - len
            };
            assert_eq!(needed, expected, "prefix of {len} bytes");
            assert_eq!(decoder.next_frame(), Ok(None));
            decoder.extend_from_slice(&bytes[len..len + 1]);
        }
        let frame = decoder
            .next_frame()
            .expect("whole frame is valid")
            .expect("whole frame is present");
        assert_eq!(frame, decode_one(&bytes, &LIMITS));
    }
}

#[test]
fn truncated_payloads_are_rejected_at_every_length() {
    for fixture in GOLDEN {
        let bytes = parse_hex(fixture);
        let header = FrameHeader::decode(&bytes, &LIMITS)
            .expect("valid header")
            .expect("whole header");
        for len in 0..header.payload_len as usize {
            let payload = &bytes[HEADER_LEN..HEADER_LEN + len];
            let result = decode_payload(header.message_type, payload, &LIMITS);
            assert!(
                result.is_err(),
                "{:?} payload cut to {len} bytes decoded as {result:?}",
                header.message_type
            );
        }
    }
}

#[test]
fn payload_length_must_match_the_header() {
    let frame = decode_one(
        &encode(
            &DeleteStream {
                name: name("orders"),
            }
            .into(),
            1,
        ),
        &LIMITS,
    );
    let result = Message::decode(&frame.header, frame.payload.slice(1..), &LIMITS);
    assert_eq!(
        result,
        Err(PayloadError::LengthMismatch {
            declared: 8,
            actual: 7
        })
    );
}

proptest! {
    /// Arbitrary bytes, bare or behind a valid magic and version, framed in a loop as a
    /// reader would: each step is a frame, "need more" or an error, never a panic.
    #[test]
    fn random_bytes_never_panic(
        prefix in prop_oneof![Just(Vec::new()), Just(b"FLOE\x01".to_vec())],
        tail in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut bytes = Bytes::from([prefix, tail].concat());
        while let Ok(Some((frame, consumed))) = frame::decode_frame(&bytes, &LIMITS) {
            prop_assert!(consumed >= HEADER_LEN && consumed <= bytes.len());
            let _ = frame.message(&LIMITS);
            bytes = bytes.slice(consumed..);
        }
    }
}

// ---- payload: counts and limits ----

#[test]
fn count_larger_than_the_payload_is_rejected() {
    let mut payload = 1000u32.to_le_bytes().to_vec();
    payload.extend(string(b"orders"));
    assert_eq!(
        decode_payload(MessageType::MetadataRequest, &payload, &LIMITS),
        Err(PayloadError::CountTooLarge {
            field: "streams",
            count: 1000,
            max: 2
        })
    );

    let batch = produced_batch(0);
    assert_eq!(
        decode_payload(MessageType::Produce, &produce_payload(2, &batch), &LIMITS),
        Err(PayloadError::CountTooLarge {
            field: "batches",
            count: 2,
            max: 1
        })
    );

    assert_eq!(
        decode_payload(MessageType::ProduceAck, &u32::MAX.to_le_bytes(), &LIMITS),
        Err(PayloadError::CountTooLarge {
            field: "results",
            count: u32::MAX,
            max: 0
        })
    );
}

#[test]
fn list_longer_than_the_limit_is_rejected() {
    let limits = FrameLimits {
        max_list_entries: 2,
        ..LIMITS
    };
    let mut payload = 3u32.to_le_bytes().to_vec();
    for stream in [&b"a"[..], b"b", b"c"] {
        payload.extend(string(stream));
    }
    assert_eq!(
        decode_payload(MessageType::MetadataRequest, &payload, &limits),
        Err(PayloadError::CountTooLarge {
            field: "streams",
            count: 3,
            max: 2
        })
    );
    assert!(decode_payload(MessageType::MetadataRequest, &payload, &LIMITS).is_ok());
}

#[test]
fn trailing_bytes_are_rejected() {
    let mut payload = string(b"orders");
    payload.push(0);
    assert_eq!(
        decode_payload(MessageType::DeleteStream, &payload, &LIMITS),
        Err(PayloadError::TrailingBytes { extra: 1 })
    );
}

#[test]
fn truncated_field_names_itself() {
    let payload = fetch_payload(b"orders", 0, 7);
    let cut = &payload[..payload.len() - 2];
    assert_eq!(
        decode_payload(MessageType::Fetch, cut, &LIMITS),
        Err(PayloadError::Truncated {
            field: "max_wait_ms",
            needed: 4,
            available: 2
        })
    );
}

// ---- payload: names, text and tags ----

#[test]
fn invalid_stream_names_are_rejected() {
    let cases: [(&[u8], StreamNameError); 6] = [
        (b"", StreamNameError::Empty),
        (b".", StreamNameError::Reserved(".")),
        (b"..", StreamNameError::Reserved("..")),
        (
            b"orders/eu",
            StreamNameError::InvalidByte { byte: b'/', at: 6 },
        ),
        (
            "caf\u{e9}".as_bytes(),
            StreamNameError::InvalidByte { byte: 0xc3, at: 3 },
        ),
        (&[b'a'; 256], StreamNameError::TooLong { len: 256 }),
    ];
    for (bad, source) in cases {
        assert_eq!(
            decode_payload(MessageType::Fetch, &fetch_payload(bad, 1, 0), &LIMITS),
            Err(PayloadError::InvalidStreamName {
                field: "stream",
                source: source.clone()
            })
        );
        if bad.is_empty() {
            // Too short to count as a list entry at all: refused by the count check.
            continue;
        }
        let mut request = 1u32.to_le_bytes().to_vec();
        request.extend(string(bad));
        assert_eq!(
            decode_payload(MessageType::MetadataRequest, &request, &LIMITS),
            Err(PayloadError::InvalidStreamName {
                field: "stream",
                source
            })
        );
    }
}

#[test]
fn invalid_utf8_is_rejected() {
    for bad in [&b"\xff\xfe"[..], b"\xc0\x80", b"ok\xed\xa0\x80"] {
        let mut hello = vec![1, 1];
        hello.extend(string(bad));
        hello.push(0);
        assert_eq!(
            decode_payload(MessageType::Hello, &hello, &LIMITS),
            Err(PayloadError::InvalidUtf8 {
                field: "client_name"
            })
        );
        let mut error = ErrorCode::Internal.as_u16().to_le_bytes().to_vec();
        error.extend(string(bad));
        error.push(0);
        assert_eq!(
            decode_payload(MessageType::Error, &error, &LIMITS),
            Err(PayloadError::InvalidUtf8 { field: "message" })
        );
    }
}

#[test]
fn invalid_leader_endpoint_is_rejected() {
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend(string(b"orders"));
    payload.extend_from_slice(&0u16.to_le_bytes()); // ok
    payload.push(AckMode::Leader.as_u8());
    payload.extend_from_slice(&1u32.to_le_bytes()); // partition_count
    payload.extend_from_slice(&[0; 6]); // six absent settings
    payload.extend_from_slice(&1u32.to_le_bytes()); // entries
    payload.extend_from_slice(&0u32.to_le_bytes()); // id
    payload.push(1); // leader present
    payload.extend(string(b"broker-1"));
    payload.extend_from_slice(&[0; 4 + 8 + 8 + 4 * 8]);
    assert_eq!(
        decode_payload(MessageType::MetadataResponse, &payload, &LIMITS),
        Err(PayloadError::InvalidEndpoint {
            field: "leader",
            source: EndpointError::MissingPort
        })
    );
}

#[test]
fn unknown_tags_are_rejected() {
    let mut hello = vec![1, 1];
    hello.extend(string(b"cli"));
    hello.push(2);
    assert_eq!(
        decode_payload(MessageType::Hello, &hello, &LIMITS),
        Err(PayloadError::InvalidTag {
            field: "auth_token",
            tag: 2
        })
    );

    let mut create = string(b"orders");
    create.extend_from_slice(&1u32.to_le_bytes());
    create.push(3);
    create.extend_from_slice(&[0; 4]);
    assert_eq!(
        decode_payload(MessageType::CreateStream, &create, &LIMITS),
        Err(PayloadError::InvalidTag {
            field: "ack_mode",
            tag: 3
        })
    );

    assert_eq!(
        decode_payload(MessageType::Fetch, &fetch_payload(b"orders", 4, 0), &LIMITS),
        Err(PayloadError::InvalidTag {
            field: "position",
            tag: 4
        })
    );

    let mut error = ErrorCode::Internal.as_u16().to_le_bytes().to_vec();
    error.extend(string(b"boom"));
    error.push(4);
    assert_eq!(
        decode_payload(MessageType::Error, &error, &LIMITS),
        Err(PayloadError::InvalidTag {
            field: "details",
            tag: 4
        })
    );
}

#[test]
fn earliest_and_latest_carry_no_value() {
    for kind in [1u8, 2] {
        assert_eq!(
            decode_payload(
                MessageType::Fetch,
                &fetch_payload(b"orders", kind, 9),
                &LIMITS
            ),
            Err(PayloadError::InvalidValue {
                field: "position_value",
                reason: "must be 0 for earliest and latest"
            })
        );
    }
}

#[test]
fn unknown_error_codes_are_rejected() {
    let mut ack = 1u32.to_le_bytes().to_vec();
    ack.extend_from_slice(&999u16.to_le_bytes());
    assert_eq!(
        decode_payload(MessageType::ProduceAck, &ack, &LIMITS),
        Err(PayloadError::UnknownErrorCode {
            field: "error_code",
            code: 999
        })
    );
    let mut error = 0u16.to_le_bytes().to_vec();
    error.extend(string(b"no error?"));
    error.push(0);
    assert_eq!(
        decode_payload(MessageType::Error, &error, &LIMITS),
        Err(PayloadError::InvalidValue {
            field: "error_code",
            reason: "an error response needs a nonzero code"
        })
    );
}

// ---- payload: record batches ----

#[test]
fn produce_batch_over_the_limit_is_rejected() {
    let limits = FrameLimits {
        max_batch_bytes: 91,
        ..LIMITS
    };
    let batch = produced_batch(0);
    let error = decode_payload(MessageType::Produce, &produce_payload(1, &batch), &limits)
        .expect_err("batch of 92 bytes over a limit of 91");
    assert_eq!(
        error,
        PayloadError::Batch(BatchFramingError::TooLarge {
            index: 0,
            length: 92,
            limit: 91
        })
    );
    assert_eq!(error.error_code(), ErrorCode::BatchTooLarge);
}

#[test]
fn produce_batch_shorter_than_a_header_is_rejected() {
    let mut batch = produced_batch(0).to_vec();
    batch[8..12].copy_from_slice(&63u32.to_le_bytes());
    let error = decode_payload(MessageType::Produce, &produce_payload(1, &batch), &LIMITS)
        .expect_err("batch length below the header");
    assert_eq!(
        error,
        PayloadError::Batch(BatchFramingError::TooShort {
            index: 0,
            declared: 63
        })
    );
    assert_eq!(error.error_code(), ErrorCode::InvalidBatch);
}

#[test]
fn produce_batch_running_past_the_payload_is_rejected() {
    let mut batches = [produced_batch(0), produced_batch(1)].concat();
    batches[92 + 8..92 + 12].copy_from_slice(&93u32.to_le_bytes());
    assert_eq!(
        decode_payload(MessageType::Produce, &produce_payload(2, &batches), &LIMITS),
        Err(PayloadError::Batch(BatchFramingError::Truncated {
            index: 1,
            needed: 93,
            available: 92
        }))
    );
}

#[test]
fn produce_without_batches_is_rejected_both_ways() {
    let reason = "a produce carries at least one batch";
    assert_eq!(
        decode_payload(MessageType::Produce, &produce_payload(0, &[]), &LIMITS),
        Err(PayloadError::InvalidValue {
            field: "batches",
            reason
        })
    );
    let empty = Message::from(Produce {
        stream: name("orders"),
        partition: PartitionId::new(0),
        batches: Vec::new(),
    });
    let mut buf = BytesMut::new();
    assert_eq!(
        empty.encode(ProtocolVersion::V1, RequestId::new(1), &mut buf),
        Err(EncodeError::InvalidValue {
            field: "batches",
            reason
        })
    );
    assert!(buf.is_empty());
}

#[test]
fn fetch_response_records_must_be_whole_batches() {
    let records = [produced_batch(0), produced_batch(1)].concat();
    let torn = &records[..records.len() - 1];
    let mut payload = vec![0u8; 24];
    payload.extend_from_slice(&(torn.len() as u32).to_le_bytes());
    payload.extend_from_slice(torn);
    assert_eq!(
        decode_payload(MessageType::FetchResponse, &payload, &LIMITS),
        Err(PayloadError::Batch(BatchFramingError::Truncated {
            index: 1,
            needed: 92,
            available: 91
        }))
    );
    let response = Message::from(FetchResponse {
        log_start: Offset::new(0),
        high_watermark: Offset::new(2),
        next_offset: Offset::new(2),
        records: Bytes::copy_from_slice(torn),
    });
    assert_eq!(
        response.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
        Err(EncodeError::Batch(BatchFramingError::Truncated {
            index: 1,
            needed: 92,
            available: 91
        }))
    );
}

// ---- payload: invariants, checked by decoder and encoder alike ----

#[test]
fn hello_ack_with_inconsistent_limits_is_rejected_both_ways() {
    let cramped = ConnectionLimits {
        max_frame_bytes: 1 << 20,
        max_batch_bytes: 1 << 20,
        ..valid_limits()
    };
    let reason = "max_frame_bytes leaves no room for a batch of max_batch_bytes";
    assert_eq!(
        decode_payload(
            MessageType::HelloAck,
            &hello_ack_payload(&cramped, 1),
            &LIMITS
        ),
        Err(PayloadError::InvalidValue {
            field: "limits",
            reason
        })
    );
    let ack = Message::from(HelloAck {
        version: ProtocolVersion::V1,
        broker_id: BrokerId::new(3),
        limits: cramped,
    });
    assert_eq!(
        ack.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
        Err(EncodeError::InvalidValue {
            field: "limits",
            reason
        })
    );
    for (limits, reason) in [
        (
            ConnectionLimits {
                max_frame_bytes: MAX_FRAME_BYTES + 1,
                ..valid_limits()
            },
            "max_frame_bytes exceeds the format maximum",
        ),
        (
            ConnectionLimits {
                max_batch_bytes: batch::MAX_BATCH_BYTES + 1,
                max_frame_bytes: MAX_FRAME_BYTES,
                ..valid_limits()
            },
            "max_batch_bytes exceeds the batch format maximum",
        ),
        (
            ConnectionLimits {
                max_batch_bytes: 63,
                ..valid_limits()
            },
            "max_batch_bytes is smaller than a batch header",
        ),
        (
            ConnectionLimits {
                max_list_entries: 0,
                ..valid_limits()
            },
            "max_list_entries is zero",
        ),
        (
            ConnectionLimits {
                max_in_flight_bytes: (16 << 20) - 1,
                ..valid_limits()
            },
            "max_in_flight_bytes is smaller than one frame",
        ),
        (
            ConnectionLimits {
                max_in_flight_batches: 0,
                ..valid_limits()
            },
            "max_in_flight_batches is zero",
        ),
    ] {
        assert_eq!(limits.check(), Err(reason));
    }
    assert_eq!(valid_limits().check(), Ok(()));
}

#[test]
fn hello_ack_choosing_an_unknown_version_is_rejected() {
    assert_eq!(
        decode_payload(
            MessageType::HelloAck,
            &hello_ack_payload(&valid_limits(), 2),
            &LIMITS
        ),
        Err(PayloadError::InvalidValue {
            field: "version",
            reason: "not a protocol version this build speaks"
        })
    );
}

fn metadata_with(info: StreamInfo) -> Message {
    Message::from(MetadataResponse {
        streams: vec![StreamMetadata {
            name: name("orders"),
            result: Ok(info),
        }],
    })
}

fn partition(id: u32) -> PartitionMetadata {
    PartitionMetadata {
        id: PartitionId::new(id),
        leader: None,
        leader_epoch: LeaderEpoch::new(1),
        log_start: Offset::new(0),
        high_watermark: Offset::new(0),
        local_start: Offset::new(0),
        tier_end: Offset::new(0),
        upload_backlog: UploadBacklog::default(),
        damaged: None,
    }
}

#[test]
fn metadata_partitions_must_be_ordered_and_in_range_both_ways() {
    let cases = [
        (
            3,
            vec![partition(1), partition(0)],
            "partition ids not strictly increasing",
        ),
        (
            3,
            vec![partition(1), partition(1)],
            "partition ids not strictly increasing",
        ),
        (
            2,
            vec![partition(2)],
            "partition id not below partition_count",
        ),
    ];
    for (partition_count, partitions, reason) in cases {
        let message = metadata_with(StreamInfo {
            ack_mode: AckMode::Quorum,
            partition_count,
            settings: StreamSettings::default(),
            partitions: partitions.clone(),
        });
        assert_eq!(
            message.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
            Err(EncodeError::InvalidValue {
                field: "partitions",
                reason
            })
        );
        // Encode a valid response, then break it on the wire: ids sit at a known position.
        let valid = metadata_with(StreamInfo {
            ack_mode: AckMode::Quorum,
            partition_count: 10,
            settings: StreamSettings::default(),
            partitions: (0..partitions.len() as u32).map(partition).collect(),
        });
        let mut bytes = encode(&valid, 1).to_vec();
        bytes[HEADER_LEN + 4 + 8 + 2 + 1..][..4].copy_from_slice(&partition_count.to_le_bytes());
        // After the partition count: six absent settings, then the entry count.
        let first_id_at = HEADER_LEN + 4 + 8 + 2 + 1 + 4 + 6 + 4;
        for (index, partition) in partitions.iter().enumerate() {
            bytes[first_id_at + index * (25 + 4 * 8 + 1)..][..4]
                .copy_from_slice(&partition.id.get().to_le_bytes());
        }
        let frame = decode_one(&Bytes::from(bytes), &LIMITS);
        assert_eq!(
            frame.message(&LIMITS),
            Err(PayloadError::InvalidValue {
                field: "partitions",
                reason
            })
        );
    }
}

#[test]
fn zero_partitions_are_rejected_both_ways() {
    let reason = "a stream has at least one partition";
    let create = Message::from(CreateStream {
        name: name("orders"),
        partition_count: 0,
        ack_mode: AckMode::Leader,
        settings: StreamSettings::default(),
    });
    assert_eq!(
        create.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
        Err(EncodeError::InvalidValue {
            field: "partition_count",
            reason
        })
    );
    let mut payload = string(b"orders");
    payload.extend_from_slice(&0u32.to_le_bytes());
    payload.extend_from_slice(&[1, 0, 0, 0, 0]);
    assert_eq!(
        decode_payload(MessageType::CreateStream, &payload, &LIMITS),
        Err(PayloadError::InvalidValue {
            field: "partition_count",
            reason
        })
    );
    let metadata = metadata_with(StreamInfo {
        ack_mode: AckMode::Leader,
        partition_count: 0,
        settings: StreamSettings::default(),
        partitions: Vec::new(),
    });
    assert_eq!(
        metadata.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
        Err(EncodeError::InvalidValue {
            field: "partition_count",
            reason
        })
    );
}

#[test]
fn produce_ack_last_offset_below_base_is_rejected_both_ways() {
    let reason = "below base_offset";
    let ack = Message::from(ProduceAck {
        results: vec![Ok(BatchAck {
            base_offset: Offset::new(10),
            last_offset: Offset::new(9),
        })],
    });
    assert_eq!(
        ack.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
        Err(EncodeError::InvalidValue {
            field: "last_offset",
            reason
        })
    );
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&0u16.to_le_bytes());
    payload.extend_from_slice(&10u64.to_le_bytes());
    payload.extend_from_slice(&9u64.to_le_bytes());
    assert_eq!(
        decode_payload(MessageType::ProduceAck, &payload, &LIMITS),
        Err(PayloadError::InvalidValue {
            field: "last_offset",
            reason
        })
    );
}

// ---- encoder ----

#[test]
fn encoder_refuses_fields_longer_than_their_prefix_and_leaves_the_buffer_alone() {
    let hello = Message::from(Hello {
        min_version: 1,
        max_version: 1,
        client_name: "x".repeat(70_000),
        auth_token: None,
    });
    let mut buf = BytesMut::from(&b"earlier frame"[..]);
    assert_eq!(
        hello.encode(ProtocolVersion::V1, RequestId::new(1), &mut buf),
        Err(EncodeError::FieldTooLong {
            field: "client_name",
            len: 70_000,
            max: 65_535
        })
    );
    assert_eq!(&buf[..], b"earlier frame");
}

#[test]
fn encoder_refuses_a_batch_whose_bytes_disagree_with_its_length() {
    let mut batch = produced_batch(0).to_vec();
    batch.push(0);
    let produce = Message::from(Produce {
        stream: name("orders"),
        partition: PartitionId::new(0),
        batches: vec![produced_batch(1), Bytes::from(batch)],
    });
    assert_eq!(
        produce.encode_chunks(ProtocolVersion::V1, RequestId::new(1)),
        Err(EncodeError::Batch(BatchFramingError::LengthMismatch {
            index: 1,
            declared: 92,
            actual: 93
        }))
    );
}

#[test]
fn encoder_refuses_frames_over_the_format_maximum() {
    // A batch of the largest allowed size, framed correctly (contents do not matter here),
    // shared three times: 96 MiB of payload without allocating it three times.
    let mut largest = vec![0u8; batch::MAX_BATCH_BYTES as usize];
    largest[8..12].copy_from_slice(&batch::MAX_BATCH_BYTES.to_le_bytes());
    let largest = Bytes::from(largest);
    let produce = Message::from(Produce {
        stream: name("orders"),
        partition: PartitionId::new(0),
        batches: vec![largest.clone(), largest.clone(), largest],
    });
    let mut buf = BytesMut::new();
    let error = produce
        .encode(ProtocolVersion::V1, RequestId::new(1), &mut buf)
        .expect_err("96 MiB is over the format maximum");
    // Header, stream name, partition, batch count, then the three batches.
    let frame_len = (HEADER_LEN + 2 + 6 + 4 + 4) as u64 + 3 * u64::from(batch::MAX_BATCH_BYTES);
    assert_eq!(
        error,
        EncodeError::FrameTooLarge {
            frame_len,
            max: MAX_FRAME_BYTES
        }
    );
    assert!(buf.is_empty());
}

// ---- mapping to wire codes ----

#[test]
fn decode_errors_map_to_wire_codes_and_retry_classes() {
    let header_errors = [
        (FrameError::BadMagic { found: [0; 4] }, ErrorCode::Malformed),
        (
            FrameError::UnsupportedVersion { version: 9 },
            ErrorCode::UnsupportedVersion,
        ),
        (
            FrameError::UnknownMessageType { message_type: 9 },
            ErrorCode::Malformed,
        ),
        (
            FrameError::UnknownFlags {
                flags: 1,
                message_type: MessageType::Fetch,
            },
            ErrorCode::Malformed,
        ),
        (
            FrameError::ReservedNotZero { value: 1 },
            ErrorCode::Malformed,
        ),
        (
            FrameError::FrameTooLarge {
                frame_len: 2,
                limit: 1,
            },
            ErrorCode::FrameTooLarge,
        ),
    ];
    for (error, code) in header_errors {
        assert_eq!(error.error_code(), code, "{error}");
        assert_eq!(code.retry_class(), RetryClass::Fatal);
    }
    assert_eq!(
        PayloadError::TrailingBytes { extra: 1 }.error_code(),
        ErrorCode::Malformed
    );
    assert_eq!(
        PayloadError::Batch(BatchFramingError::LengthMismatch {
            index: 0,
            declared: 64,
            actual: 65
        })
        .error_code(),
        ErrorCode::InvalidBatch
    );
}

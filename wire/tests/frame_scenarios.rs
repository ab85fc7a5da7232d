//! Scenarios that read like a connection's script: the handshake, and a stream carrying a
//! malformed request among good ones.

mod common;

use bytes::{Bytes, BytesMut};
use common::{decode_one, encode, name, produced_batch, raw_frame};
use floe_wire::frame::{
    self, AuthToken, BatchFramingError, ConnectionLimits, ErrorResponse, Fetch, FetchPosition,
    FrameDecoder, FrameLimits, Hello, HelloAck, MessageType, NoCommonVersion, PayloadError,
    Produce, ProtocolVersion, RequestId,
};
use floe_wire::{BrokerId, ErrorCode, Message, Offset, PartitionId, RetryClass};

const BROKER_LIMITS: ConnectionLimits = ConnectionLimits {
    max_frame_bytes: 4096,
    max_batch_bytes: 1024,
    max_list_entries: 100,
    max_in_flight_bytes: 1 << 20,
    max_in_flight_batches: 16,
};

#[test]
fn negotiation_picks_the_highest_common_version() {
    assert_eq!(frame::negotiate(1, 1), Ok(ProtocolVersion::V1));
    assert_eq!(frame::negotiate(1, 9), Ok(ProtocolVersion::V1));
    assert_eq!(frame::negotiate(0, 1), Ok(ProtocolVersion::V1));
    assert_eq!(ProtocolVersion::from_u8(1), Some(ProtocolVersion::V1));
    assert_eq!(ProtocolVersion::from_u8(0), None);
    assert_eq!(ProtocolVersion::from_u8(2), None);
}

#[test]
fn negotiation_refuses_a_client_with_no_common_version() {
    for (client_min, client_max) in [(2, 5), (0, 0), (3, 1), (255, 255)] {
        assert_eq!(
            frame::negotiate(client_min, client_max),
            Err(NoCommonVersion {
                client_min,
                client_max
            })
        );
    }
}

#[test]
fn auth_token_never_shows_in_debug_output() {
    let hello = Hello {
        min_version: 1,
        max_version: 1,
        client_name: "cli".to_owned(),
        auth_token: Some(AuthToken::new(&b"s3cr3t-value"[..])),
    };
    let shown = format!("{hello:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert!(shown.contains("12 bytes redacted"), "{shown}");
}

#[test]
fn handshake_sets_the_limits_both_sides_enforce() {
    // Client → broker: Hello, read under the broker's configured limits.
    let hello = Hello {
        min_version: 1,
        max_version: 3,
        client_name: "floe-cli/0.1.0".to_owned(),
        auth_token: Some(AuthToken::new(&b"token"[..])),
    };
    let broker_limits = BROKER_LIMITS.frame_limits();
    let wire = encode(&hello.clone().into(), 1);
    let frame = decode_one(&wire, &broker_limits);
    let Ok(Message::Hello(received)) = frame.message(&broker_limits) else {
        panic!("broker reads the hello");
    };
    assert_eq!(received, hello);

    // Broker → client: HelloAck in the negotiated version, with its limits.
    let version =
        frame::negotiate(received.min_version, received.max_version).expect("versions overlap");
    let ack = Message::from(HelloAck {
        version,
        broker_id: BrokerId::new(1),
        limits: BROKER_LIMITS,
    });
    let mut buf = BytesMut::new();
    ack.encode(version, frame.header.request_id, &mut buf)
        .expect("ack encodes");
    let reply = decode_one(&buf.freeze(), &FrameLimits::FORMAT_MAX);
    assert_eq!(reply.header.version, ProtocolVersion::V1);
    assert_eq!(reply.header.request_id, RequestId::new(1));
    let Ok(Message::HelloAck(ack)) = reply.message(&FrameLimits::FORMAT_MAX) else {
        panic!("client reads the ack");
    };
    assert_eq!(ack.limits, BROKER_LIMITS);

    // From now on a frame over the announced limit is refused from its header alone.
    let big = Message::from(Produce {
        stream: name("orders"),
        partition: PartitionId::new(0),
        batches: vec![produced_batch(0); 50],
    });
    let oversized = encode(&big, 2);
    assert_eq!(
        frame::decode_frame(&oversized, &ack.limits.frame_limits()).map_err(|e| e.error_code()),
        Err(ErrorCode::FrameTooLarge)
    );
}

#[test]
fn malformed_payload_costs_one_request_not_the_stream() {
    let fetch = Message::from(Fetch {
        stream: name("orders"),
        partition: PartitionId::new(0),
        position: FetchPosition::Offset(Offset::new(42)),
        max_bytes: 1 << 16,
        max_wait_ms: 100,
    });
    // A well-framed Produce whose only batch declares more bytes than it has.
    let mut torn = produced_batch(0).to_vec();
    torn.truncate(80);
    let mut payload = vec![6, 0];
    payload.extend_from_slice(b"orders");
    payload.extend_from_slice(&0u32.to_le_bytes());
    payload.extend_from_slice(&1u32.to_le_bytes());
    payload.extend_from_slice(&torn);
    let stream = [
        encode(&fetch, 1),
        raw_frame(MessageType::Produce.as_u8(), 2, &payload),
        encode(&fetch, 3),
    ]
    .concat();

    let limits = BROKER_LIMITS.frame_limits();
    let mut decoder = FrameDecoder::new(limits);
    decoder.extend_from_slice(&stream);
    let mut answers = Vec::new();
    while let Some(frame) = decoder.next_frame().expect("framing holds") {
        let answer = match frame.message(&limits) {
            Ok(message) => Ok(message),
            Err(error) => Err(ErrorResponse {
                code: error.error_code(),
                message: error.to_string(),
                details: None,
            }),
        };
        answers.push((frame.header.request_id.get(), answer));
    }
    assert_eq!(answers.len(), 3);
    assert_eq!(answers[0], (1, Ok(fetch.clone())));
    assert_eq!(answers[2], (3, Ok(fetch)));
    let (id, Err(error)) = &answers[1] else {
        panic!("the torn produce is refused: {:?}", answers[1]);
    };
    assert_eq!(*id, 2);
    assert_eq!(error.code, ErrorCode::InvalidBatch);
    assert_eq!(error.code.retry_class(), RetryClass::Fatal);
    assert_eq!(
        error.message,
        PayloadError::Batch(BatchFramingError::Truncated {
            index: 0,
            needed: 92,
            available: 80
        })
        .to_string()
    );
    // The error answer itself encodes for request 2.
    let reply = encode(&Message::Error(error.clone()), *id);
    assert_eq!(
        decode_one(&Bytes::copy_from_slice(&reply), &limits)
            .header
            .request_id,
        RequestId::new(2)
    );
}

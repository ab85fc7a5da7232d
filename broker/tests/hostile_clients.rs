//! Bad input from clients gets a typed error or a closed stream, loses nothing, and the broker
//! goes on serving everyone else.

mod common;

use common::*;
use floe_wire::frame::{
    CreateStream, ErrorCode, Fetch, FetchPosition, Message, MetadataRequest, Produce,
    StreamSettings,
};
use floe_wire::{AckMode, BatchBuilder, Offset, PartitionId, StreamName};
use rand::{Rng, SeedableRng};

fn create(name: &str) -> Message {
    Message::from(CreateStream {
        name: StreamName::new(name).expect("name"),
        partition_count: 1,
        ack_mode: AckMode::Leader,
        settings: StreamSettings::default(),
    })
}

fn batch(values: &[&str]) -> bytes::Bytes {
    let mut b = BatchBuilder::new(1 << 20);
    for v in values {
        b.push(1_000, None, v.as_bytes(), &[]).expect("push");
    }
    b.finish().expect("finish")
}

fn produce(stream: &str, batches: Vec<bytes::Bytes>) -> Message {
    Message::Produce(Produce {
        stream: StreamName::new(stream).expect("name"),
        partition: PartitionId::new(0),
        batches,
    })
}

fn error_code(message: &Message) -> ErrorCode {
    match message {
        Message::Error(e) => e.code,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn log_end(conn: &quinn::Connection, stream: &str) -> Offset {
    let request = Message::MetadataRequest(MetadataRequest {
        streams: vec![StreamName::new(stream).expect("name")],
    });
    match request_msg(conn, &request).await {
        Message::MetadataResponse(r) => {
            let info = r.streams[0].result.as_ref().expect("stream exists");
            info.partitions[0].high_watermark
        }
        other => panic!("expected metadata, got {other:?}"),
    }
}

async fn request_msg(conn: &quinn::Connection, m: &Message) -> Message {
    request(conn, m).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_typed_errors_and_the_broker_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start_broker(dir.path()).await;
    let addr = broker.running.quic_addr;
    let good = ready(addr, &broker.ca).await;
    assert!(matches!(
        request(&good, &create("orders")).await,
        Message::CreateStreamResponse(_)
    ));
    match request(&good, &produce("orders", vec![batch(&["a", "b"])])).await {
        Message::ProduceAck(ack) => assert!(ack.results[0].is_ok(), "{ack:?}"),
        other => panic!("{other:?}"),
    }

    let hostile = connect(addr, &broker.ca).await;
    // Before Hello, requests are refused.
    let before = request(
        &hostile,
        &Message::MetadataRequest(MetadataRequest { streams: vec![] }),
    )
    .await;
    assert_eq!(error_code(&before), ErrorCode::HandshakeRequired);
    assert!(matches!(
        request(&hostile, &hello()).await,
        Message::HelloAck(_)
    ));
    // A second Hello is refused; the connection keeps the version it negotiated.
    assert_eq!(
        error_code(&request(&hostile, &hello()).await),
        ErrorCode::InvalidRequest
    );
    // The broker tells a client how many batches a producer may keep in flight: as many as
    // its log remembers per producer.
    match request(&connect(addr, &broker.ca).await, &hello()).await {
        Message::HelloAck(ack) => assert_eq!(
            usize::from(ack.limits.max_in_flight_batches),
            floe_hot_log::PRODUCER_BATCHES_REMEMBERED
        ),
        other => panic!("{other:?}"),
    }

    // An unknown protocol version in the header.
    let mut bytes = encode(&hello(), 2).to_vec();
    bytes[4] = 9;
    let answer = exchange_raw(&hostile, &bytes).await.expect("answer");
    assert_eq!(
        error_code(&decode_response(&answer)),
        ErrorCode::UnsupportedVersion
    );

    // Unknown message type and unknown flags.
    let mut bytes = encode(&hello(), 3).to_vec();
    bytes[5] = 0x7f;
    let answer = exchange_raw(&hostile, &bytes).await.expect("answer");
    assert!(matches!(decode_response(&answer), Message::Error(_)));
    let mut bytes = encode(&hello(), 4).to_vec();
    bytes[6] = 0x80;
    let answer = exchange_raw(&hostile, &bytes).await.expect("answer");
    assert!(matches!(decode_response(&answer), Message::Error(_)));

    // A frame header announcing more than the broker's frame limit: refused before reading it.
    let mut bytes = encode(&hello(), 5).to_vec();
    bytes[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let answer = exchange_raw(&hostile, &bytes[..20]).await.expect("answer");
    assert_eq!(
        error_code(&decode_response(&answer)),
        ErrorCode::FrameTooLarge
    );

    // Truncated frames: the stream ends early; the broker just drops it.
    let whole = encode(&produce("orders", vec![batch(&["x"])]), 6);
    for cut in [3, 19, 20, 25, whole.len() - 1] {
        let answer = exchange_raw(&hostile, &whole[..cut]).await;
        assert!(
            answer.as_ref().map_or(true, |a| a.is_empty()),
            "cut {cut}: {answer:?}"
        );
    }

    // A batch with a wrong CRC: refused, nothing appended.
    let end_before = log_end(&good, "orders").await;
    let mut bad = batch(&["evil"]).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    match request(&hostile, &produce("orders", vec![bad.into()])).await {
        Message::ProduceAck(ack) => assert_eq!(ack.results, vec![Err(ErrorCode::InvalidBatch)]),
        other => panic!("expected a ProduceAck with an error, got {other:?}"),
    }
    // A control batch: only a partition's leader writes those. Refused, nothing appended.
    let forged = floe_wire::batch::control_batch(floe_wire::ControlKind::EpochStart, 0);
    match request(&hostile, &produce("orders", vec![forged])).await {
        Message::ProduceAck(ack) => assert_eq!(ack.results, vec![Err(ErrorCode::InvalidBatch)]),
        other => panic!("expected a ProduceAck with an error, got {other:?}"),
    }
    assert_eq!(log_end(&good, "orders").await, end_before);
    // An oversized batch: refused by the codec limit or the log limit.
    let huge = {
        let mut b = BatchBuilder::new(32 << 20);
        b.push(0, None, &vec![7u8; 9 << 20], &[]).expect("push");
        b.finish().expect("finish")
    };
    let answer = request(&hostile, &produce("orders", vec![huge])).await;
    match answer {
        Message::Error(e) => assert!(
            matches!(e.code, ErrorCode::BatchTooLarge | ErrorCode::FrameTooLarge),
            "{e:?}"
        ),
        Message::ProduceAck(ack) => assert_eq!(ack.results, vec![Err(ErrorCode::BatchTooLarge)]),
        other => panic!("{other:?}"),
    }

    // Random garbage on many streams.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for _ in 0..50 {
        let len = rng.random_range(0..300);
        let garbage: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let _ = exchange_raw(&hostile, &garbage).await;
    }

    // Nothing was lost and the well-behaved client is still served, on the same connection
    // and on a new one.
    assert_eq!(log_end(&good, "orders").await, end_before);
    match request(&good, &produce("orders", vec![batch(&["c"])])).await {
        Message::ProduceAck(ack) => {
            assert_eq!(ack.results[0].map(|a| a.base_offset), Ok(Offset::new(2)))
        }
        other => panic!("{other:?}"),
    }
    let fresh = ready(addr, &broker.ca).await;
    let fetch = Message::Fetch(Fetch {
        stream: StreamName::new("orders").expect("name"),
        partition: PartitionId::new(0),
        position: FetchPosition::Earliest,
        max_bytes: 1 << 20,
        max_wait_ms: 0,
    });
    match request(&fresh, &fetch).await {
        Message::FetchResponse(r) => {
            assert_eq!(r.next_offset, Offset::new(3));
            let mut values = Vec::new();
            let mut rest = r.records.clone();
            while !rest.is_empty() {
                let (b, tail) = floe_wire::RecordBatch::decode_prefix(&rest).expect("valid batch");
                values.extend(b.records().map(|rec| rec.value.to_vec()));
                rest = tail;
            }
            assert_eq!(values, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        }
        other => panic!("{other:?}"),
    }
    broker.running.shutdown().await.expect("shutdown");
}

//! The broker's history read rate (`--history-read-rate`): a consumer reading sealed
//! segments from the start is served at no more than the cap, its waits show in `/metrics`,
//! and a consumer reading the active segment at the tail is not held back by it.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use floe_broker::run;
use floe_broker::tls::DevCertificates;
use floe_wire::frame::{
    CreateStream, Fetch, FetchPosition, FetchResponse, Message, Produce, StreamSettings,
};
use floe_wire::{AckMode, BatchBuilder, Offset, PartitionId, StreamName};

const MIB: u64 = 1024 * 1024;
/// The cap under test: 4 MiB/s, with a burst of a tenth of that.
const RATE: u64 = 4 * MIB;

fn stream() -> StreamName {
    StreamName::new("history").expect("name")
}

/// About 1 MiB of 1 KiB records.
fn batch() -> Bytes {
    let mut b = BatchBuilder::new(1 << 20);
    let value = vec![b'h'; 1000];
    while b.len() + 1100 < 1 << 20 {
        b.push(0, None, &value, &[]).expect("push");
    }
    b.finish().expect("finish")
}

async fn fetch(conn: &quinn::Connection, from: Offset, max_bytes: u32) -> FetchResponse {
    let fetch = Message::Fetch(Fetch {
        stream: stream(),
        partition: PartitionId::new(0),
        position: FetchPosition::Offset(from),
        max_bytes,
        max_wait_ms: 0,
    });
    match request(conn, &fetch).await {
        Message::FetchResponse(r) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_catching_up_is_served_at_the_history_read_rate_and_the_tail_is_not() {
    install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = DevCertificates::ensure(&dir.path().join("tls")).expect("certificates");
    let listen = "127.0.0.1:0".parse().expect("addr");
    let mut settings = run::Settings::new(dir.path().join("data"), listen, certs.server.clone());
    settings.metrics_listen = Some("127.0.0.1:0".parse().expect("addr"));
    settings.history_read_bytes_per_second = Some(RATE);
    if let Ok(mark) = std::env::var("FLOE_DISK_HIGH_WATER") {
        settings.disk_high_water = mark.parse().expect("FLOE_DISK_HIGH_WATER");
    }
    let broker = run::start(settings).await.expect("broker starts");
    let metrics_addr = broker.metrics_addr.expect("metrics").to_string();
    let conn = ready(broker.quic_addr, &certs.ca).await;

    // 8 MiB segments: 24 batches of ~1 MiB leave two sealed segments of eight batches each
    // (a read never crosses a segment) and the newest eight batches in the active one.
    let create = Message::from(CreateStream {
        name: stream(),
        partition_count: 1,
        ack_mode: AckMode::Leader,
        settings: StreamSettings {
            segment_bytes: Some(8 * MIB),
            ..StreamSettings::default()
        },
    });
    assert!(matches!(
        request(&conn, &create).await,
        Message::CreateStreamResponse(_)
    ));
    let batch = batch();
    for _ in 0..24 {
        let produce = Message::Produce(Produce {
            stream: stream(),
            partition: PartitionId::new(0),
            batches: vec![batch.clone()],
        });
        match request(&conn, &produce).await {
            Message::ProduceAck(ack) => assert!(ack.results.iter().all(Result::is_ok), "{ack:?}"),
            other => panic!("{other:?}"),
        }
    }
    let per_batch = u64::from(
        floe_wire::BatchHeader::parse(&batch)
            .expect("header")
            .record_count,
    );
    let sealed_end = Offset::new(16 * per_batch);

    let started = Instant::now();
    let first = fetch(&conn, Offset::new(0), 8 * MIB as u32).await;
    let mut read = first.records.len() as u64;
    assert!(
        read > 7 * MIB,
        "the first segment in one fetch: {read} bytes"
    );

    // That read of history left the budget almost 2 s in debt. The tail (the active
    // segment's records) is served at once all the same.
    let tail = Instant::now();
    let at_tail = fetch(
        &conn,
        Offset::new(first.high_watermark.get() - 100),
        MIB as u32,
    )
    .await;
    assert!(!at_tail.records.is_empty(), "records at the tail");
    assert!(
        tail.elapsed() < Duration::from_millis(750),
        "a tail read waited {:?} behind history",
        tail.elapsed()
    );

    // Reading on to the end of the sealed history takes as long as the cap asks.
    let mut from = first.next_offset;
    let mut last = 0;
    // A fetch that cannot start within a second (these ask not to wait) is answered empty
    // after that second, and asked again.
    let mut empty = 0;
    while from < sealed_end {
        let response = fetch(&conn, from, MIB as u32).await;
        if response.records.is_empty() {
            assert_eq!(response.next_offset, from);
            empty += 1;
            assert!(empty < 30, "history from {from} never came");
            continue;
        }
        last = response.records.len() as u64;
        read += last;
        from = response.next_offset;
    }
    let elapsed = started.elapsed();
    // Every byte but the last read's (charged once it was served) and the burst was paid
    // for at the rate before the last read could start.
    let paid = read - last - RATE / 10;
    let least = Duration::from_secs_f64(paid as f64 / RATE as f64);
    assert!(
        elapsed >= least.mul_f64(0.95),
        "{read} bytes of history in {elapsed:?}, at least {least:?} at {RATE} B/s"
    );
    let waited = metric(
        &http_get(&metrics_addr, "/metrics").await,
        "floe_history_read_throttle_seconds_total",
    );
    // The waits are shorter than `least` by the time spent reading and answering between
    // them (the bucket refills meanwhile): a loose bound, the elapsed time above is the
    // strict one.
    assert!(
        waited >= least.as_secs_f64() * 0.5,
        "the throttle's waits in /metrics: {waited} s, against {least:?}"
    );
}

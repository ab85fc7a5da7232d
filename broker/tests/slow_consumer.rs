//! A consumer that stops reading stalls only itself: the broker's memory stays bounded and a
//! producer on the same stream goes on being acknowledged.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use floe_wire::frame::{CreateStream, Fetch, FetchPosition, Message, Produce, StreamSettings};
use floe_wire::{AckMode, BatchBuilder, PartitionId, StreamName};

const MIB: u64 = 1024 * 1024;

fn big_batch() -> Bytes {
    let mut b = BatchBuilder::new(1 << 20);
    let value = vec![b'v'; 1000];
    while b.len() + 1100 < 512 * 1024 {
        b.push(0, None, &value, &[]).expect("push");
    }
    b.finish().expect("finish")
}

async fn publish(conn: &quinn::Connection, batch: &Bytes, requests: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..requests {
        let produce = Message::Produce(Produce {
            stream: StreamName::new("s").expect("name"),
            partition: PartitionId::new(0),
            batches: vec![batch.clone()],
        });
        match request(conn, &produce).await {
            Message::ProduceAck(ack) => assert!(ack.results.iter().all(Result::is_ok), "{ack:?}"),
            other => panic!("{other:?}"),
        }
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_consumer_bounds_broker_memory_and_does_not_block_producers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let producer = ready(broker.addr(), broker.ca()).await;
    let create = Message::from(CreateStream {
        name: StreamName::new("s").expect("name"),
        partition_count: 1,
        ack_mode: AckMode::Leader,
        settings: StreamSettings::default(),
    });
    assert!(matches!(
        request(&producer, &create).await,
        Message::CreateStreamResponse(_)
    ));
    let batch = big_batch();
    // 64 MiB of history for the stalled consumers to ask for.
    let baseline = publish(&producer, &batch, 128).await;
    let rss_before = broker.rss_bytes();

    // Two connections, each with 24 fetches of up to 8 MiB that nobody ever reads: without a
    // bound the broker would hold 2 × 24 × 8 MiB = 384 MiB of responses.
    let mut stalled = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..2 {
        let conn = ready(broker.addr(), broker.ca()).await;
        for i in 0..24u64 {
            let (mut send, recv) = conn.open_bi().await.expect("stream");
            let fetch = Message::Fetch(Fetch {
                stream: StreamName::new("s").expect("name"),
                partition: PartitionId::new(0),
                position: FetchPosition::Offset(floe_wire::Offset::new(i * 1000)),
                max_bytes: 8 * MIB as u32,
                max_wait_ms: 0,
            });
            send.write_all(&encode(&fetch, i + 10))
                .await
                .expect("send fetch");
            send.finish().expect("finish");
            stalled.push((send, recv)); // never read
        }
        connections.push(conn);
    }

    // The producer on the same stream is still acknowledged, at a comparable pace.
    let during = publish(&producer, &batch, 128).await;
    let rss_after = broker.rss_bytes();
    let growth = rss_after.saturating_sub(rss_before);
    // Per stalled connection: the fetch budget (32 MiB) plus QUIC's send buffer (16 MiB).
    assert!(
        growth < 2 * 48 * MIB + 32 * MIB,
        "broker grew by {} MiB",
        growth / MIB
    );
    assert!(
        during < baseline * 5 + Duration::from_secs(2),
        "publishing took {during:?} beside stalled consumers, {baseline:?} before"
    );
    eprintln!(
        "broker RSS grew by {} MiB beside stalled consumers",
        growth / MIB
    );
    drop(stalled);
    drop(connections);
}

//! The broker as a process: a graceful stop syncs everything, even what ack mode `none`
//! acknowledged before it was durable.

mod common;

use bytes::Bytes;
use common::*;
use floe_wire::frame::{CreateStream, Fetch, FetchPosition, Message, Produce, StreamSettings};
use floe_wire::{AckMode, BatchBuilder, Offset, PartitionId, RecordBatch, StreamName};

fn name() -> StreamName {
    StreamName::new("events").expect("name")
}

fn batch(i: u32) -> Bytes {
    let mut b = BatchBuilder::new(1 << 16);
    for j in 0..10 {
        b.push(1_000, None, format!("{i}-{j}").as_bytes(), &[])
            .expect("push");
    }
    b.finish().expect("finish")
}

async fn count_records(conn: &quinn::Connection) -> u64 {
    let mut from = Offset::ZERO;
    let mut count = 0;
    loop {
        let fetch = Message::Fetch(Fetch {
            stream: name(),
            partition: PartitionId::new(0),
            position: FetchPosition::Offset(from),
            max_bytes: 1 << 20,
            max_wait_ms: 0,
        });
        let Message::FetchResponse(r) = request(conn, &fetch).await else {
            panic!("fetch failed")
        };
        if r.records.is_empty() {
            return count;
        }
        let mut rest = r.records.clone();
        while !rest.is_empty() {
            let (b, tail) = RecordBatch::decode_prefix(&rest).expect("valid batch");
            count += b
                .records()
                .filter(|rec| {
                    b.header().base_offset.get() + u64::from(rec.offset_delta) >= from.get()
                })
                .count() as u64;
            rest = tail;
        }
        from = r.next_offset;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_syncs_every_log_before_exiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = BrokerProcess::start(dir.path());
    let conn = ready(broker.addr(), broker.ca()).await;
    let create = Message::from(CreateStream {
        name: name(),
        partition_count: 1,
        ack_mode: AckMode::None,
        settings: StreamSettings::default(),
    });
    assert!(matches!(
        request(&conn, &create).await,
        Message::CreateStreamResponse(_)
    ));
    for i in 0..300 {
        let produce = Message::Produce(Produce {
            stream: name(),
            partition: PartitionId::new(0),
            batches: vec![batch(i)],
        });
        let ack = match request(&conn, &produce).await {
            Message::ProduceAck(ack) => ack,
            other => panic!("produce {i} answered {other:?}"),
        };
        assert!(ack.results[0].is_ok());
    }
    let status = std::process::Command::new("kill")
        .args(["-TERM", &broker.child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = broker.child.wait().expect("wait");
    assert!(exit.success(), "broker exited with {exit}");
    let log = std::fs::read_to_string(&broker.log_path).expect("log");
    assert!(log.contains("every log synced and closed"), "{log}");

    let broker = BrokerProcess::start(dir.path());
    let conn = ready(broker.addr(), broker.ca()).await;
    assert_eq!(count_records(&conn).await, 3000);
}

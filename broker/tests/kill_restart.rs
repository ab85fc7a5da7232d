//! SIGKILL the broker in the middle of a publish of 100,000 records, restart it, let the
//! producer retry: every acknowledged record is read back exactly once, in order, from
//! batches whose checksums are valid.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use floe_client::{
    AckMode, Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer,
    ProducerConfig, ProducerRecord, StreamName, StreamSettings,
};

const RECORDS: u64 = 100_000;
const KILL_AFTER: u64 = 40_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_sigkill_exactly_once_and_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = BrokerProcess::start(dir.path());
    let listen = broker.addr().to_string();
    let mut config = ClientConfig::from_profile(&broker.profile);
    config.reconnect_attempts = 50;
    config.reconnect_backoff_max = Duration::from_millis(200);
    let client = Client::connect(config).await.expect("connect");
    let stream = StreamName::new("kill-test").expect("name");
    client
        .create_stream(&stream, 1, AckMode::Leader, StreamSettings::default())
        .await
        .expect("create");
    let producer_config = ProducerConfig {
        max_retries: 100,
        retry_backoff_max: Duration::from_millis(200),
        delivery_timeout: Duration::from_secs(60),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, stream.clone(), producer_config)
        .await
        .expect("producer");

    let mut deliveries = Vec::with_capacity(RECORDS as usize);
    for i in 0..RECORDS {
        if i == KILL_AFTER {
            broker.kill();
            broker = BrokerProcess::start_on(dir.path(), &listen);
        }
        let record =
            ProducerRecord::new(format!("record-{i:06}")).with_partition(PartitionId::new(0));
        let delivery = producer.send(record).await.expect("send accepted");
        deliveries.push((i, tokio::spawn(delivery)));
    }
    let mut acked: HashMap<u64, u64> = HashMap::new(); // offset → record number
    let mut failed = 0;
    for (i, delivery) in deliveries {
        match delivery.await.expect("delivery task") {
            Ok(offset) => {
                assert!(
                    acked.insert(offset.get(), i).is_none(),
                    "offset {offset} acknowledged twice"
                );
            }
            Err(e) => {
                failed += 1;
                eprintln!("record {i} not acknowledged: {e}");
            }
        }
    }
    assert!(
        acked.len() as u64 > RECORDS - 1000,
        "only {} of {RECORDS} acknowledged",
        acked.len()
    );

    // Read everything back (after a second, clean restart to be sure it is on disk).
    broker.kill();
    let broker = BrokerProcess::start_on(dir.path(), &listen);
    let reader = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect");
    let mut consumer = Consumer::new(
        reader,
        stream,
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let mut seen = HashMap::new();
    let mut last = None;
    let total = acked.len() as u64 + failed;
    let mut read = 0u64;
    while read < total {
        let Ok(Some(record)) = consumer.poll(Duration::from_secs(2)).await else {
            break;
        };
        read += 1;
        let text = String::from_utf8(record.value.to_vec()).expect("utf-8");
        let number: u64 = text
            .trim_start_matches("record-")
            .parse()
            .expect("record number");
        assert!(
            seen.insert(number, record.offset.get()).is_none(),
            "record {number} read twice"
        );
        assert!(
            last.is_none_or(|l| l < number),
            "record {number} after {last:?}: out of order"
        );
        last = Some(number);
    }
    for (offset, number) in &acked {
        assert_eq!(
            seen.get(number),
            Some(offset),
            "acknowledged record {number} at {offset} missing or moved"
        );
    }
    eprintln!(
        "{} acknowledged, {failed} failed, {} read back",
        acked.len(),
        seen.len()
    );
}

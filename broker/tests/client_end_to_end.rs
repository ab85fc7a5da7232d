//! The client library against a real `floe-broker dev` process over QUIC on loopback:
//! publish and read back in order, long-poll at the tail, survive a broker crash.

mod common;

use std::path::Path;
use std::time::Duration;

use common::BrokerProcess;
use floe_client::{
    AckMode, Client, ClientConfig, Consumer, ConsumerConfig, Delivery, FetchPosition, Offset,
    PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName, StreamSettings,
};

/// A client of `broker` that notices a killed broker within a few seconds (the negotiated
/// idle timeout is the smaller of the two sides').
async fn connect(broker: &BrokerProcess) -> Client {
    let mut config = ClientConfig::from_profile(&broker.profile);
    config.connect_timeout = Duration::from_secs(5);
    config.request_timeout = Duration::from_secs(10);
    config.idle_timeout = Duration::from_secs(3);
    Client::connect(config).await.expect("connects")
}

/// SIGKILLs the broker and starts it again on the same port and data directory.
fn crash_and_restart(broker: &mut BrokerProcess, dir: &Path) {
    let listen = broker.addr().to_string();
    broker.kill();
    *broker = BrokerProcess::start_on(dir, &listen);
}

fn name(text: &str) -> StreamName {
    StreamName::new(text).expect("a valid stream name")
}

async fn create(client: &Client, stream: &StreamName, partitions: u32) {
    client
        .create_stream(
            stream,
            partitions,
            AckMode::Leader,
            StreamSettings::default(),
        )
        .await
        .expect("the stream is created");
}

/// Reads `count` records of one partition from the start, failing after `deadline`.
async fn read_all(
    client: &Client,
    stream: &StreamName,
    partition: u32,
    count: usize,
) -> Vec<floe_client::ConsumedRecord> {
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(partition),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let mut records = Vec::with_capacity(count);
    while records.len() < count {
        let record = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("records arrive in time")
            .expect("a record");
        records.push(record);
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_records_come_back_in_order_with_the_offsets_their_producer_was_told() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let broker = BrokerProcess::start(dir.path());
    let client = connect(&broker).await;
    let stream = name("orders");
    create(&client, &stream, 2).await;
    let config = ProducerConfig {
        // Small batches, so that many are in flight at once and ordering is exercised.
        max_batch_bytes: 4096,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, stream.clone(), config)
        .await
        .expect("a producer");
    const RECORDS: u64 = 10_000;
    let mut deliveries: Vec<(u64, Delivery)> = Vec::new();
    for i in 0..RECORDS {
        let record = ProducerRecord::new(format!("record-{i}"))
            .with_key(format!("key-{i}"))
            .with_partition(PartitionId::new((i % 2) as u32));
        deliveries.push((i, producer.send(record).await.expect("buffered")));
    }
    producer.flush().await.expect("every batch is acknowledged");
    for (i, delivery) in deliveries {
        let offset = delivery.await.expect("acknowledged");
        assert_eq!(offset, Offset::new(i / 2), "record {i}");
    }
    // Pipelined requests (one batch each, five in flight per partition) reached the log in
    // sequence order: none was refused and resent.
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let text = common::http_get(&metrics, "/metrics").await;
    assert!(
        text.contains("floe_publish_batches_total"),
        "the broker's metrics are served"
    );
    // Every acknowledgement in `leader` mode waited for an fdatasync, and each was timed.
    let syncs = common::metric(&text, "floe_log_fsync_latency_seconds_count");
    assert!(syncs > 0.0, "the broker counted its fsyncs");
    assert!(
        !text.contains("floe_publish_refused_batches_total{"),
        "no batch was refused: {}",
        text.lines()
            .filter(|l| l.contains("refused"))
            .collect::<Vec<_>>()
            .join("; ")
    );

    for partition in 0..2u32 {
        let records = read_all(&client, &stream, partition, (RECORDS / 2) as usize).await;
        for (n, record) in records.iter().enumerate() {
            let i = n as u64 * 2 + u64::from(partition);
            assert_eq!(record.offset, Offset::new(n as u64));
            assert_eq!(record.partition, PartitionId::new(partition));
            assert_eq!(&record.value[..], format!("record-{i}").as_bytes());
            assert_eq!(record.key.as_deref(), Some(format!("key-{i}").as_bytes()));
        }
    }
    let info = client.stream(&stream).await.expect("metadata");
    let watermarks: Vec<u64> = info
        .partitions
        .iter()
        .map(|p| p.high_watermark.get())
        .collect();
    assert_eq!(
        watermarks,
        [RECORDS / 2, RECORDS / 2],
        "nothing stored twice"
    );
    producer.close().await.expect("closed cleanly");
}

/// `send_all` buffers many records in one call: more than the producer's buffer holds at
/// once (it takes them a share at a time), across batches and partitions, in order. A call
/// with one record that cannot be sent buffers none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_records_sent_in_one_call_come_back_with_their_offsets() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let broker = BrokerProcess::start(dir.path());
    let client = connect(&broker).await;
    let stream = name("bulk");
    create(&client, &stream, 2).await;
    let config = ProducerConfig {
        max_batch_bytes: 16 * 1024,
        // A quarter of one call's records: the call waits for room three times.
        buffer_bytes: 64 * 1024,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, stream.clone(), config)
        .await
        .expect("a producer");
    let value = |i: usize| format!("bulk-{i:05}-{}", "v".repeat(40));
    let records: Vec<ProducerRecord> = (0..4_000)
        .map(|i| ProducerRecord::new(value(i)).with_partition(PartitionId::new((i % 2) as u32)))
        .collect();

    // One record too large for a batch: nothing of the call is buffered.
    let mut refused = records[..10].to_vec();
    refused.push(ProducerRecord::new(vec![0u8; 32 * 1024]));
    let error = producer
        .send_all(&refused)
        .await
        .expect_err("a record larger than a batch was buffered");
    assert!(
        matches!(error, floe_client::Error::InvalidRecord(_)),
        "{error}"
    );

    let deliveries = producer.send_all(&records).await.expect("buffered");
    assert_eq!(deliveries.len(), records.len());
    let offsets = deliveries.await.expect("acknowledged");
    let expected: Vec<Offset> = (0..records.len())
        .map(|i| Offset::new((i / 2) as u64))
        .collect();
    assert_eq!(
        offsets, expected,
        "offsets in record order, none from the refused call"
    );
    for partition in 0..2u32 {
        let read = read_all(&client, &stream, partition, records.len() / 2).await;
        for (n, record) in read.iter().enumerate() {
            assert_eq!(record.offset, Offset::new(n as u64));
            assert_eq!(
                &record.value[..],
                value(n * 2 + partition as usize).as_bytes()
            );
        }
    }
    let info = client.stream(&stream).await.expect("metadata");
    let ends: Vec<u64> = info
        .partitions
        .iter()
        .map(|p| p.high_watermark.get())
        .collect();
    assert_eq!(ends, [2_000, 2_000], "each record stored once");
    producer.close().await.expect("closed cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_from_latest_long_polls_and_receives_a_record_published_afterwards() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let broker = BrokerProcess::start(dir.path());
    let client = connect(&broker).await;
    let stream = name("tail");
    create(&client, &stream, 1).await;
    let producer = Producer::new(&client, stream.clone(), ProducerConfig::default())
        .await
        .expect("a producer");
    let old = acknowledged(&producer, "before").await;
    assert_eq!(old, Offset::new(0));

    let config = ConsumerConfig {
        max_wait: Duration::from_secs(20),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Latest,
        config,
    );
    assert_eq!(
        consumer.resolve_position().await.expect("resolved"),
        Offset::new(1)
    );
    let waiting = tokio::spawn(async move {
        let record = consumer.next().await;
        (record, consumer.fetch_count())
    });
    let new = acknowledged(&producer, "after").await;
    let (record, fetches) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiting fetch is answered when the record arrives")
        .expect("the task ran");
    let record = record.expect("a record");
    assert_eq!(record.offset, new);
    assert_eq!(&record.value[..], b"after");
    // One fetch resolved the position, one or two more waited at the broker: a consumer
    // that polled without waiting would have made many.
    assert!(fetches <= 3, "{fetches} fetches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_waits_a_bounded_time_for_a_stream_that_is_being_created() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let broker = BrokerProcess::start(dir.path());
    let client = connect(&broker).await;

    // A stream that never comes: UnknownStream once the wait is over, not before.
    let config = ProducerConfig {
        metadata_wait: Duration::from_millis(600),
        ..ProducerConfig::default()
    };
    let started = std::time::Instant::now();
    let err = Producer::new(&client, name("never"), config.clone())
        .await
        .expect_err("no such stream");
    assert_eq!(
        err.code(),
        Some(floe_client::ErrorCode::UnknownStream),
        "{err}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && waited < Duration::from_secs(5),
        "waited {waited:?}"
    );

    // A stream created while the producer waits: the producer starts and publishes.
    let stream = name("late");
    let creator = {
        let client = client.clone();
        let stream = stream.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            create(&client, &stream, 1).await;
        })
    };
    let config = ProducerConfig {
        metadata_wait: Duration::from_secs(10),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, stream.clone(), config)
        .await
        .expect("a producer once the stream exists");
    creator.await.expect("created");
    let offset = acknowledged(&producer, "first").await;
    assert_eq!(offset, Offset::new(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_crash_mid_publish_loses_no_record_and_duplicates_none() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut broker = BrokerProcess::start(dir.path());
    let client = connect(&broker).await;
    let stream = name("crash");
    create(&client, &stream, 1).await;
    let producer = Producer::new(&client, stream.clone(), ProducerConfig::default())
        .await
        .expect("a producer");
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let mut deliveries = Vec::new();
    for i in 0..500 {
        deliveries.push(send(&producer, i).await);
    }
    producer
        .flush()
        .await
        .expect("acknowledged before the crash");
    for i in 0..200u64 {
        let record = consumer.next().await.expect("a record before the crash");
        assert_eq!(record.offset, Offset::new(i));
    }

    // Records buffered and in flight when the broker dies, and more after it is back: the
    // producer resends over a new connection and the broker drops what it already had.
    for i in 500..1000 {
        deliveries.push(send(&producer, i).await);
    }
    tokio::task::block_in_place(|| crash_and_restart(&mut broker, dir.path()));
    for i in 1000..1500 {
        deliveries.push(send(&producer, i).await);
    }
    producer
        .flush()
        .await
        .expect("acknowledged after the restart");
    for (i, delivery) in deliveries.into_iter().enumerate() {
        let offset = delivery.await.expect("acknowledged");
        assert_eq!(offset, Offset::new(i as u64), "stored once, in send order");
    }

    // The consumer resumes where it stopped.
    for i in 200..1500u64 {
        let record = tokio::time::timeout(Duration::from_secs(15), consumer.next())
            .await
            .expect("records arrive in time")
            .expect("a record after the crash");
        assert_eq!(record.offset, Offset::new(i), "no gap, no duplicate");
        assert_eq!(&record.value[..], format!("v{i}").as_bytes());
    }
    let info = client.stream(&stream).await.expect("metadata");
    assert_eq!(info.partitions[0].high_watermark, Offset::new(1500));
}

/// Publishes one record and waits for its offset.
async fn acknowledged(producer: &Producer, value: &'static str) -> Offset {
    producer
        .send(ProducerRecord::new(value))
        .await
        .expect("buffered")
        .await
        .expect("acknowledged")
}

async fn send(producer: &Producer, i: u64) -> Delivery {
    producer
        .send(ProducerRecord::new(format!("v{i}")))
        .await
        .expect("buffered")
}

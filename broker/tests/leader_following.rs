//! An application's view of a failover: a producer and a consumer are given the cluster's
//! brokers, not a leader. They find each partition's leader from the brokers' metadata and,
//! when the leader is SIGKILLed, find its successor by themselves: every record sent is
//! acknowledged (the producer retries through the election, idempotently), each exactly once
//! in the partition, in the order sent, and the consumer that followed the tail throughout
//! read each exactly once.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Timing};
use floe_client::{
    Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer, ProducerConfig, ProducerRecord,
    StreamName,
};

const STREAM: &str = "followed";
const RECORDS: usize = 3_000;
/// Records sent before the leader is killed.
const KILL_AFTER: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_follow_the_leader_across_a_kill() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut cluster = Cluster::start(3, Timing::default()).await;
    let stream = StreamName::new(STREAM).expect("name");
    let (leader, epoch) = cluster.create_replicated(STREAM).await;

    // Each handle is given the three brokers; none is told who leads.
    let client = cluster.cluster_client().await;
    let reader = cluster.cluster_client().await;
    let mut consumer = Consumer::new(
        reader.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let consumed = tokio::spawn(async move {
        let mut values = Vec::with_capacity(RECORDS);
        while values.len() < RECORDS {
            let record = consumer
                .next()
                .await
                .expect("the consumer follows the leader");
            values.push((record.offset.get(), record.value.to_vec()));
        }
        values
    });

    let config = ProducerConfig {
        delivery_timeout: Duration::from_secs(60),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, stream.clone(), config)
        .await
        .expect("producer");
    let mut deliveries = Vec::with_capacity(RECORDS);
    let mut killed_at = None;
    for i in 0..RECORDS {
        if i == KILL_AFTER {
            cluster.kill(cluster.index_of(leader));
            killed_at = Some(Instant::now());
        }
        let record = ProducerRecord::new(format!("r{i}")).with_partition(PartitionId::new(0));
        deliveries.push(producer.send(record).await.expect("accepted"));
        if i % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut acked = Vec::with_capacity(RECORDS);
    for (i, delivery) in deliveries.into_iter().enumerate() {
        let offset = delivery
            .await
            .unwrap_or_else(|e| panic!("record r{i} not acknowledged: {e}"));
        acked.push(offset.get());
    }
    let resumed = killed_at.expect("killed").elapsed();
    let (successor, new_epoch) = cluster.leader_after(STREAM, 0, epoch).await;
    assert_ne!(successor, leader);
    assert!(new_epoch > epoch);
    eprintln!("all {RECORDS} records acknowledged {resumed:?} after the leader's SIGKILL");

    // Acknowledged offsets rise with the order of sending: nothing reordered, nothing
    // written twice by a retry.
    for pair in acked.windows(2) {
        assert!(pair[0] < pair[1], "offsets out of order: {pair:?}");
    }

    // The consumer that followed the tail read every record once, at its acknowledged offset.
    let read = tokio::time::timeout(Duration::from_secs(60), consumed)
        .await
        .expect("the consumer catches up")
        .expect("consumer task");
    let at: HashMap<u64, usize> = acked.iter().enumerate().map(|(i, o)| (*o, i)).collect();
    assert_eq!(read.len(), RECORDS);
    for (offset, value) in &read {
        let i = at
            .get(offset)
            .unwrap_or_else(|| panic!("offset {offset} read but never acknowledged"));
        assert_eq!(value, format!("r{i}").as_bytes(), "offset {offset}");
    }

    // A fresh reader from the earliest offset sees the same, through the new leader.
    let mut check = Consumer::new(
        cluster.cluster_client().await,
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    for (i, offset) in acked.iter().enumerate() {
        let record = check.next().await.expect("a record");
        assert_eq!(record.offset.get(), *offset);
        assert_eq!(&record.value[..], format!("r{i}").as_bytes());
    }

    producer.close().await.expect("close");
    client.close().await;
    reader.close().await;
    cluster.shutdown().await;
}

//! The Rust client's `GroupConsumer` against a real broker and controlplane: members hear
//! of their assignments through `assignment()`, a member that joins takes a partition from
//! the first without it stopping, auto-commit commits what was processed (and commits before
//! giving a partition up), and a closed member's partitions go to the other at once, read on
//! from the committed offsets with nothing skipped.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cluster::{Cluster, Timing};
use floe_client::{
    GroupConfig, GroupConsumer, GroupPartition, Producer, ProducerConfig, ProducerRecord,
    StreamName,
};
use floe_wire::LeaderEpoch;
use floe_wire::admin::CreateStreamRequest;

const STREAM: &str = "jobs";

async fn publish(producer: &Producer, round: u32, per_partition: u32) {
    let mut deliveries = Vec::new();
    for partition in 0..2 {
        for i in 0..per_partition {
            let record = ProducerRecord::new(format!("{round}-{partition}-{i}"))
                .with_partition(floe_client::PartitionId::new(partition));
            deliveries.push(producer.send(record).await.expect("sent"));
        }
    }
    for delivery in deliveries {
        delivery.await.expect("acknowledged");
    }
}

/// Reads until `count` records, returning `(partition, offset)` of each.
async fn read(member: &mut GroupConsumer, count: usize) -> Vec<(u32, u64)> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let record = tokio::time::timeout(Duration::from_secs(20), member.next())
            .await
            .expect("a record in time")
            .expect("a record");
        seen.push((record.record.partition.get(), record.record.offset.get()));
    }
    seen
}

async fn assigned(member: &GroupConsumer, count: usize) -> Vec<GroupPartition> {
    let mut assignment = member.assignment();
    let changed = assignment.wait_for(|now| now.len() == count);
    tokio::time::timeout(Duration::from_secs(20), changed)
        .await
        .expect("the assignment in time")
        .expect("the member lives")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_auto_commit_and_take_over_on_close() {
    let cluster = Cluster::start(1, Timing::default()).await;
    let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
        "name": STREAM, "partitions": 2, "replication_factor": 1,
    }))
    .expect("request");
    cluster.rest.create_stream(&request).await.expect("create");
    for partition in 0..2 {
        cluster
            .leader_after(STREAM, partition, LeaderEpoch::ZERO)
            .await;
    }
    let stream = StreamName::new(STREAM).expect("name");
    let client = cluster.reading_client().await;
    let producer = Producer::new(&client, stream.clone(), ProducerConfig::default())
        .await
        .expect("a producer");
    publish(&producer, 0, 100).await;

    let config = || {
        let mut config = GroupConfig::new("workers", [stream.clone()]);
        config.auto_commit = Some(Duration::from_millis(100));
        config.session_timeout = Duration::from_secs(3);
        config
    };
    let mut first = GroupConsumer::join(client.clone(), config())
        .await
        .expect("joins");
    assert_eq!(assigned(&first, 2).await.len(), 2);
    let mut seen = read(&mut first, 200).await;

    // A second member takes one partition; the first keeps the other and reads on.
    let second_client = cluster.reading_client().await;
    let mut second = GroupConsumer::join(second_client.clone(), config())
        .await
        .expect("joins");
    let kept = assigned(&first, 1).await;
    let taken = assigned(&second, 1).await;
    assert_ne!(kept, taken);
    publish(&producer, 1, 50).await;
    let (from_first, from_second) = tokio::join!(read(&mut first, 50), read(&mut second, 50));
    for (partition, _) in &from_first {
        assert_eq!(*partition, kept[0].partition.get());
    }
    for (partition, _) in &from_second {
        assert_eq!(*partition, taken[0].partition.get());
    }
    seen.extend(from_first);
    seen.extend(from_second);

    // The first leaves: the second reads both partitions from the committed offsets.
    first.close().await.expect("a clean leave");
    assert_eq!(assigned(&second, 2).await.len(), 2);
    publish(&producer, 2, 25).await;
    let mut tail = Vec::new();
    while !(0..2).all(|p| tail.contains(&(p, 174))) {
        tail.extend(read(&mut second, 1).await);
    }
    seen.extend(tail);
    let distinct: BTreeSet<(u32, u64)> = seen.iter().copied().collect();
    for partition in 0..2 {
        for offset in 0..175 {
            assert!(
                distinct.contains(&(partition, offset)),
                "partition {partition} offset {offset} skipped"
            );
        }
    }
    // Duplicates only around the hand-overs: the record in hand when a partition moved.
    assert!(
        seen.len() - distinct.len() <= 2,
        "{} duplicates",
        seen.len() - distinct.len()
    );

    // The committed offsets reach the ends once the second has committed and left.
    second.close().await.expect("a clean leave");
    let offsets = cluster
        .rest
        .group_offsets("workers")
        .await
        .expect("offsets")
        .offsets;
    let ends: Vec<u64> = offsets.iter().map(|o| o.offset).collect();
    assert_eq!(ends, [175, 175]);
    client.close().await;
    second_client.close().await;
    cluster.shutdown().await;
}

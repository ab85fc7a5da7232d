//! A leader cut off from its replicas by the network, with real processes: three
//! `floe-broker serve` processes and a controlplane; a factor-3 stream with `quorum` acks.
//! An nftables rule drops every packet to and from the leader's peer port, while it still
//! reaches the controlplane and its clients. It cannot commit anything more; after a lease
//! without a majority it says so in its heartbeat, and the controlplane elects a leader
//! among the two others, which go on acknowledging. When the network heals, the old leader
//! follows, dropping what it appended alone. Every acknowledged record is read back once,
//! in order, and no record is stored twice.
//!
//! A second test cuts only what reaches the leader's peer port: its followers store a last
//! record but the leader never hears so, and dies. Its successor inherits that record
//! uncommitted, and the producer's retry of it, answered as a duplicate, is acknowledged
//! once the successor's epoch-start marker commits, though nothing else is published.
//!
//! Needs root and `nft` (scripts/test.sh installs nftables and sets `FLOE_TEST_NFT=1`);
//! without `FLOE_TEST_NFT` the test says so and does nothing.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Timing, check_acknowledged, read_from_start};
use common::port_block::{self, PortBlock};
use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};

const STREAM: &str = "cut";

fn name() -> StreamName {
    StreamName::new(STREAM).expect("name")
}

/// Publishes `count` records labelled `label` through `client`; returns the acknowledged
/// ones (offset, value) and how many failed.
async fn publish(
    client: &Client,
    label: &str,
    count: usize,
    timeout: Duration,
) -> (Vec<(u64, String)>, usize) {
    let config = ProducerConfig {
        delivery_timeout: timeout,
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, name(), config)
        .await
        .expect("producer");
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let value = format!("{label}-{i:06}");
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        pending.push((value, producer.send(record).await.expect("send")));
    }
    let (mut acked, mut failed) = (Vec::new(), 0);
    for (value, delivery) in pending {
        match delivery.await {
            Ok(offset) => acked.push((offset.get(), value)),
            Err(_) => failed += 1,
        }
    }
    let _ = producer.close().await;
    (acked, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_replicas_is_replaced_and_nothing_acknowledged_is_lost() {
    if !port_block::enabled() {
        eprintln!(
            "FLOE_TEST_NFT is not set: skipping (needs root and nft; scripts/test.sh sets it)"
        );
        return;
    }
    let timing = Timing::default();
    let lease = timing.lease;
    let mut cluster = Cluster::start(3, timing).await;
    let (leader, epoch) = cluster.create_replicated(STREAM).await;
    let client = cluster.client(leader).await;
    let (mut acked, failed) = publish(&client, "before", 1_000, Duration::from_secs(10)).await;
    assert_eq!(failed, 0, "a healthy cluster acknowledges everything");

    // Cut the leader's peer port: no replication in either direction.
    let isolated = cluster.index_of(leader);
    let block = PortBlock::udp(cluster.peer_port(isolated));
    let cut_at = Instant::now();
    eprintln!("cut leader {leader} (epoch {epoch}) off from its replicas");

    // Its producers get no quorum acks; meanwhile the controlplane replaces it.
    let alone = {
        let client = client.clone();
        tokio::spawn(async move { publish(&client, "alone", 200, Duration::from_secs(8)).await })
    };
    let (successor, new_epoch) = cluster.leader_after(STREAM, 0, epoch).await;
    let failover = cut_at.elapsed();
    eprintln!("leader {successor} at epoch {new_epoch}, {failover:?} after the cut");
    assert_ne!(successor, leader, "the cut-off leader was elected again");
    assert!(
        failover < lease * 2 + Duration::from_secs(3),
        "failover took {failover:?} with a lease of {lease:?}"
    );
    let (alone_acked, alone_failed) = alone.await.expect("publishing task");
    eprintln!(
        "to the cut-off leader: {} acknowledged (after retries at its successor), {alone_failed} failed",
        alone_acked.len()
    );
    acked.extend(alone_acked);
    client.close().await;

    // The two others carry on while the cut lasts.
    let client = cluster.client(successor).await;
    let (during, failed) = publish(&client, "during", 500, Duration::from_secs(10)).await;
    assert_eq!(failed, 0, "the majority side acknowledges everything");
    acked.extend(during);
    client.close().await;

    // Heal; the old leader follows the new one, dropping what it appended alone.
    drop(block);
    eprintln!("healed");
    let end = acked
        .iter()
        .map(|(offset, _)| offset + 1)
        .max()
        .unwrap_or(0);
    cluster
        .wait_for("the old leader to catch up", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            let lag = p.replica_lag.iter().find(|l| l.broker_id == leader)?;
            (p.epoch == new_epoch && lag.records == 0 && p.high_watermark? >= end).then_some(())
        })
        .await;

    // Kill the successor: the old leader and the third broker must hold every
    // acknowledged record between them.
    cluster.kill(cluster.index_of(successor));
    let (last, _) = cluster.leader_after(STREAM, 0, new_epoch).await;
    let client = cluster.client(last).await;
    let (after, failed) = publish(&client, "after", 200, Duration::from_secs(10)).await;
    assert_eq!(failed, 0);
    acked.extend(after);
    let end = acked
        .iter()
        .map(|(offset, _)| offset + 1)
        .max()
        .unwrap_or(0);
    let log = read_from_start(&client, STREAM, |r| {
        r.last().is_some_and(|(offset, _)| offset + 1 >= end)
    })
    .await;
    client.close().await;

    check_acknowledged(&acked, &log);
    let mut values = HashSet::new();
    for (offset, value) in &log {
        assert!(
            values.insert(value),
            "{value} stored twice (again at {offset})"
        );
    }
    eprintln!(
        "{} acknowledged, {} in the log, all present once and in order",
        acked.len(),
        log.len()
    );
    cluster.shutdown().await;
}

/// Whether some file under `dir` holds `needle`.
fn stored_under(dir: &std::path::Path, needle: &[u8]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() {
            stored_under(&path, needle)
        } else {
            std::fs::read(&path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_record_the_successor_inherited_is_acknowledged_without_new_traffic() {
    if !port_block::enabled() {
        eprintln!(
            "FLOE_TEST_NFT is not set: skipping (needs root and nft; scripts/test.sh sets it)"
        );
        return;
    }
    let mut cluster = Cluster::start(3, Timing::default()).await;
    let (leader, epoch) = cluster.create_replicated(STREAM).await;
    let client = cluster.cluster_client().await;
    let config = ProducerConfig {
        delivery_timeout: Duration::from_secs(30),
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, name(), config)
        .await
        .expect("producer");
    let record =
        |value: &str| ProducerRecord::new(value.to_owned()).with_partition(PartitionId::new(0));
    let first = producer
        .send(record("first-record"))
        .await
        .expect("send")
        .await
        .expect("a healthy cluster acknowledges");

    // The followers store the last record; their acks never reach the leader.
    let isolated = cluster.index_of(leader);
    let block = PortBlock::udp_to(cluster.peer_port(isolated));
    let tail = producer
        .send(record("the-inherited-tail"))
        .await
        .expect("send");
    let followers: Vec<usize> = (0..3).filter(|&i| i != isolated).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !followers
        .iter()
        .all(|&i| stored_under(&cluster.brokers[i].data_dir, b"the-inherited-tail"))
    {
        assert!(
            Instant::now() < deadline,
            "the followers never stored the record"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill(isolated);
    drop(block);
    eprintln!("killed leader {leader} (epoch {epoch}) with its last record on both followers");

    // The producer retries at the successor, which holds the record from the old epoch. No
    // other record is sent: only the successor's own marker can commit it.
    let started = Instant::now();
    let tail = tail
        .await
        .expect("the retried record is acknowledged by the successor");
    eprintln!(
        "acknowledged at offset {tail} {:?} after the kill",
        started.elapsed()
    );
    let (successor, new_epoch) = cluster.leader_after(STREAM, 0, epoch).await;
    assert_ne!(successor, leader);
    assert!(tail > first);
    let high_watermark = cluster
        .wait_for("the successor's high watermark", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            (p.epoch == new_epoch && p.high_watermark? > tail.get()).then_some(p.high_watermark?)
        })
        .await;
    assert_eq!(
        high_watermark,
        tail.get() + 2,
        "committed: the record and the successor's marker after it"
    );

    // Readers see the two records once each, at their acknowledged offsets, and no marker.
    let log = read_from_start(&client, STREAM, |r| {
        r.last().is_some_and(|(offset, _)| *offset >= tail.get())
    })
    .await;
    assert_eq!(
        log,
        vec![
            (first.get(), "first-record".to_owned()),
            (tail.get(), "the-inherited-tail".to_owned())
        ]
    );
    producer.close().await.expect("close");
    client.close().await;
    cluster.shutdown().await;
}

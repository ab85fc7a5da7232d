//! A leader cut off from its replicas by the network, with real processes: three
//! `floe-broker serve` processes and a controlplane; a factor-3 stream with `quorum` acks.
//! An nftables rule drops every packet to and from the leader's peer port, while it still
//! reaches the controlplane and its clients. It cannot commit anything more; after a lease
//! without a majority it says so in its heartbeat, and the controlplane elects a leader
//! among the two others, which go on acknowledging. When the network heals, the old leader
//! follows, dropping what it appended alone. Every acknowledged record is read back once,
//! in order, and no record is stored twice.
//!
//! Needs root and `nft` (scripts/test.sh installs nftables and sets `FLOE_TEST_NFT=1`);
//! without `FLOE_TEST_NFT` the test says so and does nothing.

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Timing, check_acknowledged, read_from_start};
use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};
use floe_wire::admin::CreateStreamRequest;

const STREAM: &str = "cut";

fn name() -> StreamName {
    StreamName::new(STREAM).expect("name")
}

/// An nftables table dropping all UDP to and from one port on this host; removed on drop.
struct PortBlock {
    table: String,
}

fn nft(args: &[&str]) {
    let output = Command::new("nft").args(args).output().expect("run nft");
    assert!(
        output.status.success(),
        "nft {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PortBlock {
    fn udp(port: u16) -> PortBlock {
        let table = format!("floe_test_{}_{port}", std::process::id());
        let port = port.to_string();
        nft(&["add", "table", "inet", &table]);
        nft(&[
            "add",
            "chain",
            "inet",
            &table,
            "out",
            "{ type filter hook output priority 0 ; policy accept ; }",
        ]);
        nft(&[
            "add", "rule", "inet", &table, "out", "udp", "sport", &port, "drop",
        ]);
        nft(&[
            "add", "rule", "inet", &table, "out", "udp", "dport", &port, "drop",
        ]);
        PortBlock { table }
    }
}

impl Drop for PortBlock {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
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
    if std::env::var_os("FLOE_TEST_NFT").is_none() {
        eprintln!(
            "FLOE_TEST_NFT is not set: skipping (needs root and nft; scripts/test.sh sets it)"
        );
        return;
    }
    let timing = Timing::default();
    let lease = timing.lease;
    let mut cluster = Cluster::start(3, timing).await;
    let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
        "name": STREAM, "partitions": 1, "replication_factor": 3,
    }))
    .expect("request");
    cluster.rest.create_stream(&request).await.expect("create");
    let (leader, epoch) = cluster.leader_after(STREAM, 0, 0).await;
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

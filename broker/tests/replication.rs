//! Quorum replication across real processes: three `floe-broker serve` processes with peer
//! ports and a controlplane. A workload publishes with `quorum` acks and reads the committed
//! tail while the harness SIGKILLs and restarts leaders and followers; afterwards a history
//! checker verifies that every acknowledged record is in the partition exactly once, at the
//! offset it was acknowledged with, in order, and that every record a consumer read is still
//! there at the offset it was read at.
//!
//! `FLOE_KILL_CYCLES` sets the number of kill/restart cycles (default 4); each cycle's
//! failover time (SIGKILL of a leader to the first acknowledged publish on its successor) is
//! printed.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Timing};
use floe_client::{
    Client, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer, ProducerConfig,
    ProducerRecord, StreamName,
};
use floe_wire::BrokerId;
use floe_wire::admin::CreateStreamRequest;
use rand::{Rng, SeedableRng};

const STREAM: &str = "replicated";

/// What the workload saw: acknowledged records and consumed records, by offset.
#[derive(Default)]
struct History {
    acked: Vec<(u64, String)>,
    read: BTreeMap<u64, String>,
}

fn producer_config() -> ProducerConfig {
    ProducerConfig {
        delivery_timeout: Duration::from_secs(3),
        ..ProducerConfig::default()
    }
}

/// Publishes `count` records through broker `leader`; returns how many were acknowledged.
/// Records whose delivery fails (the leader died) are simply not acknowledged.
async fn publish(client: &Client, history: &mut History, label: &str, count: usize) -> usize {
    let stream = StreamName::new(STREAM).expect("name");
    let Ok(producer) = Producer::new(client, stream, producer_config()).await else {
        return 0;
    };
    let mut pending = Vec::new();
    for i in 0..count {
        let value = format!("{label}-{i}");
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        match producer.send(record).await {
            Ok(delivery) => pending.push((value, delivery)),
            Err(_) => break,
        }
    }
    let mut acked = 0;
    for (value, delivery) in pending {
        if let Ok(offset) = delivery.await {
            history.acked.push((offset.get(), value));
            acked += 1;
        }
    }
    acked
}

/// Reads the committed records through `client` from `from` until none arrive for a moment.
async fn read_from(client: &Client, from: u64) -> Vec<(u64, String)> {
    let mut consumer = Consumer::new(
        client.clone(),
        StreamName::new(STREAM).expect("name"),
        PartitionId::new(0),
        FetchPosition::Offset(floe_client::Offset::new(from)),
        ConsumerConfig::default(),
    );
    let mut records = Vec::new();
    while let Ok(Some(record)) = consumer.poll(Duration::from_millis(300)).await {
        records.push((
            record.offset.get(),
            String::from_utf8_lossy(&record.value).into_owned(),
        ));
    }
    records
}

/// Publishes single records through whoever leads after `epoch` until one is acknowledged;
/// returns the new leader, its epoch and when the ack came.
async fn first_ack_after(
    cluster: &Cluster,
    epoch: floe_wire::LeaderEpoch,
    history: &mut History,
    label: &str,
) -> (BrokerId, floe_wire::LeaderEpoch, Instant) {
    let deadline = Instant::now() + common::cluster::DEADLINE;
    let mut attempt = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "no acknowledged publish after epoch {epoch}"
        );
        if let Some(p) = cluster.partition(STREAM, 0).await
            && let Some(leader) = p.leader
            && p.epoch > epoch
            && let Ok(client) = try_client(cluster, leader).await
        {
            attempt += 1;
            let acked = publish(&client, history, &format!("{label}-probe{attempt}"), 1).await;
            client.close().await;
            if acked == 1 {
                return (leader, p.epoch, Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn try_client(cluster: &Cluster, id: BrokerId) -> Result<Client, floe_client::Error> {
    let mut config = floe_client::ClientConfig::new(
        cluster.endpoint(id).await,
        "localhost",
        cluster.certificates.files.ca.clone(),
    );
    config.request_timeout = Duration::from_secs(3);
    config.connect_timeout = Duration::from_secs(1);
    config.reconnect_attempts = 0;
    Client::connect(config).await
}

async fn all_live(cluster: &Cluster) {
    cluster
        .wait_for("three live brokers", async |c: &Cluster| {
            let list = c.rest.brokers().await.ok()?.brokers;
            let live = list
                .iter()
                .filter(|b| b.state == floe_wire::admin::BrokerState::Live)
                .count();
            (live == 3).then_some(())
        })
        .await;
}

/// Every acknowledged record at its offset, exactly once, in order; every consumed record
/// still at the offset it was read at.
fn check(history: &History, log: &[(u64, String)]) {
    let by_offset: BTreeMap<u64, &String> = log.iter().map(|(o, v)| (*o, v)).collect();
    assert_eq!(by_offset.len(), log.len(), "an offset read twice");
    let mut seen: BTreeMap<&String, u64> = BTreeMap::new();
    for (offset, value) in log {
        if let Some(previous) = seen.insert(value, *offset) {
            panic!("record {value} at offsets {previous} and {offset}");
        }
    }
    for (offset, value) in &history.acked {
        assert_eq!(
            by_offset.get(offset).copied(),
            Some(value),
            "acknowledged record {value} lost from offset {offset}"
        );
    }
    for (offset, value) in &history.read {
        assert_eq!(
            by_offset.get(offset).copied(),
            Some(value),
            "consumed record {value} at offset {offset} no longer there"
        );
    }
    let offsets: Vec<u64> = log.iter().map(|(o, _)| *o).collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "offsets out of order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_acked_records_survive_killed_leaders_and_followers() {
    let cycles: usize = std::env::var("FLOE_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("FLOE_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let timing = Timing::default();
    let lease = timing.lease;
    let mut cluster = Cluster::start(3, timing).await;
    cluster
        .rest
        .create_stream(&CreateStreamRequest {
            name: StreamName::new(STREAM).expect("name"),
            partitions: 1,
            replication_factor: Some(3),
            ack_mode: None,
            segment: Default::default(),
            retention: Default::default(),
        })
        .await
        .expect("create");
    let mut history = History::default();
    let (mut leader, mut epoch) = cluster
        .leader_after(STREAM, 0, floe_wire::LeaderEpoch::ZERO)
        .await;
    let mut failovers = Vec::new();
    for cycle in 0..cycles {
        // Failover is measured from a healthy cluster: every broker holds a lease again.
        all_live(&cluster).await;
        let client = cluster.client(leader).await;
        let acked = publish(&client, &mut history, &format!("c{cycle}"), 300).await;
        assert!(
            acked > 0,
            "cycle {cycle}: nothing acknowledged by leader {leader:?}"
        );
        let from = history.read.keys().next_back().map_or(0, |o| o + 1);
        history.read.extend(read_from(&client, from).await);
        client.close().await;

        let kill_leader = rng.random_bool(0.6);
        let victim = if kill_leader {
            leader
        } else {
            let p = cluster.partition(STREAM, 0).await.expect("partition");
            let followers: Vec<BrokerId> =
                p.replicas.into_iter().filter(|r| *r != leader).collect();
            followers[rng.random_range(0..followers.len())]
        };
        let index = cluster.index_of(victim);
        cluster.kill(index);
        let killed = Instant::now();
        eprintln!(
            "cycle {cycle}: killed broker {} ({}), acked {acked}",
            victim.get(),
            if kill_leader { "leader" } else { "follower" }
        );
        if kill_leader {
            let (next, next_epoch, at) =
                first_ack_after(&cluster, epoch, &mut history, &format!("c{cycle}")).await;
            let failover = at - killed;
            eprintln!(
                "cycle {cycle}: failover to broker {} in epoch {next_epoch}: {failover:?}",
                next.get()
            );
            failovers.push(failover);
            (leader, epoch) = (next, next_epoch);
        } else {
            // Two of three remain: the leader keeps committing.
            let client = cluster.client(leader).await;
            let acked = publish(&client, &mut history, &format!("c{cycle}-degraded"), 100).await;
            assert!(
                acked > 0,
                "a majority remains, yet nothing was acknowledged"
            );
            client.close().await;
        }
        cluster.restart(index);
    }

    // Everyone back: the final log, read from the leader, holds the whole history.
    all_live(&cluster).await;
    let (leader, _) = cluster
        .leader_after(STREAM, 0, floe_wire::LeaderEpoch::ZERO)
        .await;
    let client = cluster.client(leader).await;
    let log = read_from(&client, 0).await;
    client.close().await;
    check(&history, &log);
    // `describe` shows the high watermark and, once the restarted followers caught up, no lag.
    let end = log.last().map_or(0, |(offset, _)| offset + 1);
    let described = cluster
        .wait_for("the described partition caught up", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            (p.high_watermark == Some(end)
                && p.replica_lag.len() == 2
                && p.replica_lag.iter().all(|l| l.records == 0))
            .then_some(p)
        })
        .await;
    let mut followers: Vec<BrokerId> = described.replica_lag.iter().map(|l| l.broker_id).collect();
    followers.sort();
    let mut expected: Vec<BrokerId> = described
        .replicas
        .iter()
        .copied()
        .filter(|r| Some(*r) != described.leader)
        .collect();
    expected.sort();
    assert_eq!(followers, expected, "the lag names the leader's followers");
    eprintln!(
        "{} acknowledged, {} consumed, {} in the log; failovers {failovers:?} (lease {lease:?})",
        history.acked.len(),
        history.read.len(),
        log.len()
    );
    for failover in &failovers {
        assert!(
            *failover <= lease + Duration::from_secs(1),
            "failover took {failover:?}, over the lease {lease:?} + 1 s"
        );
    }
    cluster.shutdown().await;
}

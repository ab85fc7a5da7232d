//! Replacing a dead broker's replicas, with real processes: four `floe-broker serve`
//! processes and a controlplane; a factor-3 stream whose history is mostly tiered. A
//! follower is SIGKILLed and stays dead: after the grace period the controlplane moves its
//! place in the replica set to the fourth broker, which copies only the leader's local log
//! (everything older is in object storage), and the change completes. Then the leader is
//! SIGKILLed too: the new set elects a leader among the survivor and the newcomer, and every
//! acknowledged record — published before, during and after the change — is still there,
//! once, in order.
//!
//! A second cluster is asked for a factor-3 stream while one of its three brokers is dead:
//! the create is refused, saying why, and succeeds with a full set once the broker returns.

mod common;

use std::path::Path;
use std::time::Duration;

use common::cluster::{Cluster, Timing, check_acknowledged, read_from_start};
use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};
use floe_wire::admin::{BrokerState, CreateStreamRequest, PartitionDescription};

const STREAM: &str = "replaced";

fn name() -> StreamName {
    StreamName::new(STREAM).expect("name")
}

/// Publishes `count` records of about 200 bytes through `client` with the stream's
/// (`quorum`) acks; returns each acknowledged record's offset and value.
async fn publish(client: &Client, label: &str, count: usize) -> Vec<(u64, String)> {
    let config = ProducerConfig {
        max_batch_bytes: common::SEGMENT_SPANNING_BATCH_BYTES,
        delivery_timeout: Duration::from_secs(10),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, name(), config)
        .await
        .expect("producer");
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let value = format!("{label}-{i:06}-{}", "x".repeat(180));
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        pending.push((value, producer.send(record).await.expect("send")));
    }
    let mut acked = Vec::with_capacity(count);
    for (value, delivery) in pending {
        let offset = delivery.await.expect("acknowledged");
        acked.push((offset.get(), value));
    }
    producer.close().await.expect("close");
    acked
}

/// The lowest base offset of the partition's segment files in a broker's data directory.
fn local_log_start(broker_dir: &Path) -> Option<u64> {
    let dir = broker_dir
        .join("data")
        .join("streams")
        .join(STREAM)
        .join("0");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse::<u64>().ok()
        })
        .min()
}

async fn described(cluster: &Cluster) -> PartitionDescription {
    cluster.partition(STREAM, 0).await.expect("the partition")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_brokers_replicas_move_to_a_live_one_and_nothing_acknowledged_is_lost() {
    let timing = Timing {
        replace_dead_after: Duration::from_secs(3),
        ..Timing::default()
    };
    let mut cluster = Cluster::start(4, timing).await;
    let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
        "name": STREAM, "partitions": 1, "replication_factor": 3,
        "segment": {"bytes": 64 * 1024},
        "retention": {"local_bytes": 128 * 1024},
    }))
    .expect("request");
    cluster.rest.create_stream(&request).await.expect("create");
    let (leader, epoch) = cluster
        .leader_after(STREAM, 0, floe_wire::LeaderEpoch::new(0))
        .await;
    let client = cluster.client(leader).await;
    let mut acked = publish(&client, "before", 4_000).await;
    client.close().await;
    // Most of the history leaves the brokers' disks for object storage.
    let tier = cluster.wait_tiered(STREAM, acked.len() as u64 / 2).await;

    let before = described(&cluster).await;
    let original = before.replicas;
    let hot_start = before.hot.expect("a reported hot log").start;
    assert_eq!(original.len(), 3);
    let spare = cluster
        .rest
        .brokers()
        .await
        .expect("brokers")
        .brokers
        .iter()
        .map(|b| b.broker_id)
        .find(|id| !original.contains(id))
        .expect("a fourth broker");
    let follower = *original
        .iter()
        .find(|&&id| id != leader)
        .expect("a follower");
    cluster.kill(cluster.index_of(follower));
    eprintln!("killed follower {follower}; broker {spare} should replace it");

    // Publishing goes on with two of three while the dead broker waits out its grace.
    let client = cluster.client(leader).await;
    acked.extend(publish(&client, "degraded", 500).await);
    client.close().await;

    // The change: broker `spare` in, `follower` out, an election over both sets, then done.
    let replaced: PartitionDescription = cluster
        .wait_for("the replica set change to complete", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            let done = p.replicas.contains(&spare)
                && !p.replicas.contains(&follower)
                && p.previous_replicas.is_empty()
                && p.leader.is_some();
            done.then_some(p)
        })
        .await;
    assert!(replaced.epoch > epoch, "the change elected at a new epoch");
    eprintln!(
        "replica set {:?} → {:?} at epoch {}",
        original, replaced.replicas, replaced.epoch
    );
    let new_leader = replaced.leader.expect("a leader");

    // The newcomer copied the leader's local log only: its log starts where the leader's
    // did (or later), not at 0.
    let spare_dir = cluster.brokers[cluster.index_of(spare)].dir.clone();
    let start = cluster
        .wait_for("the newcomer's log", async |_: &Cluster| {
            local_log_start(&spare_dir)
        })
        .await;
    assert!(
        start >= hot_start && start > 0,
        "the newcomer's log starts at {start}, below the leader's {hot_start}: it copied \
         history that object storage holds (tier {tier:?})"
    );

    let client = cluster.client(new_leader).await;
    acked.extend(publish(&client, "replaced", 500).await);
    client.close().await;

    // The survivor of the old set and the newcomer now carry the partition: kill the leader.
    cluster.kill(cluster.index_of(new_leader));
    let (successor, _) = cluster.leader_after(STREAM, 0, replaced.epoch).await;
    assert_ne!(successor, new_leader);
    assert!(
        replaced.replicas.contains(&successor),
        "the successor {successor} is a member of the new set"
    );
    let client = cluster.client(successor).await;
    acked.extend(publish(&client, "after", 500).await);

    let log = read_from_start(&client, STREAM, |r| r.len() >= acked.len()).await;
    client.close().await;
    check_acknowledged(&acked, &log);
    let metrics = common::http_get(&cluster.controlplane_addr(), "/metrics").await;
    assert_eq!(
        common::metric(&metrics, "floe_partition_replica_replacements_total"),
        1.0,
        "one change of the replica set"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_factor_above_the_live_brokers_is_refused_until_the_broker_returns() {
    let mut cluster = Cluster::start(3, Timing::default()).await;
    let absent = cluster.brokers[2].broker_id().expect("registered");
    cluster.kill(2);
    cluster
        .wait_for(
            "the killed broker to be declared dead",
            async |c: &Cluster| {
                let brokers = c.rest.brokers().await.ok()?.brokers;
                brokers
                    .iter()
                    .any(|b| b.broker_id == absent && b.state == BrokerState::Dead)
                    .then_some(())
            },
        )
        .await;
    let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
        "name": STREAM, "partitions": 1, "replication_factor": 3,
    }))
    .expect("request");
    let refused = cluster
        .rest
        .create_stream(&request)
        .await
        .expect_err("a set short of its factor is not created");
    let message = refused.to_string();
    assert!(
        message.contains("replication factor 3 needs 3 live brokers and 2 are live"),
        "{message}"
    );

    cluster.restart(2);
    cluster
        .wait_for("three live brokers", async |c: &Cluster| {
            let brokers = c.rest.brokers().await.ok()?.brokers;
            let live = brokers.iter().filter(|b| b.state == BrokerState::Live);
            (live.count() == 3).then_some(())
        })
        .await;
    let (leader, _) = cluster.create_replicated(STREAM).await;
    let full = described(&cluster).await;
    assert_eq!(full.replicas.len(), 3, "{:?}", full.replicas);
    let client = cluster.client(leader).await;
    let acked = publish(&client, "full", 300).await;
    let log = read_from_start(&client, STREAM, |r| r.len() >= acked.len()).await;
    client.close().await;
    check_acknowledged(&acked, &log);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_leaders_broker_hands_leadership_over_and_moves_the_replica_away() {
    let mut cluster = Cluster::start(4, Timing::default()).await;
    let (leader, epoch) = cluster.create_replicated(STREAM).await;
    let client = cluster.client(leader).await;
    let mut acked = publish(&client, "before", 500).await;
    client.close().await;

    cluster.rest.drain_broker(leader).await.expect("drain");
    let moved: PartitionDescription = cluster
        .wait_for(
            "the drained broker to leave the set",
            async |c: &Cluster| {
                let p = c.partition(STREAM, 0).await?;
                let done = p.leader.is_some_and(|l| l != leader)
                    && !p.replicas.contains(&leader)
                    && p.replicas.len() == 3
                    && p.previous_replicas.is_empty();
                done.then_some(p)
            },
        )
        .await;
    assert!(moved.epoch > epoch);
    eprintln!(
        "drained {leader}: replicas {:?}, leader {:?} at epoch {}",
        moved.replicas, moved.leader, moved.epoch
    );
    let new_leader = moved.leader.expect("a leader");
    let client = cluster.client(new_leader).await;
    acked.extend(publish(&client, "after", 500).await);
    let log = read_from_start(&client, STREAM, |r| r.len() >= acked.len()).await;
    client.close().await;
    check_acknowledged(&acked, &log);
    // The drained broker holds nothing any more and can be stopped.
    let index = cluster.index_of(leader);
    cluster.kill(index);
    cluster.shutdown().await;
}

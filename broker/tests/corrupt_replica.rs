//! A replica whose copy of a partition rots, with real processes: four `floe-broker serve`
//! processes and a controlplane; a factor-3 stream with `quorum` acks. A member is
//! SIGKILLed, bytes are flipped inside its active segment (valid batches follow the damage:
//! rot, not a torn tail) and it is started again. It holds the partition `corrupt` and says
//! so in its heartbeats; the controlplane replaces that member by the fourth broker, which
//! copies the partition from the other replicas, and — when the corrupt member led the
//! partition — first elects another leader among the others. Every acknowledged record,
//! published before and after, is read back once, in order; nothing is cut from the damaged
//! copy, which stays on its broker's disk as it was.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::cluster::{Cluster, Timing, check_acknowledged, read_from_start};
use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};
use floe_wire::BrokerId;
use floe_wire::admin::{CreateStreamRequest, PartitionDescription};

const STREAM: &str = "rotting";

fn name() -> StreamName {
    StreamName::new(STREAM).expect("name")
}

/// Publishes `count` records through `client` with the stream's (`quorum`) acks; returns each
/// acknowledged record's offset and value.
async fn publish(client: &Client, label: &str, count: usize) -> Vec<(u64, String)> {
    let config = ProducerConfig {
        delivery_timeout: Duration::from_secs(20),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, name(), config)
        .await
        .expect("producer");
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let value = format!("{label}-{i:06}-{}", "x".repeat(100));
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        pending.push((value, producer.send(record).await.expect("send")));
        if i % 100 == 99 {
            // Several batches, so that valid ones follow the damage.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut acked = Vec::with_capacity(count);
    for (value, delivery) in pending {
        let offset = delivery.await.expect("acknowledged");
        acked.push((offset.get(), value));
    }
    producer.close().await.expect("close");
    acked
}

/// The partition's only segment file on broker process `i`.
fn segment(cluster: &Cluster, i: usize) -> PathBuf {
    let dir = cluster.brokers[i]
        .dir
        .join("data/streams")
        .join(STREAM)
        .join("0");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    assert_eq!(logs.len(), 1, "one segment: {logs:?}");
    logs.pop().expect("a segment")
}

/// Flips 8 bytes a third of the way into `file`; returns its new content.
fn rot(file: &PathBuf) -> Vec<u8> {
    let mut bytes = std::fs::read(file).expect("segment");
    let at = bytes.len() / 3;
    for byte in &mut bytes[at..at + 8] {
        *byte ^= 0xff;
    }
    std::fs::write(file, &bytes).expect("flip 8 bytes");
    bytes
}

async fn start(cluster: &Cluster) -> (BrokerId, Vec<BrokerId>, BrokerId) {
    let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
        "name": STREAM, "partitions": 1, "replication_factor": 3, "ack_mode": "quorum",
    }))
    .expect("request");
    cluster.rest.create_stream(&request).await.expect("create");
    let (leader, _) = cluster
        .leader_after(STREAM, 0, floe_wire::LeaderEpoch::new(0))
        .await;
    let replicas = cluster
        .partition(STREAM, 0)
        .await
        .expect("the partition")
        .replicas;
    let spare = cluster
        .rest
        .brokers()
        .await
        .expect("brokers")
        .brokers
        .iter()
        .map(|b| b.broker_id)
        .find(|id| !replicas.contains(id))
        .expect("a fourth broker");
    (leader, replicas, spare)
}

/// Waits until `corrupt` has left the replica set for `spare`, the change complete and led.
async fn replaced(cluster: &Cluster, corrupt: BrokerId, spare: BrokerId) -> PartitionDescription {
    cluster
        .wait_for("the corrupt member to be replaced", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            let done = p.replicas.contains(&spare)
                && !p.replicas.contains(&corrupt)
                && p.previous_replicas.is_empty()
                && p.leader.is_some();
            done.then_some(p)
        })
        .await
}

async fn corrupt_member_replaced(corrupt_leader: bool) {
    // Dead members are never replaced here: only the corruption moves the member.
    let mut cluster = Cluster::start(4, Timing::default()).await;
    let (leader, replicas, spare) = start(&cluster).await;
    let client = cluster.client(leader).await;
    let mut acked = publish(&client, "before", 1_000).await;
    client.close().await;

    let corrupt = if corrupt_leader {
        leader
    } else {
        *replicas
            .iter()
            .find(|&&id| id != leader)
            .expect("a follower")
    };
    let i = cluster.index_of(corrupt);
    // A follower acks what it holds; wait until the one to be damaged holds everything.
    cluster
        .wait_for("the member to hold every record", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            let behind = p
                .replica_lag
                .iter()
                .find(|l| l.broker_id == corrupt)
                .map_or(0, |l| l.records);
            (behind == 0).then_some(())
        })
        .await;
    cluster.kill(i);
    let file = segment(&cluster, i);
    let damaged = rot(&file);
    cluster.restart(i);
    eprintln!("broker {corrupt} restarted with rot; broker {spare} should replace it");

    let p = replaced(&cluster, corrupt, spare).await;
    eprintln!(
        "replica set {replicas:?} → {:?}, leader {:?}",
        p.replicas, p.leader
    );
    assert_ne!(p.leader, Some(corrupt));
    let leader = p.leader.expect("a leader");
    let client = cluster.client(leader).await;
    acked.extend(publish(&client, "after", 500).await);
    let log = read_from_start(&client, STREAM, |log| log.len() >= acked.len()).await;
    check_acknowledged(&acked, &log);
    assert_eq!(
        log.len(),
        acked.len(),
        "records appeared that were not published"
    );
    client.close().await;
    // Nothing was cut from the damaged copy.
    assert_eq!(std::fs::read(&file).expect("the damaged segment"), damaged);
    let controlplane = common::http_get(&cluster.controlplane_addr(), "/metrics").await;
    assert_eq!(
        common::metric(&controlplane, "floe_partition_replica_replacements_total"),
        1.0,
        "one change of the replica set"
    );
    // A corrupt leader is deposed at once, not after its lease: it still heartbeats.
    assert_eq!(
        common::metric(&controlplane, "floe_partition_leaders_corrupt_total"),
        if corrupt_leader { 1.0 } else { 0.0 },
        "{controlplane}"
    );
    let metrics = common::http_get(&cluster.metrics_addr(i), "/metrics").await;
    assert_eq!(
        common::metric(&metrics, "floe_partitions_corrupt"),
        0.0,
        "it no longer holds it"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_follower_is_replaced_from_the_other_replicas() {
    corrupt_member_replaced(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_leader_is_deposed_then_replaced_from_the_other_replicas() {
    corrupt_member_replaced(true).await;
}

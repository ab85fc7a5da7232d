//! The autoscaler with the local driver, end to end with real processes: a cluster whose
//! policy allows zero to two read replicas and starts with none. A history reader is served
//! by the leader while the broker's reported history reads make the autoscaler start a
//! `floe-broker read-replica` child; the next history reader goes to that replica and the leader
//! reads nothing from the tier for it. When the readers leave, the replica is drained,
//! stopped and gone from the list.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Cluster, Timing};
use common::{http_get, metric, tier_bytes};
use floe_client::{
    Client, Consumer, ConsumerConfig, FetchPosition, PartitionId, ProducerRecord, StreamName,
};
use floe_wire::admin::{ReadReplicaState, ScalingPolicy};

const STREAM: &str = "scaled";
const HISTORY: usize = 6_000;

fn value(i: usize) -> String {
    format!("record-{i:07}-{}", "y".repeat(150))
}

/// Reads the whole history from offset 0 and checks every record.
async fn read_history(client: &Client, stream: &StreamName) {
    let config = ConsumerConfig {
        max_bytes: 32 * 1024,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        config,
    );
    for i in 0..HISTORY {
        let record = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("record {i} did not arrive"))
            .expect("a record");
        assert_eq!(record.offset.get(), i as u64, "offsets in order, no gap");
        assert_eq!(&record.value[..], value(i).as_bytes(), "offset {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autoscaler_starts_a_replica_for_history_readers_and_stops_it_when_they_leave() {
    let cluster = Cluster::start_autoscaled(1, Timing::default(), Duration::from_millis(200)).await;
    let policy = ScalingPolicy {
        min_replicas: 0,
        max_replicas: 2,
        target_bytes_per_second: 64 << 20,
        target_consumers: 0,
        hysteresis_percent: 20,
        scale_up_cooldown_ms: 0,
        scale_down_cooldown_ms: 1_000,
    };
    cluster
        .rest
        .set_scaling_policy(&policy)
        .await
        .expect("policy");
    cluster.create_tiering_stream(STREAM).await;
    let stream = StreamName::new(STREAM).expect("name");

    let writer = cluster.cluster_client().await;
    let producer = common::segment_spanning_producer(&writer, &stream).await;
    let mut deliveries = Vec::with_capacity(HISTORY);
    for i in 0..HISTORY {
        let record = ProducerRecord::new(value(i)).with_partition(PartitionId::new(0));
        deliveries.push(producer.send(record).await.expect("accepted"));
    }
    for delivery in deliveries {
        delivery.await.expect("acknowledged");
    }
    cluster.wait_tiered(STREAM, (HISTORY as u64) * 7 / 10).await;
    let listed = cluster.rest.read_replicas().await.expect("list").replicas;
    assert!(listed.is_empty(), "no replica before any load: {listed:?}");

    // Scale from zero: nobody serves history but the leader, whose history reads the
    // autoscaler sees in its heartbeats.
    let leader_metrics = cluster.metrics_addr(0);
    let first = cluster.reading_client().await;
    read_history(&first, &stream).await;
    first.close().await;
    assert!(
        tier_bytes(&leader_metrics).await > 0.0,
        "with no replica the leader served the history"
    );
    let waiting = Instant::now();
    let replica = cluster
        .wait_for(
            "a replica started by the autoscaler",
            async |c: &Cluster| {
                let list = c.rest.read_replicas().await.ok()?.replicas;
                list.into_iter().find(|r| r.state == ReadReplicaState::Live)
            },
        )
        .await;
    eprintln!(
        "replica {} live {:?} after the read ended",
        replica.replica_id,
        waiting.elapsed()
    );

    // The next history reader goes to the replica; the leader reads nothing from the tier.
    let leader_tier_before = tier_bytes(&leader_metrics).await;
    let second = cluster.reading_client().await;
    read_history(&second, &stream).await;
    let leader_tier = tier_bytes(&leader_metrics).await - leader_tier_before;
    assert_eq!(
        leader_tier, 0.0,
        "the leader served history with a replica live"
    );
    // A heartbeat reports what the replica served since the one before, so a report shows a
    // read only until the next heartbeat. Reading on while waiting keeps it in the reports
    // however the polls and beats fall (a single fast read was missed once in CI).
    let reading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = {
        let (client, stream, reading) = (second.clone(), stream.clone(), reading.clone());
        tokio::spawn(async move {
            while reading.load(std::sync::atomic::Ordering::Relaxed) {
                read_history(&client, &stream).await;
            }
        })
    };
    let served = cluster
        .wait_for("the replica reports what it served", async |c: &Cluster| {
            let list = c.rest.read_replicas().await.ok()?.replicas;
            let r = list
                .into_iter()
                .find(|r| r.replica_id == replica.replica_id)?;
            (r.bytes_served_per_second > 0).then_some(r)
        })
        .await;
    eprintln!(
        "replica reported {} B/s, {} consumers",
        served.bytes_served_per_second, served.consumers
    );
    reading.store(false, std::sync::atomic::Ordering::Relaxed);
    reader.await.expect("the background reads");
    second.close().await;

    // The load is gone: drained, stopped and removed.
    cluster
        .wait_for("the idle replica stopped", async |c: &Cluster| {
            let list = c.rest.read_replicas().await.ok()?.replicas;
            list.iter()
                .all(|r| r.replica_id != replica.replica_id || r.state == ReadReplicaState::Dead)
                .then_some(())
        })
        .await;
    let text = http_get(&cluster.controlplane_addr(), "/metrics").await;
    assert!(
        metric(&text, "floe_autoscaler_replicas_stopped_total") >= 1.0,
        "{text}"
    );
    assert!(
        metric(&text, "floe_autoscaler_replicas_started_total") >= 1.0,
        "{text}"
    );

    producer.close().await.expect("close");
    writer.close().await;
    cluster.shutdown().await;
}

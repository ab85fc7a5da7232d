//! A broker of a replicated cluster whose disk fills up, with real processes: three
//! `floe-broker serve` processes, one of them keeping its data on a small tmpfs that the
//! test fills with a ballast file and frees again. Neither as a follower nor as a leader
//! may it need a restart to take part again once space is freed:
//!
//! - a follower's replica pauses (its appends fail with a full disk), then recovers from its
//!   log and catches up; the other two acknowledge meanwhile;
//! - a leader refuses publishes with `DiskHighWater` (retryable) while full, keeps its
//!   leadership, and acknowledges the retried records once space is freed.
//!
//! Before the fix, the first write that met the full disk stopped the replica until the
//! broker restarted: the follower never caught up, and the leader (whose high-watermark
//! checkpoint failed) stopped leading with nobody elected in its place. The chaos harness
//! (`tests/chaos/`) found it.
//!
//! Mounting a tmpfs needs root; without it the test says so and does nothing.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{BrokerSetup, Bucket, Cluster, Timing};
use common::small_disk::SmallDisk;
use common::{http_get, metric};
use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};
use floe_wire::LeaderEpoch;

const STREAM: &str = "full";
/// The broker process on the small disk.
const SMALL: usize = 2;

fn name() -> StreamName {
    StreamName::new(STREAM).expect("name")
}

fn producer_config() -> ProducerConfig {
    ProducerConfig {
        delivery_timeout: Duration::from_secs(60),
        max_retries: 10_000,
        retry_backoff_max: Duration::from_millis(200),
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    }
}

/// Sends `count` records labelled `label` and returns their deliveries.
async fn send(
    producer: &Producer,
    label: &str,
    count: usize,
) -> Vec<(String, floe_client::Delivery)> {
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let value = format!("{label}-{i:05}");
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        pending.push((value, producer.send(record).await.expect("send")));
    }
    pending
}

async fn acknowledged(pending: Vec<(String, floe_client::Delivery)>) -> Vec<(u64, String)> {
    let mut acked = Vec::with_capacity(pending.len());
    for (value, delivery) in pending {
        let offset = delivery.await.expect("acknowledged");
        acked.push((offset.get(), value));
    }
    acked
}

/// Publishes disk-full refusals and replica pauses of broker process `i`, from its metrics.
async fn counts(cluster: &Cluster, i: usize) -> (f64, f64) {
    let scraped = http_get(&cluster.metrics_addr(i), "/metrics").await;
    (
        metric(
            &scraped,
            "floe_publish_refused_batches_total{code=\"DiskHighWater\"}",
        ),
        metric(&scraped, "floe_replica_disk_full_pauses_total"),
    )
}

/// Waits until every follower of the partition has caught up with a leader whose high
/// watermark reaches `end`; returns the high watermark.
async fn caught_up(cluster: &Cluster, end: u64) -> u64 {
    cluster
        .wait_for("every follower to catch up", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            let high_watermark = p.high_watermark?;
            let done = p.leader.is_some()
                && p.replica_lag.len() == 2
                && p.replica_lag.iter().all(|l| l.records == 0)
                && high_watermark >= end;
            done.then_some(high_watermark)
        })
        .await
}

/// Moves the leadership onto process `target`: with the third broker down, records go to
/// the leader and `target` only; then the leader dies and the third comes back, and
/// `target`, the most up to date, wins the election. The old leader then returns.
async fn lead_from(
    cluster: &mut Cluster,
    target: usize,
    producer: &Producer,
    acked: &mut Vec<(u64, String)>,
) {
    let (leader, epoch) = cluster.leader_after(STREAM, 0, LeaderEpoch::ZERO).await;
    let old = cluster.index_of(leader);
    if old == target {
        return;
    }
    let third = 3 - old - target;
    cluster.kill(third);
    acked.extend(acknowledged(send(producer, "ahead", 20).await).await);
    cluster.kill(old);
    cluster.restart(third);
    let (leader, _) = cluster.leader_after(STREAM, 0, epoch).await;
    assert_eq!(
        cluster.index_of(leader),
        target,
        "the most up to date leads"
    );
    cluster.restart(old);
    caught_up(cluster, end_of(acked)).await;
}

/// Moves the leadership off process `avoid`: it dies and comes back.
async fn lead_elsewhere(cluster: &mut Cluster, avoid: usize, end: u64) {
    let (leader, epoch) = cluster.leader_after(STREAM, 0, LeaderEpoch::ZERO).await;
    if cluster.index_of(leader) != avoid {
        return;
    }
    cluster.kill(avoid);
    cluster.leader_after(STREAM, 0, epoch).await;
    cluster.restart(avoid);
    caught_up(cluster, end).await;
}

fn end_of(acked: &[(u64, String)]) -> u64 {
    acked.iter().map(|(o, _)| o + 1).max().unwrap_or(0)
}

async fn check_log(client: &Client, acked: &[(u64, String)]) {
    let end = end_of(acked);
    let log = common::cluster::read_from_start(client, STREAM, |r| {
        r.last().is_some_and(|(offset, _)| offset + 1 >= end)
    })
    .await;
    common::cluster::check_acknowledged(acked, &log);
    assert_eq!(
        log.len(),
        acked.len(),
        "nothing stored but what was acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_disk_filled_takes_part_again_once_space_is_freed_without_a_restart() {
    // The controlplane runs in this process: its warnings (a failing metadata store, say)
    // explain a cluster that does not recover.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("floe_controlplane=warn")),
        )
        .with_test_writer()
        .try_init();
    let disk = match SmallDisk::mount(32) {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("cannot mount a tmpfs ({why}; needs root): skipping");
            return;
        }
    };
    let objects = tempfile::tempdir().expect("tempdir");
    let mut setups = vec![BrokerSetup::default(); 3];
    setups[SMALL] = BrokerSetup {
        data_dir: Some(disk.data_dir()),
        args: vec!["--disk-high-water".into(), "90%".into()],
    };
    let bucket = Bucket::Directory(objects.path().to_path_buf());
    let mut cluster = Cluster::start_with_setup(3, Timing::default(), bucket, setups).await;
    cluster.create_replicated(STREAM).await;
    let client = cluster.cluster_client().await;
    let producer = Producer::new(&client, name(), producer_config())
        .await
        .expect("producer");
    let mut acked = acknowledged(send(&producer, "before", 200).await).await;

    // A follower's disk fills: the two others acknowledge without it.
    lead_elsewhere(&mut cluster, SMALL, end_of(&acked)).await;
    let (_, pauses_before) = counts(&cluster, SMALL).await;
    let ballast = disk.fill();
    acked.extend(acknowledged(send(&producer, "follower-full", 200).await).await);
    let (_, pauses) = counts(&cluster, SMALL).await;
    assert!(
        pauses > pauses_before,
        "the full follower's replica paused ({pauses_before} → {pauses})"
    );
    drop(ballast);
    let started = Instant::now();
    caught_up(&cluster, end_of(&acked)).await;
    eprintln!(
        "the follower caught up {:?} after its disk was freed",
        started.elapsed()
    );

    // The leader's disk fills: it refuses publishes, retryably, and keeps leading.
    lead_from(&mut cluster, SMALL, &producer, &mut acked).await;
    let (_, epoch) = cluster.leader_after(STREAM, 0, LeaderEpoch::ZERO).await;
    let committed = caught_up(&cluster, end_of(&acked)).await;
    let (refused_before, _) = counts(&cluster, SMALL).await;
    let ballast = disk.fill();
    let pending = send(&producer, "leader-full", 100).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts(&cluster, SMALL).await.0 <= refused_before {
        assert!(
            Instant::now() < deadline,
            "no publish was refused\n{}",
            cluster.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let high_watermark = cluster
        .partition(STREAM, 0)
        .await
        .and_then(|p| p.high_watermark);
    assert_eq!(
        high_watermark,
        Some(committed),
        "nothing is committed while the leader's disk is full"
    );
    drop(ballast);
    acked.extend(acknowledged(pending).await);
    let (leader, now) = cluster.leader_after(STREAM, 0, LeaderEpoch::ZERO).await;
    assert_eq!(
        (cluster.index_of(leader), now),
        (SMALL, epoch),
        "the leader kept its leadership"
    );
    caught_up(&cluster, end_of(&acked)).await;

    check_log(&client, &acked).await;
    producer.close().await.expect("close");
    client.close().await;
    cluster.shutdown().await;
    drop(disk);
}

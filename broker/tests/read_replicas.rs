//! Read replicas as real processes: a broker whose partition is mostly tiered, two
//! `floe-broker read-replica` processes, and a consumer that knows the controlplane. It reads from
//! offset 0 through a replica — history from the tier, then the live tail while a producer
//! keeps publishing — and gets every record once, in order; SIGKILLed mid-read, its replica
//! is replaced by the other with no gap and no duplicate. Meanwhile the broker serves only
//! the replicas' tail-follow fetches, not the history. A replica given a read-only key reads
//! all of a tiered history through a bucket that refuses writes, and never tries one.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Bucket, Cluster, Timing};
use common::write_refusing_bucket::WriteRefusingBucket;
use common::{http_get, http_request, metric, tier_bytes};
use floe_client::{
    Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer, ProducerRecord, StreamName,
};
use floe_wire::admin::ReadReplicaState;

const STREAM: &str = "history";
/// Records published before the replicas start: most end up tiered.
const HISTORY: usize = 12_000;
/// Records published while the consumer reads.
const LIVE: usize = 2_000;

fn value(i: usize) -> String {
    format!("record-{i:07}-{}", "x".repeat(150))
}

async fn publish(producer: &Producer, from: usize, count: usize, pause_every: Option<usize>) {
    let mut deliveries = Vec::with_capacity(count);
    for i in from..from + count {
        let record = ProducerRecord::new(value(i)).with_partition(PartitionId::new(0));
        deliveries.push(producer.send(record).await.expect("accepted"));
        if pause_every.is_some_and(|n| i % n == 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for delivery in deliveries {
        delivery.await.expect("acknowledged");
    }
}

/// Bytes of batches a process served for the stream, from its `/metrics`.
async fn fetched_bytes(metrics_addr: &str) -> f64 {
    let text = http_get(metrics_addr, "/metrics").await;
    metric(
        &text,
        &format!("floe_fetch_bytes_total{{stream=\"{STREAM}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_read_history_and_tail_through_replicas_and_survive_losing_one() {
    let cluster = Cluster::start(1, Timing::default()).await;
    cluster.create_tiering_stream(STREAM).await;
    let stream = StreamName::new(STREAM).expect("name");

    let writer = cluster.cluster_client().await;
    let producer = common::segment_spanning_producer(&writer, &stream).await;
    publish(&producer, 0, HISTORY, None).await;
    // Most of the history leaves the broker's disk for the tier.
    let tiered = cluster.wait_tiered(STREAM, (HISTORY as u64) * 8 / 10).await;
    eprintln!("tiered [{}, {})", tiered.start, tiered.end);

    let mut replicas = vec![cluster.start_replica("r-a"), cluster.start_replica("r-b")];
    cluster
        .wait_for("two live read replicas", async |c: &Cluster| {
            let list = c.rest.read_replicas().await.ok()?.replicas;
            (list
                .iter()
                .filter(|r| r.state == ReadReplicaState::Live)
                .count()
                == 2)
                .then_some(())
        })
        .await;

    let leader_before = fetched_bytes(&cluster.metrics_addr(0)).await;
    let leader_tier_before = tier_bytes(&cluster.metrics_addr(0)).await;
    let reader = cluster.reading_client().await;
    let config = ConsumerConfig {
        max_bytes: 64 * 1024,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(
        reader.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        config,
    );
    let live = {
        let producer = producer.clone();
        tokio::spawn(async move { publish(&producer, HISTORY, LIVE, Some(50)).await })
    };
    let mut killed = None;
    let started = Instant::now();
    for i in 0..HISTORY + LIVE {
        let record = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("record {i} did not arrive"))
            .expect("a record");
        assert_eq!(record.offset.get(), i as u64, "offsets in order, no gap");
        assert_eq!(&record.value[..], value(i).as_bytes(), "offset {i}");
        if i == HISTORY / 2 {
            // Kill the replica this consumer reads from: the one that served bytes.
            let mut serving = None;
            for (index, replica) in replicas.iter().enumerate() {
                if fetched_bytes(&replica.metrics).await > 0.0 {
                    serving = Some(index);
                }
            }
            let index = serving.expect("a replica served the history read");
            eprintln!("killing read replica {} mid-read", replicas[index].id);
            replicas[index].kill();
            killed = Some(index);
        }
    }
    let took = started.elapsed();
    live.await.expect("live publishing");
    let survivor = &replicas[1 - killed.expect("a replica was killed")];
    let survivor_bytes = fetched_bytes(&survivor.metrics).await;
    assert!(survivor_bytes > 0.0, "the other replica took over the read");

    // The leader served the replicas' tail-follow fetches (the hot window and the live
    // tail, once per replica), not the consumer's history.
    let leader_bytes = fetched_bytes(&cluster.metrics_addr(0)).await - leader_before;
    let history_bytes = (HISTORY * value(0).len()) as f64;
    eprintln!(
        "read {} records in {took:?}; the leader served {leader_bytes} bytes, the surviving \
         replica {survivor_bytes}",
        HISTORY + LIVE
    );
    let leader_tier_bytes = tier_bytes(&cluster.metrics_addr(0)).await - leader_tier_before;
    assert_eq!(
        leader_tier_bytes, 0.0,
        "the leader read history from the tier for someone"
    );
    assert!(
        leader_bytes < history_bytes * 0.5,
        "the leader served {leader_bytes} bytes while consumers read {history_bytes} bytes of history"
    );

    producer.close().await.expect("close");
    writer.close().await;
    reader.close().await;
    drop(replicas);
    cluster.shutdown().await;
}

/// A read replica holds read-only credentials of its own and never writes to the bucket: the
/// brokers tier to a real S3-compatible server with their read-write key; the replica reaches
/// the same bucket through a proxy that refuses every write with `403 AccessDenied`, signing
/// with the key its flags give it rather than the `AWS_*` key in its environment. A consumer
/// reads all of the tiered history through it, and the proxy saw reads only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_read_only_key_reads_history_and_never_writes_to_the_bucket() {
    let name = format!("floe-read-only-{}", std::process::id());
    let Some(bucket) = Bucket::s3(&name, "tier").await else {
        eprintln!("FLOE_TEST_S3_ENDPOINT is unset: no S3-compatible server to test against");
        return;
    };
    let Bucket::S3 { url, endpoint } = bucket.clone() else {
        unreachable!("an S3 bucket");
    };
    let cluster = Cluster::start_on_bucket(1, Timing::default(), bucket).await;
    cluster.create_tiering_stream(STREAM).await;
    let stream = StreamName::new(STREAM).expect("name");
    let writer = cluster.cluster_client().await;
    let producer = common::segment_spanning_producer(&writer, &stream).await;
    const RECORDS: usize = 4_000;
    publish(&producer, 0, RECORDS, None).await;
    // Batches span segments: the last one stays in the active segment, the rest is tiered.
    let tiered = cluster.wait_tiered(STREAM, (RECORDS as u64) / 2).await;
    eprintln!("tiered [{}, {}) to {url}", tiered.start, tiered.end);

    // The proxy refuses writes, as S3 does for a key whose policy allows only reads.
    let proxy = WriteRefusingBucket::start(&endpoint).await;
    let authority = proxy.endpoint.trim_start_matches("http://");
    let probe = http_request(authority, "PUT", &format!("/{name}/tier/probe")).await;
    assert!(
        probe.starts_with("HTTP/1.1 403") && probe.contains("AccessDenied"),
        "{probe}"
    );
    let probe_only = vec![format!("PUT /{name}/tier/probe")];
    assert_eq!(proxy.refused(), probe_only);

    let objects = vec![
        "--object-store".to_owned(),
        url.clone(),
        "--s3-endpoint".to_owned(),
        proxy.endpoint.clone(),
        "--s3-allow-http".to_owned(),
        "--s3-access-key-id".to_owned(),
        "floe-replica-read-only".to_owned(),
    ];
    // The brokers' key in the environment too: the replica's own settings win over it.
    let mut env = cluster.objects.env();
    env.push(("FLOE_S3_SECRET_ACCESS_KEY".into(), "floe-test-read".into()));
    let replica = cluster.start_replica_with("r-read-only", &objects, &env);
    cluster
        .wait_for("a live read replica", async |c: &Cluster| {
            let list = c.rest.read_replicas().await.ok()?.replicas;
            list.iter()
                .any(|r| r.state == ReadReplicaState::Live)
                .then_some(())
        })
        .await;

    let reader = cluster.reading_client().await;
    let mut consumer = Consumer::new(
        reader.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig {
            max_bytes: 64 * 1024,
            ..ConsumerConfig::default()
        },
    );
    for i in 0..RECORDS {
        let record = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("record {i} did not arrive\n{}", replica.log()))
            .expect("a record");
        assert_eq!(record.offset.get(), i as u64, "offsets in order, no gap");
        assert_eq!(&record.value[..], value(i).as_bytes(), "offset {i}");
    }

    // The replica served the read, from the bucket through the proxy, and tried no write.
    assert!(
        fetched_bytes(&replica.metrics).await > 0.0,
        "the replica served"
    );
    let metrics = http_get(&replica.metrics, "/metrics").await;
    let tier_read = metric(&metrics, "floe_tier_get_bytes_total");
    let history_bytes = (tiered.end - tiered.start) as f64 * value(0).len() as f64;
    assert!(
        tier_read >= history_bytes,
        "the replica read {tier_read} bytes from the bucket for {history_bytes} bytes of tiered \
         history"
    );
    let forwarded = proxy.forwarded();
    assert!(
        forwarded.iter().any(|r| r.contains("/segments/")),
        "no segment read through the proxy: {forwarded:?}"
    );
    assert_eq!(proxy.refused(), probe_only, "the replica tried to write");
    assert_eq!(
        metric(&metrics, "floe_tier_put_bytes_total"),
        0.0,
        "{metrics}"
    );
    let keys = proxy.access_keys();
    assert!(
        keys.iter()
            .all(|k| k == "floe-replica-read-only" || k == "-"),
        "requests signed with another key: {keys:?}"
    );
    assert!(keys.contains("floe-replica-read-only"), "{keys:?}");
    eprintln!(
        "{} reads through the proxy, {tier_read} bytes of tier read",
        forwarded.len()
    );

    producer.close().await.expect("close");
    writer.close().await;
    reader.close().await;
    drop(replica);
    cluster.shutdown().await;
}

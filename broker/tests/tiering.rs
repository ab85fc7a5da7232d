//! Tiering end to end with real broker processes: sealed segments go to object storage, the
//! local disk keeps only its window, and a consumer reads from offset 0 across the tier/hot
//! boundary — also after a restart with an empty cache, after a crash between an upload and
//! its commit, and while object storage is away.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::moto::Moto;
use common::*;
use floe_client::{
    AckMode, Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId,
    PartitionMetadata, Producer, ProducerConfig, ProducerRecord, StreamName, StreamSettings,
};

const SEGMENT_BYTES: u64 = 128 * 1024;
/// Upload runs every second rather than every 10 s, to keep the tests short.
const FAST_UPLOADS: &[&str] = &["--tier-upload-interval", "1s"];
const LOCAL_RETENTION_BYTES: u64 = 256 * 1024;

fn settings() -> StreamSettings {
    StreamSettings {
        segment_bytes: Some(SEGMENT_BYTES),
        local_retention_bytes: Some(LOCAL_RETENTION_BYTES),
        ..StreamSettings::default()
    }
}

fn value(i: u64) -> String {
    format!("record-{i:07}-{}", "x".repeat(200))
}

fn number(value: &[u8]) -> u64 {
    let text = std::str::from_utf8(value).expect("utf-8");
    text["record-".len()..][..7].parse().expect("record number")
}

fn producer_config() -> ProducerConfig {
    ProducerConfig {
        max_batch_bytes: common::SEGMENT_SPANNING_BATCH_BYTES,
        max_retries: 1000,
        retry_backoff_max: Duration::from_millis(200),
        delivery_timeout: Duration::from_secs(120),
        ..ProducerConfig::default()
    }
}

async fn connect(broker: &BrokerProcess) -> Client {
    let mut config = ClientConfig::from_profile(&broker.profile);
    config.reconnect_attempts = 50;
    config.reconnect_backoff_max = Duration::from_millis(200);
    Client::connect(config).await.expect("connect")
}

type Deliveries = Vec<(
    u64,
    tokio::task::JoinHandle<Result<floe_client::Offset, floe_client::Error>>,
)>;

/// The record numbers whose deliveries succeeded, once all are settled; closes the producer.
async fn acknowledged(producer: Producer, deliveries: Deliveries) -> Vec<u64> {
    let mut acked = Vec::new();
    for (i, delivery) in deliveries {
        if delivery.await.expect("delivery task").is_ok() {
            acked.push(i);
        }
    }
    let _ = producer.close().await;
    acked
}

/// Publishes records `range` to partition 0 and returns the numbers acknowledged.
async fn publish(client: &Client, stream: &StreamName, range: std::ops::Range<u64>) -> Vec<u64> {
    let producer = Producer::new(client, stream.clone(), producer_config())
        .await
        .expect("producer");
    let mut deliveries = Vec::new();
    for i in range {
        let record = ProducerRecord::new(value(i)).with_partition(PartitionId::new(0));
        let delivery = producer.send(record).await.expect("send accepted");
        deliveries.push((i, tokio::spawn(delivery)));
    }
    acknowledged(producer, deliveries).await
}

/// Publishes records from `first` on in paced rounds until `stop` is set; returns the
/// numbers acknowledged.
async fn publish_paced(
    client: &Client,
    stream: &StreamName,
    first: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<u64> {
    let producer = Producer::new(client, stream.clone(), producer_config())
        .await
        .expect("producer");
    let mut deliveries = Vec::new();
    let mut i = first;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for _ in 0..200 {
            let record = ProducerRecord::new(value(i)).with_partition(PartitionId::new(0));
            let delivery = producer.send(record).await.expect("send accepted");
            deliveries.push((i, tokio::spawn(delivery)));
            i += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    acknowledged(producer, deliveries).await
}

/// Partition 0 as the broker describes it. Just after a restart the broker may list the
/// stream before it has reopened the partition (a managed broker opens it when the
/// controlplane's assignment arrives): that is waited out, for at most 30 s.
async fn partition(client: &Client, stream: &StreamName) -> PartitionMetadata {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = client.stream(stream).await.expect("describe");
        if let Some(p) = info.partitions.first() {
            return p.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the broker never served a partition of {stream}: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the partition's metadata until `done` holds; panics with the last state after
/// `limit`.
async fn wait_for(
    client: &Client,
    stream: &StreamName,
    limit: Duration,
    what: &str,
    done: impl Fn(&PartitionMetadata) -> bool,
) -> PartitionMetadata {
    let deadline = Instant::now() + limit;
    loop {
        let p = partition(client, stream).await;
        if done(&p) {
            return p;
        }
        assert!(Instant::now() < deadline, "waited for {what}: {p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads the partition from offset 0 to `end` and checks every record number appears once,
/// in increasing order, and that `expected` are all there.
async fn read_all(client: Client, stream: &StreamName, end: u64, expected: &[u64]) {
    let mut consumer = Consumer::new(
        client,
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let mut seen = BTreeSet::new();
    let mut last: Option<u64> = None;
    let mut next_offset = 0;
    while next_offset < end {
        let record = consumer
            .poll(Duration::from_secs(10))
            .await
            .expect("poll")
            .unwrap_or_else(|| panic!("nothing at offset {next_offset} of {end}"));
        assert_eq!(record.offset.get(), next_offset, "offsets are dense");
        next_offset += 1;
        let n = number(&record.value);
        assert!(seen.insert(n), "record {n} read twice");
        assert!(last.is_none_or(|l| l < n), "record {n} after {last:?}");
        last = Some(n);
    }
    for n in expected {
        assert!(seen.contains(n), "acknowledged record {n} missing");
    }
}

fn objects(data_dir: &Path, stream: &str, kind: &str) -> BTreeSet<String> {
    let dir = data_dir.join("objects").join(stream).join("0").join(kind);
    match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Segments the manifest of `stream`'s partition 0 lists, in the dev broker's bucket.
async fn tiered_segments(data_dir: &Path, stream: &str) -> usize {
    let store = floe_tier::TierStore::open(
        &format!("file://{}", data_dir.join("objects").display()),
        &floe_tier::S3Settings::default(),
    )
    .expect("the bucket");
    let path = floe_tier::PartitionPath::new(stream, 0).expect("a partition path");
    floe_tier::manifest::ManifestLog::new(store, path)
        .load()
        .await
        .expect("the manifest")
        .segments
        .len()
}

fn local_segments(data_dir: &Path, stream: &str) -> usize {
    std::fs::read_dir(data_dir.join("streams").join(stream).join("0"))
        .expect("partition dir")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_read_from_offset_zero_across_the_tier_boundary_and_after_a_restart() {
    const RECORDS: u64 = 20_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = BrokerProcess::start_with(dir.path(), "127.0.0.1:0", FAST_UPLOADS, &[]);
    let listen = broker.addr().to_string();
    let data_dir = broker.data_dir.clone();
    let client = connect(&broker).await;
    let stream = StreamName::new("history").expect("name");
    client
        .create_stream(&stream, 1, AckMode::Leader, settings())
        .await
        .expect("create");
    let acked = publish(&client, &stream, 0..RECORDS).await;
    assert_eq!(acked.len() as u64, RECORDS, "every record acknowledged");

    // Roughly 4.5 MiB in 128 KiB segments: dozens sealed, tiered, and gone from local disk.
    let p = wait_for(
        &client,
        &stream,
        Duration::from_secs(60),
        "the local window to shrink",
        |p| p.local_start.get() > RECORDS / 2 && p.upload_backlog.segments == 0,
    )
    .await;
    assert_eq!(p.log_start.get(), 0, "history starts at 0, in the tier");
    assert!(
        p.tier_end >= p.local_start,
        "no gap between tier and disk: {p:?}"
    );
    let segments = objects(&data_dir, "history", "segments");
    assert!(segments.len() >= 10, "segment objects: {segments:?}");
    assert!(segments.iter().all(|s| s.ends_with(".seg")));
    assert!(!objects(&data_dir, "history", "manifest").is_empty());
    // Local retention runs once a second, after the upload that made a segment deletable.
    let deadline = Instant::now() + Duration::from_secs(30);
    while local_segments(&data_dir, "history") > 6 {
        assert!(
            Instant::now() < deadline,
            "the local disk keeps only its window"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    read_all(client, &stream, RECORDS, &acked).await;

    // A restart with an empty cache reads the same history again from object storage.
    broker.kill();
    let _ = std::fs::remove_dir_all(data_dir.join("cache"));
    let broker = BrokerProcess::start_with(dir.path(), &listen, FAST_UPLOADS, &[]);
    let client = connect(&broker).await;
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    read_all(client, &stream, RECORDS, &acked).await;
    let text = http_get(&metrics, "/metrics").await;
    let gets = metric(&text, "floe_tier_requests_total{kind=\"get\"}");
    assert!(
        gets > 0.0,
        "the restarted broker read from object storage:\n{text}"
    );
}

/// Needs the broker's failpoints: a debug build, or `--features floe-broker/failpoints`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(any(debug_assertions, feature = "failpoints")),
    ignore = "a release build without the failpoints feature has no failpoints"
)]
async fn a_crash_between_upload_and_commit_loses_nothing_and_the_orphan_is_collected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = BrokerProcess::start_with(
        dir.path(),
        "127.0.0.1:0",
        FAST_UPLOADS,
        &[("FLOE_TEST_FAILPOINT", "tier-before-commit")],
    );
    let listen = broker.addr().to_string();
    let data_dir = broker.data_dir.clone();
    let client = connect(&broker).await;
    let stream = StreamName::new("orphans").expect("name");
    client
        .create_stream(&stream, 1, AckMode::Leader, settings())
        .await
        .expect("create");
    // The first upload aborts the broker before its commit. The producer keeps retrying
    // until the broker is back, without the failpoint.
    let publisher = {
        let (client, stream) = (client.clone(), stream.clone());
        tokio::spawn(async move { publish(&client, &stream, 0..4_000).await })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = broker.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the failpoint never fired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success(), "the failpoint stopped the broker");
    let orphans = objects(&data_dir, "orphans", "segments");
    assert!(!orphans.is_empty(), "the upload happened before the crash");
    // The manifest may hold the broker's fence of its epoch (no segment), nothing more.
    assert_eq!(
        tiered_segments(&data_dir, "orphans").await,
        0,
        "no segment commit happened"
    );

    let broker = BrokerProcess::start_with(
        dir.path(),
        &listen,
        &[
            "--tier-collect-interval",
            "1s",
            "--tier-collect-grace",
            "1s",
        ],
        &[],
    );
    let acked = publisher.await.expect("publisher");
    assert!(acked.len() > 3_000, "only {} acknowledged", acked.len());
    let client = connect(&broker).await;
    let p = wait_for(
        &client,
        &stream,
        Duration::from_secs(60),
        "the tier to catch up",
        |p| p.tier_end.get() > 0 && p.upload_backlog.segments == 0,
    )
    .await;
    assert!(p.tier_end.get() > 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = objects(&data_dir, "orphans", "segments");
        if orphans.iter().all(|o| !now.contains(o)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "orphans {orphans:?} still in {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let end = partition(&client, &stream).await.high_watermark.get();
    read_all(client.clone(), &stream, end, &acked).await;

    // Deleting the stream deletes its objects; then the name is free again.
    client.delete_stream(&stream).await.expect("delete");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !objects(&data_dir, "orphans", "segments").is_empty()
        || !objects(&data_dir, "orphans", "manifest").is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "objects of the deleted stream remain"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client
            .create_stream(&stream, 1, AckMode::Leader, settings())
            .await
        {
            Ok(()) => break,
            Err(e) => {
                assert!(Instant::now() < deadline, "the name stayed taken: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(partition(&client, &stream).await.high_watermark.get(), 0);
}

/// A partition uploads at most once per `--tier-upload-interval`; what is sealed in between
/// waits, and the backlog shows it at once (it used to be the last run's plan: zero).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_counts_segments_sealed_between_upload_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start_with(
        dir.path(),
        "127.0.0.1:0",
        &["--tier-upload-interval", "10m"],
        &[],
    );
    let client = connect(&broker).await;
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let stream = StreamName::new("between").expect("name");
    client
        .create_stream(&stream, 1, AckMode::Leader, settings())
        .await
        .expect("create");
    // Batches of up to 256 KiB into 128 KiB segments: each batch after the first seals one.
    publish(&client, &stream, 0..2_000).await;
    let first = wait_for(
        &client,
        &stream,
        Duration::from_secs(30),
        "the first upload run",
        |p| p.tier_end.get() > 0 && p.upload_backlog.segments == 0,
    )
    .await;

    // The next run of this partition is ten minutes away.
    publish(&client, &stream, 2_000..6_000).await;
    let p = partition(&client, &stream).await;
    assert_eq!(p.tier_end, first.tier_end, "no second run yet: {p:?}");
    assert!(p.upload_backlog.segments >= 2, "{p:?}");
    assert!(
        p.upload_backlog.bytes >= p.upload_backlog.segments * SEGMENT_BYTES * 3 / 4,
        "{p:?}"
    );
    let scraped = http_get(&metrics, "/metrics").await;
    assert_eq!(
        metric(
            &scraped,
            "floe_tier_upload_backlog_segments{stream=\"between\"}"
        ),
        p.upload_backlog.segments as f64,
        "the metric agrees with describe"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_goes_on_while_object_storage_is_away_and_the_backlog_drains() {
    let Some(moto) = Moto::start("floe").await else {
        eprintln!("FLOE_TEST_MOTO_SERVER is not set (scripts/test.sh sets it): not run");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoint = format!("http://{}", moto.endpoint);
    let broker = BrokerProcess::start_with(
        dir.path(),
        "127.0.0.1:0",
        &[
            "--object-store",
            "s3://floe/outage",
            "--s3-endpoint",
            &endpoint,
            "--s3-allow-http",
            "--disk-high-water",
            "1536KiB",
            "--tier-upload-interval",
            "1s",
        ],
        &[
            ("AWS_ACCESS_KEY_ID", "floe-test"),
            ("AWS_SECRET_ACCESS_KEY", "floe-test"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    let client = connect(&broker).await;
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let stream = StreamName::new("outage").expect("name");
    client
        .create_stream(&stream, 1, AckMode::Leader, settings())
        .await
        .expect("create");
    let mut acked = publish(&client, &stream, 0..3_000).await;
    wait_for(
        &client,
        &stream,
        Duration::from_secs(60),
        "the first segments to be tiered",
        |p| p.tier_end.get() > 0 && p.upload_backlog.segments == 0,
    )
    .await;

    // Object storage stops answering. Publishing goes on into the local log until the disk
    // high-water mark, where the broker refuses (retryably) rather than drop anything.
    moto.signal("-STOP");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = {
        let (client, stream, stop) = (client.clone(), stream.clone(), stop.clone());
        tokio::spawn(async move { publish_paced(&client, &stream, 3_000, &stop).await })
    };
    let p = wait_for(
        &client,
        &stream,
        Duration::from_secs(60),
        "a backlog to build up",
        |p| p.upload_backlog.segments >= 3,
    )
    .await;
    assert!(p.upload_backlog.bytes >= 3 * SEGMENT_BYTES / 2, "{p:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(
        &http_get(&metrics, "/metrics").await,
        "floe_disk_high_water",
    ) < 1.0
    {
        assert!(
            Instant::now() < deadline,
            "the high-water mark was never reached"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Refused publishes append nothing (once the appends admitted before the mark are
    // synced).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused_at = partition(&client, &stream).await.high_watermark;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(partition(&client, &stream).await.high_watermark, refused_at);

    // Object storage returns: the backlog drains, local retention frees the disk, and the
    // refused publishes go through on retry.
    moto.signal("-CONT");
    wait_for(
        &client,
        &stream,
        Duration::from_secs(120),
        "publishing to resume",
        |p| p.high_watermark > refused_at,
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let more = publisher.await.expect("publisher");
    assert!(
        more.len() as u64 > refused_at.get() - 3_000,
        "acknowledged {} after 3000; {refused_at} were stored before the refusal",
        more.len()
    );
    acked.extend(more);
    let total = partition(&client, &stream).await.high_watermark.get();
    assert_eq!(
        acked.len() as u64,
        total,
        "every stored record was acknowledged"
    );
    let p = wait_for(
        &client,
        &stream,
        Duration::from_secs(120),
        "the backlog to drain",
        |p| p.upload_backlog.segments == 0 && p.local_start.get() > 0,
    )
    .await;
    assert_eq!(p.log_start.get(), 0);
    read_all(client, &stream, total, &acked).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(
        &http_get(&metrics, "/metrics").await,
        "floe_disk_high_water",
    ) > 0.0
    {
        assert!(
            Instant::now() < deadline,
            "the high-water mark never cleared"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

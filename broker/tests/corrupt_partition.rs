//! Rot in a partition's active segment, on a real `floe-broker dev` process: ten publishes of
//! 100 records acknowledged with ack mode `leader`, SIGKILL, 8 bytes flipped a third of the way
//! into the active segment, restart. The partition must come back `corrupt` — a clear error to
//! its consumers and producers naming the stream, partition and offsets but no path of the
//! server, the file and byte in the broker's log, counted in
//! `floe_partitions_corrupt` — and never with fewer records and no error; another stream on
//! the same broker goes on publishing and reading.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use floe_client::{
    Client, ClientConfig, Consumer, ConsumerConfig, ErrorCode, FetchPosition, PartitionId,
    StreamSettings,
};
use floe_wire::frame::{Message, Produce};
use floe_wire::{AckMode, BatchBuilder, StreamName};

fn rotting() -> StreamName {
    StreamName::new("rotting").expect("name")
}

fn healthy() -> StreamName {
    StreamName::new("healthy").expect("name")
}

/// One batch of 100 records.
fn hundred(publish: u32) -> Bytes {
    let mut b = BatchBuilder::new(1 << 20);
    for i in 0..100 {
        b.push(
            1_000,
            None,
            format!("publish-{publish}-record-{i}").as_bytes(),
            &[],
        )
        .expect("push");
    }
    b.finish().expect("finish")
}

/// Publishes one batch of 100 records and waits for its acknowledgement. Like a producer,
/// it tries again while the broker answers `NotLeader`: a restarted broker writes only once
/// its first heartbeat's assignments are known (`docs/controlplane.md`, "Fencing partitions
/// without replicas").
async fn publish(conn: &quinn::Connection, stream: &StreamName, publish: u32) {
    let produce = Message::Produce(Produce {
        stream: stream.clone(),
        partition: PartitionId::new(0),
        batches: vec![hundred(publish)],
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match request(conn, &produce).await {
            Message::ProduceAck(ack)
                if matches!(ack.results[0], Err(ErrorCode::NotLeader))
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Message::ProduceAck(ack) => {
                assert!(ack.results[0].is_ok(), "{:?}", ack.results);
                return;
            }
            other => panic!("publish {publish} to {stream} answered {other:?}"),
        }
    }
}

/// The newest segment file of `stream`'s partition 0 under the broker's data directory.
fn active_segment(data_dir: &Path, stream: &StreamName) -> PathBuf {
    let dir = data_dir.join("streams").join(stream.as_str()).join("0");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment file")
}

/// Reads `stream`'s partition 0 from the start until it is drained (a poll that finds
/// nothing) or fails; returns the records read and the failure.
async fn read_all(client: &Client, stream: &StreamName) -> (u64, Result<(), floe_client::Error>) {
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let mut read = 0;
    loop {
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(Some(_)) => read += 1,
            Ok(None) => return (read, Ok(())),
            Err(e) => return (read, Err(e)),
        }
    }
}

/// `text` without the terminal colour sequences of the broker's log.
fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rot_in_the_active_segment_leaves_the_partition_corrupt_and_the_broker_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = BrokerProcess::start(dir.path());
    let listen = broker.addr().to_string();
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect");
    for stream in [rotting(), healthy()] {
        client
            .create_stream(&stream, 1, AckMode::Leader, StreamSettings::default())
            .await
            .expect("create");
    }
    let conn = ready(broker.addr(), broker.ca()).await;
    for i in 0..10 {
        publish(&conn, &rotting(), i).await;
    }
    publish(&conn, &healthy(), 0).await;

    broker.kill();
    let segment = active_segment(&broker.data_dir, &rotting());
    let mut bytes = std::fs::read(&segment).expect("segment");
    let damaged = bytes.len() / 3;
    // Every batch is the same size: the damaged one starts at a multiple of it.
    let batch_bytes = bytes.len() / 10;
    let damaged_batch = damaged / batch_bytes * batch_bytes;
    for byte in &mut bytes[damaged..damaged + 8] {
        *byte ^= 0xff;
    }
    std::fs::write(&segment, &bytes).expect("flip 8 bytes");

    let broker = BrokerProcess::start_on(dir.path(), &listen);
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect after restart");

    // The consumer is told, clearly, and gets no record of the damaged partition.
    let (read, outcome) = read_all(&client, &rotting()).await;
    let error = outcome.expect_err("a corrupt partition read without an error");
    assert_eq!(error.code(), Some(ErrorCode::CorruptData), "{error}");
    told_offsets_not_files(
        &error.to_string(),
        dir.path(),
        "stream rotting partition 0 is corrupt: offsets from 300 to the log's end are damaged",
    );
    assert_eq!(read, 0, "records served from a corrupt partition");
    // Producers too.
    let conn = ready(broker.addr(), broker.ca()).await;
    let produce = Message::Produce(Produce {
        stream: rotting(),
        partition: PartitionId::new(0),
        batches: vec![hundred(10)],
    });
    match request(&conn, &produce).await {
        Message::Error(e) => {
            assert_eq!(e.code, ErrorCode::CorruptData, "{}", e.message);
            told_offsets_not_files(&e.message, dir.path(), "offsets from 300 to the log's end");
        }
        other => panic!("a publish to a corrupt partition answered {other:?}"),
    }
    // The damaged file is untouched.
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes);

    // The broker's log names the file and the byte; the metric counts the partition.
    let log = without_colours(&std::fs::read_to_string(&broker.log_path).expect("broker log"));
    let line = log
        .lines()
        .find(|l| l.contains("partition log is corrupt"))
        .unwrap_or_else(|| panic!("no corrupt partition in the log:\n{log}"));
    assert!(line.contains(&segment.display().to_string()), "{line}");
    assert!(
        line.contains(&format!("position={damaged_batch}")),
        "{line}"
    );
    assert!(
        !log.contains("truncating the torn tail"),
        "recovery cut the damaged segment:\n{log}"
    );
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let text = http_get(&metrics, "/metrics").await;
    assert_eq!(metric(&text, "floe_partitions_corrupt"), 1.0, "{text}");

    // The other stream goes on: it publishes and reads everything.
    publish(&conn, &healthy(), 1).await;
    let (read, outcome) = read_all(&client, &healthy()).await;
    outcome.expect("the healthy stream reads");
    assert_eq!(read, 200);

    // Described as corrupt, by the broker and by the controlplane.
    let info = client.stream(&rotting()).await.expect("describe");
    let damaged = info.partitions[0].damaged.expect("described as corrupt");
    assert_eq!((damaged.start.get(), damaged.end), (300, None));
    let controlplane = controlplane_of(&broker);
    corrupt_in_description(&controlplane, true).await;

    // A repair says what it discards and changes nothing…
    let p0 = PartitionId::new(0);
    let plan = client
        .repair_partition(&rotting(), p0, None)
        .await
        .expect("plan a repair");
    let first_lost = damaged_batch as u64 / batch_bytes as u64 * 100;
    assert_eq!(first_lost, 300, "the damage is in the fourth publish");
    assert!(!plan.repaired);
    assert_eq!(plan.discard_from.get(), first_lost);
    assert_eq!(plan.position, damaged_batch as u64);
    assert_eq!(plan.discarded_bytes, (bytes.len() - damaged_batch) as u64);
    assert!(!plan.restart);
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes);
    // …repairs nothing without the acknowledgement of exactly that loss…
    let refused = client
        .repair_partition(
            &rotting(),
            p0,
            Some(floe_wire::Offset::new(first_lost + 100)),
        )
        .await
        .expect_err("repaired with the wrong acknowledgement");
    assert_eq!(refused.code(), Some(ErrorCode::InvalidRequest), "{refused}");
    assert!(
        refused.to_string().contains("discards from offset 300"),
        "{refused}"
    );
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes);
    // …and with it, cuts the log at the damage: the partition serves again, from there.
    let repaired = client
        .repair_partition(&rotting(), p0, Some(plan.discard_from))
        .await
        .expect("repair");
    assert!(repaired.repaired);
    assert_eq!(
        std::fs::read(&segment).expect("segment"),
        bytes[..damaged_batch],
        "the records before the damage changed"
    );
    let (read, outcome) = read_all(&client, &rotting()).await;
    outcome.expect("the repaired partition reads");
    assert_eq!(read, first_lost);
    publish(&conn, &rotting(), 10).await;
    let (read, outcome) = read_all(&client, &rotting()).await;
    outcome.expect("the repaired partition reads");
    assert_eq!(read, first_lost + 100);
    let text = http_get(&metrics, "/metrics").await;
    assert_eq!(metric(&text, "floe_partitions_corrupt"), 0.0, "{text}");
    corrupt_in_description(&controlplane, false).await;
    let log = without_colours(&std::fs::read_to_string(&broker.log_path).expect("broker log"));
    assert!(
        log.contains("repairing a corrupt partition as an operator acknowledged"),
        "{log}"
    );
    // Another repair finds nothing to do.
    let error = client
        .repair_partition(&rotting(), p0, None)
        .await
        .expect_err("a healthy partition repaired");
    assert!(error.to_string().contains("is not corrupt"), "{error}");
}

/// The controlplane of a `floe-broker dev` process, as its administrator.
fn controlplane_of(broker: &BrokerProcess) -> floe_client::rest::Controlplane {
    let token = broker.profile.token.as_ref().map(|t| t.expose().to_owned());
    let url = broker
        .profile
        .controlplane
        .as_deref()
        .expect("controlplane");
    floe_client::rest::Controlplane::new(url, token).expect("controlplane")
}

/// Waits until the controlplane's description of the rotting stream's partition 0 names a
/// corrupt replica (`corrupt`), or none.
async fn corrupt_in_description(controlplane: &floe_client::rest::Controlplane, corrupt: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let description = controlplane
            .stream(rotting().as_str())
            .await
            .expect("describe through the controlplane");
        let replicas = &description.partitions[0].corrupt;
        if replicas.is_empty() != corrupt {
            if let Some(replica) = replicas.first() {
                assert_eq!(replica.damaged_start, Some(300));
                assert!(replica.segment.ends_with(".log"), "{replica:?}");
                assert!(!replica.segment.contains('/'), "{replica:?}");
            }
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controlplane's description: {description:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client's error `message` says what it expects (`expected`) and names no path under the
/// broker's directory `dir` (its data directory, certificates and buckets are all there), nor
/// a segment file.
fn told_offsets_not_files(message: &str, dir: &Path, expected: &str) {
    assert!(
        message.contains(expected),
        "expected {expected:?} in: {message}"
    );
    let dir = dir.display().to_string();
    assert!(
        !message.contains(&dir) && !message.contains(".log") && !message.contains("/tmp"),
        "a local path reached the client: {message}"
    );
}

/// The segment files of `stream`'s partition 0, oldest first.
fn segment_files(data_dir: &Path, stream: &StreamName) -> Vec<PathBuf> {
    let dir = data_dir.join("streams").join(stream.as_str()).join("0");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    logs
}

/// The start of the batch holding byte `at` of a segment file's `bytes`.
fn batch_start(bytes: &[u8], at: usize) -> usize {
    let mut start = 0;
    loop {
        let length = floe_wire::batch::peek_batch_length(&bytes[start..]).expect("a batch");
        if at < start + length as usize {
            return start;
        }
        start += length as usize;
    }
}

/// Rot in a sealed segment that is not tiered yet, on a real `floe-broker dev` process: the
/// upload refuses it (the rot never reaches the bucket), the segment stays on disk, the
/// partition goes to the `corrupt` state naming the file and byte, the metrics count it, and
/// the broker's other partitions go on tiering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rot_in_a_sealed_segment_is_never_tiered_and_leaves_the_partition_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Before the rot, the broker tiers to a bucket of its own; after the restart, to a new
    // one, so that every sealed segment is uploaded after the rot whatever the first
    // broker managed to tier.
    let store = |name: &str| format!("file://{}/{name}", dir.path().display());
    let (before, after) = (store("objects-before"), store("objects-after"));
    let mut broker =
        BrokerProcess::start_with(dir.path(), "127.0.0.1:0", &["--object-store", &before], &[]);
    let listen = broker.addr().to_string();
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect");
    let small_segments = StreamSettings {
        segment_bytes: Some(8 * 1024),
        ..StreamSettings::default()
    };
    for stream in [rotting(), healthy()] {
        client
            .create_stream(&stream, 1, AckMode::Leader, small_segments)
            .await
            .expect("create");
    }
    let conn = ready(broker.addr(), broker.ca()).await;
    for i in 0..10 {
        publish(&conn, &rotting(), i).await;
        publish(&conn, &healthy(), i).await;
    }

    broker.kill();
    let files = segment_files(&broker.data_dir, &rotting());
    assert!(files.len() >= 4, "sealed segments: {files:?}");
    // The third segment file is sealed (the last one is the active segment).
    let segment = files[2].clone();
    let mut bytes = std::fs::read(&segment).expect("segment");
    let damaged = bytes.len() / 2;
    let damaged_batch = batch_start(&bytes, damaged);
    assert!(
        damaged >= damaged_batch + 64,
        "the damage is in a batch's records"
    );
    for byte in &mut bytes[damaged..damaged + 8] {
        *byte ^= 0xff;
    }
    std::fs::write(&segment, &bytes).expect("flip 8 bytes");
    let base_offset: u64 = segment
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("a segment file named after its base offset");

    let broker = BrokerProcess::start_with(dir.path(), &listen, &["--object-store", &after], &[]);
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = http_get(&metrics, "/metrics").await;
        if metric(&text, "floe_partitions_corrupt") == 1.0 {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rot was never found: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        metric(&text, "floe_tier_upload_corrupt_segments_total"),
        1.0,
        "{text}"
    );

    // Nothing of the damaged segment reached the bucket; the segments before it did.
    let objects_dir = PathBuf::from(after.strip_prefix("file://").expect("a file URL"))
        .join(rotting().as_str())
        .join("0")
        .join("segments");
    let objects: Vec<String> = std::fs::read_dir(&objects_dir)
        .expect("the segments before the rot were tiered")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let damaged_prefix = format!("{base_offset:020}-");
    assert!(
        !objects.iter().any(|o| o.starts_with(&damaged_prefix)),
        "the damaged segment was uploaded: {objects:?}"
    );
    assert!(
        objects
            .iter()
            .any(|o| o.starts_with(&format!("{:020}-", 0))),
        "the first segment was tiered: {objects:?}"
    );
    // The damaged segment stays on disk as it was.
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes);

    // The broker's log names the file and the damaged batch's byte.
    let log = without_colours(&std::fs::read_to_string(&broker.log_path).expect("broker log"));
    let line = log
        .lines()
        .find(|l| l.contains("a sealed segment fails its checksums"))
        .unwrap_or_else(|| panic!("no rot found at upload in the log:\n{log}"));
    assert!(line.contains(&segment.display().to_string()), "{line}");
    assert!(
        line.contains(&format!("position={damaged_batch}")),
        "{line}"
    );

    // Consumers and producers are told the partition is corrupt, naming the offsets the
    // damaged segment holds, not its file.
    let next_base: u64 = files[3]
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("the next segment's base offset");
    let first_damaged = base_offset + read_prefix_records(&bytes[..damaged_batch]);
    let offsets = format!("offsets {first_damaged} to {} are damaged", next_base - 1);
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect after restart");
    let (_, outcome) = read_all(&client, &rotting()).await;
    let error = outcome.expect_err("a corrupt partition read without an error");
    assert_eq!(error.code(), Some(ErrorCode::CorruptData), "{error}");
    told_offsets_not_files(&error.to_string(), dir.path(), &offsets);
    let conn = ready(broker.addr(), broker.ca()).await;
    let produce = Message::Produce(Produce {
        stream: rotting(),
        partition: PartitionId::new(0),
        batches: vec![hundred(10)],
    });
    match request(&conn, &produce).await {
        Message::Error(e) => {
            assert_eq!(e.code, ErrorCode::CorruptData, "{}", e.message);
            told_offsets_not_files(&e.message, dir.path(), &offsets);
        }
        other => panic!("a publish to a corrupt partition answered {other:?}"),
    }

    // The other stream goes on: all its sealed segments reach the tier, and it reads whole.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let info = client.stream(&healthy()).await.expect("describe");
        let p = info.partitions.first().expect("a partition").clone();
        if p.tier_end.get() > 0 && p.upload_backlog.segments == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the healthy stream stopped tiering: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    publish(&conn, &healthy(), 10).await;
    let (read, outcome) = read_all(&client, &healthy()).await;
    outcome.expect("the healthy stream reads");
    assert_eq!(read, 1_100);

    // The state outlives a restart, though the log would open as if whole (the damaged
    // segment is checked through its index, not scanned).
    drop(conn);
    client.close().await;
    let mut broker = broker;
    broker.kill();
    let broker = BrokerProcess::start_with(dir.path(), &listen, &["--object-store", &after], &[]);
    // Held corrupt from the open on: no upload reads the damaged segment again to find it
    // (they run every second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let text = http_get(&metrics, "/metrics").await;
    assert_eq!(metric(&text, "floe_partitions_corrupt"), 1.0, "{text}");
    assert_eq!(
        metric(&text, "floe_tier_upload_corrupt_segments_total"),
        0.0,
        "the partition served until an upload found the damage again: {text}"
    );
    let conn = ready(broker.addr(), broker.ca()).await;
    match request(&conn, &produce).await {
        Message::Error(e) => assert_eq!(e.code, ErrorCode::CorruptData, "{}", e.message),
        other => panic!("a corrupt partition took a publish after a restart: {other:?}"),
    }
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect after the second restart");
    let (_, outcome) = read_all(&client, &rotting()).await;
    let error = outcome.expect_err("a corrupt partition served after a restart");
    assert_eq!(error.code(), Some(ErrorCode::CorruptData), "{error}");

    // Repaired: cut at the damaged batch, the later segments dropped; the records before it
    // read back whole, the partition tiers and publishes again.
    let p0 = PartitionId::new(0);
    let plan = client
        .repair_partition(&rotting(), p0, None)
        .await
        .expect("plan");
    assert_eq!(plan.discard_from.get(), first_damaged);
    assert_eq!(plan.discarded_segments as usize, files.len() - 3);
    let repaired = client
        .repair_partition(&rotting(), p0, Some(plan.discard_from))
        .await
        .expect("repair");
    assert!(repaired.repaired);
    let values = read_values(&client, &rotting()).await;
    assert_eq!(values.len() as u64, plan.discard_from.get());
    assert_eq!(values, published(10)[..values.len()]);
    publish(&conn, &rotting(), 11).await;
    assert_eq!(
        read_values(&client, &rotting()).await.len() as u64,
        plan.discard_from.get() + 100
    );
}

/// Records in the whole batches of `bytes`.
fn read_prefix_records(bytes: &[u8]) -> u64 {
    let mut at = 0;
    let mut records = 0;
    while at < bytes.len() {
        let batch = floe_wire::RecordBatch::decode_prefix(&Bytes::copy_from_slice(&bytes[at..]))
            .expect("a whole batch")
            .0;
        records += u64::from(batch.header().record_count);
        at += batch.header().batch_length as usize;
    }
    records
}

/// Every record of `stream`'s partition 0 from the start, as `(offset, value)`, until a poll
/// finds nothing; panics on an error.
async fn read_values(client: &Client, stream: &StreamName) -> Vec<(u64, String)> {
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let mut values = Vec::new();
    loop {
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(Some(record)) => values.push((
                record.offset.get(),
                String::from_utf8_lossy(&record.value).into_owned(),
            )),
            Ok(None) => return values,
            Err(e) => panic!("reading {stream} after {} records: {e}", values.len()),
        }
    }
}

/// What ten publishes of [`hundred`] records hold, in order.
fn published(publishes: u32) -> Vec<(u64, String)> {
    (0..publishes)
        .flat_map(|p| (0..100).map(move |i| format!("publish-{p}-record-{i}")))
        .enumerate()
        .map(|(offset, value)| (offset as u64, value))
        .collect()
}

/// Where a healing test's broker tiers: its data directory's objects, or a fresh bucket on
/// the S3-compatible server `FLOE_TEST_S3_ENDPOINT` names.
struct TierTarget {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
}

async fn tier_targets() -> Vec<TierTarget> {
    let mut targets = vec![TierTarget {
        name: "local directory",
        args: Vec::new(),
        env: Vec::new(),
    }];
    if let Ok(endpoint) = std::env::var("FLOE_TEST_S3_ENDPOINT") {
        let bucket = format!("floe-heal-{}", std::process::id());
        let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
        let response = http_request(authority, "PUT", &format!("/{bucket}")).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        targets.push(TierTarget {
            name: "S3",
            args: vec![
                "--object-store".into(),
                format!("s3://{bucket}/heal"),
                "--s3-endpoint".into(),
                endpoint,
                "--s3-allow-http".into(),
            ],
            env: vec![
                ("AWS_ACCESS_KEY_ID", "floe-test"),
                ("AWS_SECRET_ACCESS_KEY", "floe-test"),
                ("AWS_REGION", "us-east-1"),
            ],
        });
    }
    targets
}

/// Healing from the bucket, on a real `floe-broker dev` process: rot in a local sealed
/// segment that is already tiered is invisible to consumers — every record comes back
/// whole, served from the tier — and the segment file is replaced by its tiered copy,
/// counted in `floe_local_segments_healed_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rot_in_a_tiered_local_segment_is_healed_from_the_bucket() {
    for target in tier_targets().await {
        eprintln!("healing from the {}", target.name);
        heal_from(&target).await;
    }
}

async fn heal_from(target: &TierTarget) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args: Vec<&str> = vec!["--tier-upload-interval", "1s"];
    args.extend(target.args.iter().map(String::as_str));
    let mut broker = BrokerProcess::start_with(dir.path(), "127.0.0.1:0", &args, &target.env);
    let listen = broker.addr().to_string();
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect");
    let settings = StreamSettings {
        segment_bytes: Some(8 * 1024),
        ..StreamSettings::default()
    };
    client
        .create_stream(&rotting(), 1, AckMode::Leader, settings)
        .await
        .expect("create");
    let conn = ready(broker.addr(), broker.ca()).await;
    for i in 0..10 {
        publish(&conn, &rotting(), i).await;
    }
    let files = segment_files(&broker.data_dir, &rotting());
    assert!(files.len() >= 4, "sealed segments: {files:?}");
    let segment = files[2].clone();
    let sealed_end: u64 = files
        .last()
        .and_then(|f| f.file_stem()?.to_str()?.parse().ok())
        .expect("the active segment's base offset");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let info = client.stream(&rotting()).await.expect("describe");
        let p = info.partitions.first().expect("a partition").clone();
        if p.tier_end.get() >= sealed_end {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sealed segments were never tiered: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    broker.kill();
    let good = std::fs::read(&segment).expect("segment");
    let mut bytes = good.clone();
    let damaged = bytes.len() / 2;
    for byte in &mut bytes[damaged..damaged + 8] {
        *byte ^= 0xff;
    }
    std::fs::write(&segment, &bytes).expect("flip 8 bytes");

    let broker = BrokerProcess::start_with(dir.path(), &listen, &args, &target.env);
    let client = Client::connect(ClientConfig::from_profile(&broker.profile))
        .await
        .expect("connect after restart");
    assert_eq!(
        read_values(&client, &rotting()).await,
        published(10),
        "every record, whole and in order"
    );

    // The segment file is the good copy again, and the metric counts the repair.
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = http_get(&metrics, "/metrics").await;
        if metric(&text, "floe_local_segments_healed_total") == 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the repair was never counted: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(std::fs::read(&segment).expect("segment"), good);
    let log = without_colours(&std::fs::read_to_string(&broker.log_path).expect("broker log"));
    assert!(
        log.lines()
            .any(|l| l.contains("replaced by its tiered copy")
                && l.contains(&segment.display().to_string())),
        "{log}"
    );
    // Read again, now from the healed local file, and still nothing is corrupt.
    assert_eq!(read_values(&client, &rotting()).await, published(10));
    let text = http_get(&metrics, "/metrics").await;
    assert_eq!(metric(&text, "floe_partitions_corrupt"), 0.0, "{text}");
}

//! Reading tiered history through the broker, against the object store's own raw GET speed
//! measured in the same run.
//!
//! `cargo bench -p floe-broker --bench tier_read` runs a `floe-broker dev` process (release
//! build) on the embedded default (object storage in a local directory), publishes
//! `FLOE_BENCH_MIB` (default 1024) of 1 KiB records to two streams — `tiered` (local
//! retention of 1 byte, the least the controlplane accepts: every sealed segment leaves the
//! disk once tiered) and `hot` (everything kept locally) — and measures:
//! 1. object-store PUTs per GiB ingested (segments and manifest versions);
//! 2. raw ranged GETs of the tiered segment objects, 4 MiB at a time, one in flight, and
//!    then as many in flight as the broker's sequential reader keeps;
//! 3. a cold read of `tiered` from offset 0 through a restarted broker with an empty cache:
//!    its throughput, the time to its first answer (against the median latency of one raw
//!    4 MiB GET, one in flight, from 2., and against the first of those), and the GETs per
//!    GiB it made;
//! 4. a warm read of the same range (now cached);
//! 5. a read of the same amount from `hot`, served by the local log.
//!
//! Before 2 and 3 the page cache is dropped when the process may (root), so both read from
//! the device.
//!
//! With `FLOE_BENCH_S3_ENDPOINT=http://host:port` (an S3-compatible server such as the one
//! `scripts/moto.sh` starts) the broker tiers into a fresh bucket there instead, and the raw
//! GETs go to the same server.

#![allow(clippy::print_stdout)] // the report is the benchmark's output

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use floe_client::{
    AckMode, Client, ClientConfig, FetchPosition, PartitionId, PartitionMetadata, Producer,
    ProducerConfig, ProducerRecord, StreamName, StreamSettings,
};
use floe_wire::frame::{Fetch, Message};

const CHUNK: u64 = 4 * 1024 * 1024;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64()
}

fn main() -> anyhow::Result<()> {
    common::install_crypto();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

/// Drops the page cache if allowed; says whether it did.
fn drop_page_cache() -> bool {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

async fn run() -> anyhow::Result<()> {
    // A consumer of history reads long ranges: a read of a few hundred MiB is measured as
    // much on its first answer (manifest, footer, first chunk, a fresh connection's
    // congestion window) as on its pace.
    let mib = env_u64("FLOE_BENCH_MIB", 1024);
    let work = tempfile::Builder::new()
        .prefix("floe-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let s3 = std::env::var("FLOE_BENCH_S3_ENDPOINT").ok();
    // A bucket of its own per run: the broker refuses streams whose names hold objects.
    let bucket = format!(
        "floe-bench-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let url = format!("s3://{bucket}/tier");
    let store = match &s3 {
        Some(endpoint) => {
            create_bucket(endpoint, &bucket).await?;
            format!("S3-compatible server {endpoint}")
        }
        None => "local directory".to_string(),
    };
    println!(
        "floe tiered-read benchmark: {mib} MiB of 1 KiB records per stream, object store: {store}"
    );
    let dir = work.path().join("broker");
    let mut args: Vec<String> = Vec::new();
    if let Some(endpoint) = &s3 {
        args.extend(
            [
                "--object-store",
                &url,
                "--s3-endpoint",
                endpoint,
                "--s3-allow-http",
            ]
            .map(String::from),
        );
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let broker = common::BrokerProcess::start_with(&dir, "127.0.0.1:0", &args, &S3_ENV);
    let listen = broker.addr().to_string();
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let client = Client::connect(ClientConfig::from_profile(&broker.profile)).await?;
    let tiered = StreamName::new("tiered")?;
    let hot = StreamName::new("hot")?;
    for (stream, local) in [(&tiered, 1), (&hot, 1 << 40)] {
        let settings = StreamSettings {
            local_retention_bytes: Some(local),
            ..StreamSettings::default()
        };
        client
            .create_stream(stream, 1, AckMode::Leader, settings)
            .await?;
        publish(&client, stream, mib * 1024).await?;
    }
    let tiered_end = wait_until_tiered(&client, &tiered).await?;
    wait_until_tiered(&client, &hot).await?;
    let text = common::http_get(&metrics, "/metrics").await;
    let puts = common::metric(&text, "floe_tier_requests_total{kind=\"put\"}");
    let put_bytes = common::metric(&text, "floe_tier_put_bytes_total");
    let puts_per_gib = puts / (put_bytes / f64::from(1u32 << 30));
    println!(
        "ingest: {puts:.0} PUTs for {:.1} MiB tiered = {puts_per_gib:.1} PUTs/GiB (target ≤ 20)",
        put_bytes / (1024.0 * 1024.0)
    );
    drop(client);

    // Raw GETs of the same objects, the same chunk size, one in flight.
    let dropped = drop_page_cache();
    let raw_store = match &s3 {
        Some(endpoint) => floe_tier::TierStore::open(
            &url,
            &floe_tier::S3Settings {
                endpoint: Some(endpoint.clone()),
                region: Some("us-east-1".into()),
                access_key_id: Some("floe-bench".into()),
                secret_access_key: Some("floe-bench".into()),
                allow_http: true,
                ..Default::default()
            },
        )?,
        None => {
            let objects = broker.data_dir.join("objects").canonicalize()?;
            let url = url::Url::from_directory_path(objects)
                .map_err(|()| anyhow::anyhow!("object directory"))?;
            floe_tier::TierStore::open(url.as_str(), &Default::default())?
        }
    };
    let (raw_bytes, raw_elapsed, mut latencies) =
        raw_gets(&raw_store, "tiered/0/segments", 1).await?;
    let raw = mib_per_s(raw_bytes, raw_elapsed);
    // The first GET of a fresh client after the page cache was dropped, as the restarted
    // broker's first is.
    let first_get = latencies.first().copied().unwrap_or_default();
    latencies.sort();
    let get_latency = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();
    println!(
        "raw ranged GETs, 4 MiB, 1 in flight: {raw:8.1} MiB/s over {:.1} MiB (page cache dropped: {dropped}); one GET: median {:.1} ms, first {:.1} ms",
        raw_bytes as f64 / (1024.0 * 1024.0),
        get_latency.as_secs_f64() * 1e3,
        first_get.as_secs_f64() * 1e3
    );
    // As many in flight as a sequential reader of the broker keeps: the chunk it reads and
    // those it reads ahead.
    let depth = floe_tier::ReaderConfig::default().read_ahead_chunks as usize + 1;
    drop_page_cache();
    let (deep_bytes, deep_elapsed, _) = raw_gets(&raw_store, "tiered/0/segments", depth).await?;
    let raw_deep = mib_per_s(deep_bytes, deep_elapsed);
    println!("raw ranged GETs, 4 MiB, {depth} in flight: {raw_deep:8.1} MiB/s");

    // Cold: a fresh broker process, its cache directory removed.
    let data_dir = broker.data_dir.clone();
    drop(broker);
    let _ = std::fs::remove_dir_all(data_dir.join("cache"));
    drop_page_cache();
    let broker = common::BrokerProcess::start_with(&dir, &listen, &args, &S3_ENV);
    let metrics = broker.profile.metrics.clone().expect("metrics address");
    let client = Client::connect(ClientConfig::from_profile(&broker.profile)).await?;
    let gets_before = common::metric(
        &common::http_get(&metrics, "/metrics").await,
        "floe_tier_requests_total{kind=\"get\"}",
    );
    let (cold_bytes, cold_elapsed, cold_first) = read(&client, &tiered, tiered_end).await?;
    let gets = common::metric(
        &common::http_get(&metrics, "/metrics").await,
        "floe_tier_requests_total{kind=\"get\"}",
    ) - gets_before;
    let cold = mib_per_s(cold_bytes, cold_elapsed);
    let gets_per_gib = gets / (cold_bytes as f64 / f64::from(1u32 << 30));
    let first_ratio = cold_first.as_secs_f64() / get_latency.as_secs_f64();
    let first_ratio_first = cold_first.as_secs_f64() / first_get.as_secs_f64();
    println!(
        "cold read through the broker:        {cold:8.1} MiB/s over {:.1} MiB = {:.2} of raw GET, {:.2} of raw GET {depth} in flight (target ≥ 0.70); {gets:.0} GETs = {gets_per_gib:.0} GETs/GiB (target ≤ 300); first answer after {:.1} ms = {first_ratio:.2}× the median raw GET (target ≤ 2), {first_ratio_first:.2}× the first",
        cold_bytes as f64 / (1024.0 * 1024.0),
        cold / raw,
        cold / raw_deep,
        cold_first.as_secs_f64() * 1e3
    );

    let (warm_bytes, warm_elapsed, _) = read(&client, &tiered, tiered_end).await?;
    let warm = mib_per_s(warm_bytes, warm_elapsed);
    let (hot_bytes, hot_elapsed, _) = read(&client, &hot, tiered_end).await?;
    let hot_mib = mib_per_s(hot_bytes, hot_elapsed);
    println!("hot-log read of the same amount:     {hot_mib:8.1} MiB/s");
    println!(
        "warm read through the broker:        {warm:8.1} MiB/s = {:.2} of the hot-log read (target ≥ 0.80)",
        warm / hot_mib
    );
    println!(
        "BENCH_JSON {}",
        serde_json::json!({
            "puts_per_gib": puts_per_gib, "raw_get_mib_s": raw, "cold_mib_s": cold,
            "cold_ratio": cold / raw, "raw_get_in_flight": depth, "raw_get_deep_mib_s": raw_deep,
            "cold_ratio_deep": cold / raw_deep, "gets_per_gib_cold": gets_per_gib,
            "cold_first_answer_ms": cold_first.as_secs_f64() * 1e3,
            "raw_get_latency_ms_median": get_latency.as_secs_f64() * 1e3,
            "first_answer_ratio": first_ratio,
            "raw_get_latency_ms_first": first_get.as_secs_f64() * 1e3,
            "first_answer_ratio_to_first_get": first_ratio_first,
            "warm_mib_s": warm, "hot_mib_s": hot_mib, "warm_ratio": warm / hot_mib,
            "page_cache_dropped": dropped,
        })
    );
    Ok(())
}

async fn publish(client: &Client, stream: &StreamName, records: u64) -> anyhow::Result<()> {
    let producer = Producer::new(client, stream.clone(), ProducerConfig::default()).await?;
    let value = vec![b'x'; 1024];
    let mut deliveries = Vec::new();
    for _ in 0..records {
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        deliveries.push(producer.send(record).await?);
    }
    for delivery in deliveries {
        delivery.await?;
    }
    producer.close().await?;
    Ok(())
}

async fn partition(client: &Client, stream: &StreamName) -> anyhow::Result<PartitionMetadata> {
    Ok(client.stream(stream).await?.partitions[0].clone())
}

/// Records of more than 1 KiB each that one default segment (128 MiB) cannot hold: once fewer
/// than these lie between the tier's end and the high watermark, only the active (unsealed)
/// segment is left out of the tier.
const RECORDS_PER_SEGMENT_MAX: u64 = floe_broker::run::DEFAULT_SEGMENT_BYTES / 1024;

/// Waits until every sealed segment is tiered — the backlog is empty *and* the tier reaches
/// the active segment, since a backlog of zero alone may predate the last seals — and
/// returns the tier's end.
async fn wait_until_tiered(client: &Client, stream: &StreamName) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let p = partition(client, stream).await?;
        let untiered = p.high_watermark.get().saturating_sub(p.tier_end.get());
        if p.upload_backlog.segments == 0
            && p.tier_end.get() > 0
            && p.tier_end >= p.local_start
            && untiered < RECORDS_PER_SEGMENT_MAX
        {
            return Ok(p.tier_end.get());
        }
        anyhow::ensure!(Instant::now() < deadline, "tiering did not finish: {p:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads `[0, end)` of partition 0 with back-to-back fetches; returns bytes, time, and the
/// time to the first answer.
async fn read(
    client: &Client,
    stream: &StreamName,
    end: u64,
) -> anyhow::Result<(u64, Duration, Duration)> {
    let started = Instant::now();
    let (mut offset, mut bytes) = (0, 0);
    let mut first = None;
    while offset < end {
        let request = Message::Fetch(Fetch {
            stream: stream.clone(),
            partition: PartitionId::new(0),
            position: FetchPosition::Offset(floe_wire::Offset::new(offset)),
            max_bytes: 8 << 20,
            max_wait_ms: 0,
        });
        match client.request(request).await? {
            Message::FetchResponse(r) => {
                first.get_or_insert_with(|| started.elapsed());
                anyhow::ensure!(r.next_offset.get() > offset, "no progress at {offset}");
                bytes += r.records.len() as u64;
                offset = r.next_offset.get();
            }
            other => anyhow::bail!("fetch at {offset}: {other:?}"),
        }
    }
    Ok((bytes, started.elapsed(), first.unwrap_or_default()))
}

/// Credentials the S3-compatible test server accepts.
const S3_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "floe-bench"),
    ("AWS_SECRET_ACCESS_KEY", "floe-bench"),
    ("AWS_REGION", "us-east-1"),
];

/// Creates a bucket on the S3-compatible test server (it accepts an unsigned `PUT /bucket`).
async fn create_bucket(endpoint: &str, bucket: &str) -> anyhow::Result<()> {
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let response = common::http_request(authority, "PUT", &format!("/{bucket}")).await;
    anyhow::ensure!(
        response.starts_with("HTTP/1.1 200"),
        "creating bucket {bucket}: {response}"
    );
    Ok(())
}

/// Reads every object under `dir` of `store` with 4 MiB ranged GETs, in order, `in_flight`
/// at a time: the bytes, the time, and each GET's latency.
async fn raw_gets(
    store: &floe_tier::TierStore,
    dir: &str,
    in_flight: usize,
) -> anyhow::Result<(u64, Duration, Vec<Duration>)> {
    let listed = store.list(dir).await?;
    let mut ranges = Vec::new();
    for object in listed {
        let mut at = 0;
        while at < object.size {
            let end = (at + CHUNK).min(object.size);
            ranges.push((object.key.clone(), at..end));
            at = end;
        }
    }
    let started = Instant::now();
    let mut bytes = 0;
    let mut latencies = Vec::new();
    let mut running = tokio::task::JoinSet::new();
    for (key, range) in ranges {
        if running.len() >= in_flight.max(1)
            && let Some(done) = running.join_next().await
        {
            let (len, took) = done??;
            bytes += len;
            latencies.push(took);
        }
        let store = store.clone();
        running.spawn(async move {
            let asked = Instant::now();
            let len = store.get_range(&key, range).await?.len() as u64;
            anyhow::Ok((len, asked.elapsed()))
        });
    }
    while let Some(done) = running.join_next().await {
        let (len, took) = done??;
        bytes += len;
        latencies.push(took);
    }
    Ok((bytes, started.elapsed(), latencies))
}

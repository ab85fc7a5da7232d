//! Read replicas: how fast they read history cold, how well their cache serves a repeated
//! read, what the leader spends meanwhile, and how soon a replica the autoscaler decides to
//! start serves its first fetch.
//!
//! `cargo bench -p floe-broker --bench read_replicas` runs a `floe-broker dev` process
//! (release build; object storage in a local directory), publishes `FLOE_BENCH_MIB`
//! (default 256) of 1 KiB records over 8 partitions of `history`, with a local retention of
//! 1 byte, so that all but each partition's active segment leaves the broker's disk for the
//! tier, and as much again to `hot`, kept on the broker's disk (and tiered too; the benchmark
//! waits for both uploads to end), and measures:
//! 1. the machine's limits: raw 4 MiB ranged GETs of every tiered segment object, one
//!    partition's objects per task, all partitions at once (8 GETs in flight, as many as a
//!    read replica's tier reader allows); one raw QUIC stream on loopback carrying as many
//!    bytes, with the brokers' transport and TLS (both ends on this machine's cores, as a
//!    read replica and its consumers are); and a read of `hot` from the broker's local log,
//!    one consumer per partition, as below (the second of two reads: from the page cache);
//! 2. a cold read of every partition from offset 0, one consumer per partition, all at
//!    once, through one `floe-broker read-replica` process with an empty cache — throughput, and
//!    the CPU the dev process (broker and controlplane) and the replica spent;
//! 3. the same read again through the same replica: its cache hit ratio (chunk lookups
//!    answered from memory or disk, from its `/metrics`) and throughput, against the
//!    hot-log read;
//! 4. a cold read through two fresh replicas (each serves the partitions rendezvous hashing
//!    gives it);
//! 5. scaling: `FLOE_BENCH_SCALE_ROUNDS` (default 5) times, the policy goes from zero to one
//!    replica; the time from the autoscaler's decision (its decisions counter, polled every
//!    2 ms) to the new replica answering a fetch from a fresh client, then back to zero.
//!
//! Before 1, 2 and 4 the page cache is dropped when the process may (root).

#![allow(clippy::print_stdout)] // the report is the benchmark's output

#[path = "../tests/common/mod.rs"]
mod common;
#[allow(dead_code)] // the publishing benchmark's limits; this one uses the QUIC transfer
#[path = "publish/raw.rs"]
mod raw;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use floe_client::rest::Controlplane;
use floe_client::{
    AckMode, Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer,
    ProducerConfig, ProducerRecord, StreamName, StreamSettings,
};
use floe_wire::admin::{ReadReplicaState, ScalingPolicy};
use floe_wire::frame::{Fetch, Message};

const PARTITIONS: u32 = 8;
const CHUNK: u64 = 4 * 1024 * 1024;
const STREAM: &str = "history";
const HOT_STREAM: &str = "hot";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    mib(bytes) / elapsed.as_secs_f64()
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
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// One `floe-broker read-replica` process started by hand, with its metrics.
struct Replica {
    child: Child,
    metrics: String,
}

impl Replica {
    fn start(dev: &common::BrokerProcess, objects: &str, dir: &Path, id: &str) -> Replica {
        let tls = dev.data_dir.join("tls");
        let port = common::cluster::free_tcp_port();
        let controlplane = dev
            .profile
            .controlplane
            .clone()
            .expect("dev's controlplane");
        let log = std::fs::File::create(dir.join(format!("{id}.log"))).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_floe-broker"))
            .args([
                "read-replica",
                "--controlplane",
                &controlplane,
                "--replica-id",
                id,
            ])
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
            .arg("--cert")
            .arg(tls.join("broker.pem"))
            .arg("--key")
            .arg(tls.join("broker.key"))
            .arg("--broker-ca")
            .arg(tls.join("ca.pem"))
            .args(["--object-store", objects])
            .env("FLOE_LOG", "warn")
            // dev's read-replica token, which its controlplane knows.
            .env(
                "FLOE_READ_REPLICA_TOKEN",
                std::fs::read_to_string(dev.data_dir.join("tokens").join("read-replica"))
                    .expect("dev's read-replica token")
                    .trim(),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn floe-broker read-replica");
        Replica {
            child,
            metrics: format!("127.0.0.1:{port}"),
        }
    }

    async fn cache_lookups(&self) -> (f64, f64) {
        let text = common::http_get(&self.metrics, "/metrics").await;
        (
            common::metric(&text, "floe_tier_cache_hits_total"),
            common::metric(&text, "floe_tier_cache_misses_total"),
        )
    }

    async fn fetched(&self) -> f64 {
        let text = common::http_get(&self.metrics, "/metrics").await;
        common::metric(
            &text,
            &format!("floe_fetch_bytes_total{{stream=\"{STREAM}\"}}"),
        )
    }
}

impl Drop for Replica {
    /// SIGTERM: the replica leaves the controlplane's list, so the next phase's clients do
    /// not route to it while its lease runs out.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

async fn wait_live(rest: &Controlplane, count: usize) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live: Vec<String> = rest
            .read_replicas()
            .await?
            .replicas
            .into_iter()
            .filter(|r| r.state == ReadReplicaState::Live)
            .map(|r| r.endpoint.to_string())
            .collect();
        if live.len() == count {
            return Ok(live);
        }
        anyhow::ensure!(Instant::now() < deadline, "{count} live replicas: {live:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn run() -> anyhow::Result<()> {
    let total_mib = env_u64("FLOE_BENCH_MIB", 256);
    let work = tempfile::Builder::new()
        .prefix("floe-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    println!(
        "floe read-replica benchmark: {total_mib} MiB of 1 KiB records over {PARTITIONS} \
         partitions, object store: local directory"
    );
    let dir = work.path().join("broker");
    let mut dev = common::BrokerProcess::start_with(&dir, "127.0.0.1:0", &[], &[]);
    let client = Client::connect(ClientConfig::from_profile(&dev.profile)).await?;
    let stream = StreamName::new(STREAM)?;
    let settings = StreamSettings {
        segment_bytes: Some(8 << 20),
        local_retention_bytes: Some(1),
        ..StreamSettings::default()
    };
    client
        .create_stream(&stream, PARTITIONS, AckMode::Leader, settings)
        .await?;
    publish(&client, &stream, total_mib * 1024).await?;
    // The same segments, kept on the broker's disk: tiered too, but read from the local log.
    let hot = StreamName::new(HOT_STREAM)?;
    let hot_settings = StreamSettings {
        segment_bytes: Some(8 << 20),
        ..StreamSettings::default()
    };
    client
        .create_stream(&hot, PARTITIONS, AckMode::Leader, hot_settings)
        .await?;
    publish(&client, &hot, total_mib * 1024).await?;
    let ends = wait_until_tiered(&client, &stream).await?;
    // No upload runs while the hot log is read.
    wait_until_tiered(&client, &hot).await?;
    let hot_ends: Vec<u64> = client
        .stream(&hot)
        .await?
        .partitions
        .iter()
        .map(|p| p.high_watermark.get())
        .collect();
    client.close().await;
    let objects = url::Url::from_directory_path(dev.data_dir.join("objects").canonicalize()?)
        .map_err(|()| anyhow::anyhow!("object directory"))?
        .to_string();
    let rest = Controlplane::new(
        dev.profile.controlplane.as_deref().expect("controlplane"),
        dev.profile.token.as_ref().map(|t| t.expose().to_owned()),
    )?;

    // 1. The machine's limit.
    let dropped = drop_page_cache();
    let store = floe_tier::TierStore::open(&objects, &Default::default())?;
    let (raw_bytes, raw_elapsed) = raw_gets(&store).await?;
    let raw = mib_per_s(raw_bytes, raw_elapsed);
    println!(
        "raw ranged GETs, 4 MiB, {PARTITIONS} in flight: {raw:8.1} MiB/s over {:.1} MiB \
         (page cache dropped: {dropped})",
        mib(raw_bytes)
    );
    let tls = dev.data_dir.join("tls");
    let certificates = floe_broker::tls::CertificatePaths {
        cert: tls.join("broker.pem"),
        key: tls.join("broker.key"),
    };
    let quic = raw::quic_bandwidth(&certificates, &tls.join("ca.pem"), raw_bytes).await?;
    println!("raw QUIC, one stream on loopback:    {quic:8.1} MiB/s");
    let dev_pid = dev.child.id();
    // The second read: the hot log's recent segments are in the page cache, as a broker's
    // usually are (the page cache was dropped for the raw GETs).
    read_all(&dev, HOT_STREAM, &hot_ends, dev_pid, dev_pid).await?;
    let hot_read = read_all(&dev, HOT_STREAM, &hot_ends, dev_pid, dev_pid).await?;
    println!(
        "hot-log read from the broker:        {:8.1} MiB/s over {:.1} MiB; dev process {:.0}% CPU",
        hot_read.mib_s,
        mib(hot_read.bytes),
        hot_read.leader_cpu * 100.0
    );

    // 2. and 3. One replica, cold then warm.
    let replicas_dir = work.path().join("replicas");
    std::fs::create_dir_all(&replicas_dir)?;
    let one = Replica::start(&dev, &objects, &replicas_dir, "bench-a");
    wait_live(&rest, 1).await?;
    drop_page_cache();
    let cold1 = read_all(&dev, STREAM, &ends, dev_pid, one.child.id()).await?;
    println!(
        "cold read, 1 replica:                {:8.1} MiB/s over {:.1} MiB = {:.2} of raw GETs \
         (target ≥ 0.9), {:.2} of raw QUIC; dev process {:.0}% CPU, replica {:.0}% CPU",
        cold1.mib_s,
        mib(cold1.bytes),
        cold1.mib_s / raw,
        cold1.mib_s / quic,
        cold1.leader_cpu * 100.0,
        cold1.replica_cpu * 100.0
    );
    let (hits_before, misses_before) = one.cache_lookups().await;
    let warm = read_all(&dev, STREAM, &ends, dev_pid, one.child.id()).await?;
    let (hits_after, misses_after) = one.cache_lookups().await;
    let hits = hits_after - hits_before;
    let lookups = hits + (misses_after - misses_before);
    let hit_ratio = if lookups > 0.0 { hits / lookups } else { 0.0 };
    println!(
        "repeated read, same replica:         {:8.1} MiB/s = {:.2} of the hot-log read (target \
         ≥ 0.9); cache hit ratio {:.3} ({hits:.0} of {lookups:.0} chunk lookups; target ≥ \
         0.95); dev process {:.0}% CPU, replica {:.0}% CPU",
        warm.mib_s,
        warm.mib_s / hot_read.mib_s,
        hit_ratio,
        warm.leader_cpu * 100.0,
        warm.replica_cpu * 100.0
    );
    drop(one);

    // 4. Two fresh replicas.
    let replicas_dir = work.path().join("replicas-2");
    std::fs::create_dir_all(&replicas_dir)?;
    let two = [
        Replica::start(&dev, &objects, &replicas_dir, "bench-b"),
        Replica::start(&dev, &objects, &replicas_dir, "bench-c"),
    ];
    wait_live(&rest, 2).await?;
    drop_page_cache();
    let cpu_c = cpu_seconds(two[1].child.id());
    let cold2 = read_all(&dev, STREAM, &ends, dev_pid, two[0].child.id()).await?;
    let replica_c_cpu = (cpu_seconds(two[1].child.id()) - cpu_c) / cold2.seconds;
    let shares = [two[0].fetched().await, two[1].fetched().await];
    println!(
        "cold read, 2 replicas:               {:8.1} MiB/s = {:.2} of raw GETs, {:.2}× one \
         replica (target ≥ 1.5); served {:.0} / {:.0} MiB; dev process {:.0}% CPU, replicas \
         {:.0}% and {:.0}% CPU",
        cold2.mib_s,
        cold2.mib_s / raw,
        cold2.mib_s / cold1.mib_s,
        shares[0] / f64::from(1u32 << 20),
        shares[1] / f64::from(1u32 << 20),
        cold2.leader_cpu * 100.0,
        cold2.replica_cpu * 100.0,
        replica_c_cpu * 100.0
    );
    drop(two);
    wait_live(&rest, 0).await.ok();

    // 5. Scaling from a decision to a first fetch, through dev's own autoscaler.
    let listen = dev.addr().to_string();
    dev.kill();
    let dev = common::BrokerProcess::start_with(
        &dir,
        &listen,
        &[],
        &[
            ("FLOE_DEV_READ_REPLICAS", "0"),
            ("FLOE_DEV_MAX_READ_REPLICAS", "2"),
        ],
    );
    let rest = Controlplane::new(
        dev.profile.controlplane.as_deref().expect("controlplane"),
        dev.profile.token.as_ref().map(|t| t.expose().to_owned()),
    )?;
    let controlplane_addr = dev
        .profile
        .controlplane
        .as_deref()
        .expect("controlplane")
        .trim_start_matches("http://")
        .to_owned();
    let rounds = env_u64("FLOE_BENCH_SCALE_ROUNDS", 5);
    let mut to_registered = Vec::new();
    let mut to_fetch = Vec::new();
    for _ in 0..rounds {
        let decisions =
            |text: &str| common::metric(text, "floe_autoscaler_decisions_total{direction=\"up\"}");
        let before = decisions(&common::http_get(&controlplane_addr, "/metrics").await);
        set_bounds(&rest, 1, 2).await?;
        let decided = loop {
            let text = common::http_get(&controlplane_addr, "/metrics").await;
            if decisions(&text) > before {
                break Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let endpoint = wait_live(&rest, 1).await?.remove(0);
        let registered = decided.elapsed();
        let mut config = ClientConfig::new(
            endpoint.clone(),
            "localhost",
            dev.data_dir.join("tls").join("ca.pem"),
        );
        config.request_timeout = Duration::from_secs(10);
        config.token = dev.profile.token.clone();
        let reader = Client::connect(config).await?;
        let answer = reader
            .request(Message::Fetch(Fetch {
                stream: stream.clone(),
                partition: PartitionId::new(0),
                position: FetchPosition::Offset(floe_wire::Offset::new(0)),
                max_bytes: 1 << 20,
                max_wait_ms: 0,
            }))
            .await?;
        let served = decided.elapsed();
        anyhow::ensure!(
            matches!(&answer, Message::FetchResponse(r) if !r.records.is_empty()),
            "the new replica's first fetch: {answer:?}"
        );
        reader.close().await;
        to_registered.push(registered);
        to_fetch.push(served);
        set_bounds(&rest, 0, 0).await?;
        wait_gone(&rest).await?;
    }
    to_registered.sort();
    to_fetch.sort();
    let median = |v: &[Duration]| v[v.len() / 2];
    println!(
        "scale 0 → 1, decision to registered: median {:?}, max {:?} ({rounds} rounds)",
        median(&to_registered),
        to_registered.last().copied().unwrap_or_default()
    );
    println!(
        "scale 0 → 1, decision to first fetch: median {:?}, max {:?} (target < 2 s)",
        median(&to_fetch),
        to_fetch.last().copied().unwrap_or_default()
    );
    println!(
        "BENCH_JSON {}",
        serde_json::json!({
            "raw_get_mib_s": raw, "page_cache_dropped": dropped, "raw_quic_mib_s": quic,
            "hot_mib_s": hot_read.mib_s,
            "cold_1_mib_s": cold1.mib_s, "cold_1_ratio": cold1.mib_s / raw,
            "cold_1_quic_ratio": cold1.mib_s / quic,
            "cold_1_dev_cpu": cold1.leader_cpu, "cold_1_replica_cpu": cold1.replica_cpu,
            "warm_1_mib_s": warm.mib_s, "warm_hit_ratio": hit_ratio,
            "warm_hot_ratio": warm.mib_s / hot_read.mib_s, "warm_replica_cpu": warm.replica_cpu,
            "cold_2_mib_s": cold2.mib_s, "cold_2_dev_cpu": cold2.leader_cpu,
            "cold_2_ratio_to_1": cold2.mib_s / cold1.mib_s,
            "cold_2_replica_cpu": [cold2.replica_cpu, replica_c_cpu],
            "cold_2_shares_bytes": shares,
            "scale_registered_ms_median": median(&to_registered).as_secs_f64() * 1e3,
            "scale_first_fetch_ms_median": median(&to_fetch).as_secs_f64() * 1e3,
            "scale_first_fetch_ms_max": to_fetch.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        })
    );
    Ok(())
}

async fn set_bounds(rest: &Controlplane, min: u32, max: u32) -> anyhow::Result<()> {
    let policy = ScalingPolicy {
        min_replicas: min,
        max_replicas: max,
        target_bytes_per_second: 1 << 30,
        target_consumers: 0,
        hysteresis_percent: 20,
        scale_up_cooldown_ms: 0,
        scale_down_cooldown_ms: 0,
    };
    rest.set_scaling_policy(&policy).await?;
    Ok(())
}

/// Waits until no replica is live or draining.
async fn wait_gone(rest: &Controlplane) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = rest.read_replicas().await?.replicas;
        if list
            .iter()
            .all(|r| !matches!(r.state, ReadReplicaState::Live | ReadReplicaState::Draining))
        {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "replicas still up: {list:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn publish(client: &Client, stream: &StreamName, records: u64) -> anyhow::Result<()> {
    let producer = Producer::new(client, stream.clone(), ProducerConfig::default()).await?;
    let value = vec![b'x'; 1024];
    let mut deliveries = Vec::new();
    for i in 0..records {
        let partition = PartitionId::new(u32::try_from(i % u64::from(PARTITIONS))?);
        let record = ProducerRecord::new(value.clone()).with_partition(partition);
        deliveries.push(producer.send(record).await?);
    }
    for delivery in deliveries {
        delivery.await?;
    }
    producer.close().await?;
    Ok(())
}

/// Waits until every partition's sealed segments are tiered; returns each tier end.
async fn wait_until_tiered(client: &Client, stream: &StreamName) -> anyhow::Result<Vec<u64>> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let info = client.stream(stream).await?;
        let done = info.partitions.iter().all(|p| {
            p.upload_backlog.segments == 0 && p.tier_end.get() > 0 && p.tier_end >= p.local_start
        });
        if done {
            return Ok(info.partitions.iter().map(|p| p.tier_end.get()).collect());
        }
        anyhow::ensure!(Instant::now() < deadline, "tiering did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every tiered segment object, 4 MiB ranged GETs, one task per partition.
async fn raw_gets(store: &floe_tier::TierStore) -> anyhow::Result<(u64, Duration)> {
    let mut listed = Vec::new();
    for p in 0..PARTITIONS {
        listed.push(store.list(&format!("{STREAM}/{p}/segments")).await?);
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for objects in listed {
        let store = store.clone();
        tasks.spawn(async move {
            let mut bytes = 0;
            for object in objects {
                let mut at = 0;
                while at < object.size {
                    let end = (at + CHUNK).min(object.size);
                    bytes += store.get_range(&object.key, at..end).await?.len() as u64;
                    at = end;
                }
            }
            anyhow::Ok(bytes)
        });
    }
    let mut bytes = 0;
    while let Some(done) = tasks.join_next().await {
        bytes += done??;
    }
    Ok((bytes, started.elapsed()))
}

struct Read {
    bytes: u64,
    mib_s: f64,
    seconds: f64,
    /// CPU seconds per second of the dev process (broker and controlplane).
    leader_cpu: f64,
    replica_cpu: f64,
}

/// Reads `[0, end)` of every partition of `stream`, one consumer each, all at once, through
/// a client that routes to the live read replicas (to the broker when there are none).
async fn read_all(
    dev: &common::BrokerProcess,
    stream: &str,
    ends: &[u64],
    dev_pid: u32,
    replica_pid: u32,
) -> anyhow::Result<Read> {
    let client = Client::connect(ClientConfig::from_profile(&dev.profile)).await?;
    let (dev_cpu, replica_cpu) = (cpu_seconds(dev_pid), cpu_seconds(replica_pid));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (p, &end) in ends.iter().enumerate() {
        let mut consumer = Consumer::new(
            client.clone(),
            StreamName::new(stream)?,
            PartitionId::new(u32::try_from(p)?),
            FetchPosition::Offset(floe_wire::Offset::new(0)),
            ConsumerConfig::default(),
        );
        tasks.spawn(async move {
            let mut bytes = 0;
            loop {
                let record = consumer.next().await?;
                bytes += record.value.len() as u64;
                if record.offset.get() + 1 >= end {
                    break;
                }
            }
            anyhow::Ok(bytes)
        });
    }
    let mut bytes = 0;
    while let Some(done) = tasks.join_next().await {
        bytes += done??;
    }
    let elapsed = started.elapsed();
    let seconds = elapsed.as_secs_f64();
    let read = Read {
        bytes,
        mib_s: mib_per_s(bytes, elapsed),
        seconds,
        leader_cpu: (cpu_seconds(dev_pid) - dev_cpu) / seconds,
        replica_cpu: (cpu_seconds(replica_pid) - replica_cpu) / seconds,
    };
    client.close().await;
    Ok(read)
}

//! Publishing over QUIC, against this machine's own limits measured in the same run.
//!
//! `cargo bench -p floe-broker --bench publish` measures, in order:
//! 1. raw `write` + `fdatasync` bandwidth in writes of the producer's batch size (default 1 MiB),
//!    the better of two passes;
//! 2. raw QUIC bandwidth: one stream over loopback with the broker's TLS and socket settings;
//! 3. publishing 1 KiB records to a `floe-broker dev` process (release build), ack mode
//!    `leader` (acknowledged after fsync), replication factor 1, with the same producer the
//!    `floe bench publish` command uses — MiB/s, records/s, send→ack latency, broker RSS;
//! 4. the raw fsync and raw QUIC figures again, once the segments the full-speed publish
//!    sealed are uploaded: the ratio to the target takes the higher figure of each, so that
//!    a publish that fell in one of a VM's slow spells is not measured against limits taken
//!    outside it;
//! 5. publish → consume latency on the tail at a fixed moderate rate;
//! 6. send → ack latency at the same rate on a stream of its own, alone and then beside a
//!    second connection reading the full-speed run's records from the start, over and over
//!    (a consumer catching up must not hold up publishers).
//!
//! Beside each throughput it reports the whole machine's busy CPU time per GiB moved (from
//! `/proc/stat`: every process, kernel threads and interrupts), which varies far less from
//! run to run on a shared VM than the throughputs do.
//!
//! Sizes: `FLOE_BENCH_MIB` (default 256) of records, `FLOE_BENCH_RATE` records/s for the
//! latency run (default 2000) over `FLOE_BENCH_LATENCY_SECS` (default 5). The producer's
//! batch size and window: `FLOE_BENCH_BATCH_BYTES` and `FLOE_BENCH_IN_FLIGHT` (default the
//! producer's defaults). `FLOE_BENCH_HISTORY_READ_RATE` (e.g. `100MiB`) starts the broker
//! with that `--history-read-rate`, the cap on history reads that step 6's reader meets.

#![allow(clippy::print_stdout)] // the report is the benchmark's output

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "publish/load.rs"]
mod load;
#[path = "publish/raw.rs"]
mod raw;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floe_broker::tls::DevCertificates;
use floe_client::{
    AckMode, Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer,
    ProducerConfig, ProducerRecord, StreamName, StreamSettings,
};
use floe_wire::frame::{Fetch, Message};
use hdrhistogram::Histogram;
use load::{env_u64, percentiles, publish};
use raw::{MachineCpu, cpu_per_gib};

fn main() -> anyhow::Result<()> {
    common::install_crypto();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let mib = env_u64("FLOE_BENCH_MIB", 256);
    let work = tempfile::Builder::new()
        .prefix("floe-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    println!(
        "floe publish benchmark: {mib} MiB of 1 KiB records, ack mode leader, replication factor 1"
    );
    println!(
        "work directory: {} (same disk as the broker's data)",
        work.path().display()
    );

    let batch = load::batch_bytes();
    let certs = DevCertificates::ensure(&work.path().join("tls"))?;
    let before = Limits::measure(work.path(), &certs, batch as usize, mib, "before").await?;

    let history_rate = std::env::var("FLOE_BENCH_HISTORY_READ_RATE").ok();
    let broker_args: Vec<&str> = match &history_rate {
        Some(rate) => {
            println!("broker history read rate: {rate} per second");
            vec!["--history-read-rate", rate.as_str()]
        }
        None => Vec::new(),
    };
    let broker = common::BrokerProcess::start_with(
        &work.path().join("broker"),
        "127.0.0.1:0",
        &broker_args,
        &[],
    );
    let config = ClientConfig::from_profile(&broker.profile);
    let client = Client::connect(config.clone()).await?;
    let stream = StreamName::new("bench")?;
    client
        .create_stream(&stream, 1, AckMode::Leader, StreamSettings::default())
        .await?;

    // Sample the broker's memory while it works.
    let sampling = Arc::new(AtomicBool::new(true));
    let peak_rss = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (sampling, peak_rss) = (sampling.clone(), peak_rss.clone());
        let pid = broker.child.id();
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                if let Some(rss) = rss_of(pid) {
                    peak_rss.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let rss_idle = rss_of(broker.child.id()).unwrap_or(0);
    let records = mib * 1024;
    let cpu = MachineCpu::sample()?;
    let (elapsed, latency) = publish(&client, &stream, records).await?;
    let publish_cpu = cpu_per_gib(cpu.seconds_since(), records * 1024);
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    let publish_mib = raw::mib_per_s(records * 1024, elapsed);
    println!(
        "floe publish:                        {publish_mib:8.1} MiB/s, {:.0} records/s, send→ack {}",
        records as f64 / elapsed.as_secs_f64(),
        percentiles(&latency)
    );
    println!(
        "broker RSS: idle {} MiB, peak during publish {} MiB",
        rss_idle >> 20,
        peak_rss.load(Ordering::Relaxed) >> 20
    );
    let drained = load::drain_uploads(&client, &[&stream], Duration::from_secs(300)).await?;
    println!(
        "uploads of the sealed segments drained {:.1} s after the publish",
        drained.as_secs_f64()
    );
    // The limits again, with the broker idle: a VM's speed drifts from minute to minute, and
    // a publish measured in a slow spell against limits measured before it would look
    // better than it is. The ratio takes the higher figure of each limit.
    let after = Limits::measure(work.path(), &certs, batch as usize, mib, "after ").await?;
    let best = before.best(after);
    let limit = best.fsync.min(best.quic);
    println!(
        "ratio to min(raw fsync, raw QUIC):   {:8.2}   (target ≥ 0.70; the higher of before and after each; {:.2} to the figures before alone)",
        publish_mib / limit,
        publish_mib / before.fsync.min(before.quic)
    );
    // The producer, the broker and its disk share this machine's cores. A publish does the
    // work of both raw transfers for each byte, so were both CPU-bound, the machine could
    // not publish faster than its cores divided by their summed cost per GiB.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let shared_limit = cores / (best.fsync_cpu + best.quic_cpu) * 1024.0;
    println!(
        "machine CPU per GiB published:       {publish_cpu:8.2} s   (raw fsync + raw QUIC: {:.2} s)",
        best.fsync_cpu + best.quic_cpu
    );
    println!(
        "{cores} cores ÷ (raw fsync + raw QUIC CPU per GiB): {shared_limit:.1} MiB/s; publish ÷ that: {:.2}",
        publish_mib / shared_limit
    );

    let rate = env_u64("FLOE_BENCH_RATE", 2000);
    let seconds = env_u64("FLOE_BENCH_LATENCY_SECS", 5);
    let tail = tail_latency(&config, rate, seconds).await?;
    println!(
        "publish→consume at {rate} records/s for {seconds} s: {}",
        percentiles(&tail)
    );
    // Publishing beside a consumer catching up: send→ack at the same rate on a stream of its
    // own, alone and then while a second connection reads the full-speed run's records from
    // the start, over and over, as fast as the broker serves them.
    let paced = StreamName::new("paced")?;
    client
        .create_stream(&paced, 1, AckMode::Leader, StreamSettings::default())
        .await?;
    let alone = load::fixed_rate(&client, &paced, rate, seconds).await?;
    let (beside, history_mib_s) =
        beside_history(&config, &client, &paced, &stream, records, rate, seconds).await?;
    println!(
        "send→ack at {rate} records/s for {seconds} s, alone:              {}",
        percentiles(&alone)
    );
    println!(
        "  … beside a reader of history ({history_mib_s:6.1} MiB/s): {}",
        percentiles(&beside)
    );
    println!(
        "BENCH_JSON {}",
        serde_json::json!({
            "raw_fsync_mib_s": best.fsync, "raw_quic_mib_s": best.quic, "publish_mib_s": publish_mib,
            "raw_fsync_before_mib_s": before.fsync, "raw_fsync_after_mib_s": after.fsync,
            "raw_quic_before_mib_s": before.quic, "raw_quic_after_mib_s": after.quic,
            "raw_fsync_cpu_s_per_gib": best.fsync_cpu, "raw_quic_cpu_s_per_gib": best.quic_cpu,
            "publish_cpu_s_per_gib": publish_cpu, "shared_cpu_limit_mib_s": shared_limit,
            "publish_records_s": records as f64 / elapsed.as_secs_f64(),
            "ratio_to_limit": publish_mib / limit,
            "send_ack_p50_us": latency.value_at_quantile(0.5), "send_ack_p99_us": latency.value_at_quantile(0.99),
            "send_ack_p999_us": latency.value_at_quantile(0.999),
            "tail_rate": rate, "tail_p50_us": tail.value_at_quantile(0.5),
            "tail_p99_us": tail.value_at_quantile(0.99), "tail_p999_us": tail.value_at_quantile(0.999),
            "rss_idle_mib": rss_idle >> 20, "rss_peak_mib": peak_rss.load(Ordering::Relaxed) >> 20,
            "send_ack_alone_p99_us": alone.value_at_quantile(0.99),
            "send_ack_beside_history_p99_us": beside.value_at_quantile(0.99),
            "history_read_mib_s": history_mib_s,
        })
    );
    drop(broker);
    Ok(())
}

/// This machine's own limits, and the machine CPU each took per GiB moved.
#[derive(Clone, Copy, Debug)]
struct Limits {
    fsync: f64,
    fsync_cpu: f64,
    quic: f64,
    quic_cpu: f64,
}

impl Limits {
    /// Raw `write` + `fdatasync` in writes of `batch` bytes, and raw QUIC, `mib` MiB each
    /// (twice over: two fsync passes, and twice the bytes over QUIC).
    async fn measure(
        work: &std::path::Path,
        certs: &DevCertificates,
        batch: usize,
        mib: u64,
        when: &str,
    ) -> anyhow::Result<Limits> {
        let bytes = mib * 1024 * 1024;
        let cpu = MachineCpu::sample()?;
        let fsync = raw::fsync_bandwidth(work, batch, bytes)?;
        let fsync_cpu = cpu_per_gib(cpu.seconds_since(), 2 * bytes);
        println!(
            "raw write+fdatasync {when}, {} KiB writes: {fsync:8.1} MiB/s, machine CPU {fsync_cpu:.2} s/GiB",
            batch / 1024
        );
        let cpu = MachineCpu::sample()?;
        let quic = raw::quic_bandwidth(&certs.server, &certs.ca, 2 * bytes).await?;
        let quic_cpu = cpu_per_gib(cpu.seconds_since(), 2 * bytes);
        println!(
            "raw QUIC {when}, one stream on loopback:  {quic:8.1} MiB/s, machine CPU {quic_cpu:.2} s/GiB"
        );
        Ok(Limits {
            fsync,
            fsync_cpu,
            quic,
            quic_cpu,
        })
    }

    /// The best the machine showed in either measurement: each bandwidth's higher figure,
    /// each cost's lower one.
    fn best(self, other: Limits) -> Limits {
        Limits {
            fsync: self.fsync.max(other.fsync),
            fsync_cpu: self.fsync_cpu.min(other.fsync_cpu),
            quic: self.quic.max(other.quic),
            quic_cpu: self.quic_cpu.min(other.quic_cpu),
        }
    }
}

fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|kib| kib * 1024)
}

/// Publishes to `paced` at a fixed rate while another connection reads offsets `[0, end)` of
/// `history` again and again with back-to-back 8 MiB fetches; returns the send→ack latency
/// in microseconds and the reader's MiB/s.
async fn beside_history(
    config: &ClientConfig,
    client: &Client,
    paced: &StreamName,
    history: &StreamName,
    end: u64,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let reader = Client::connect(config.clone()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let reading = {
        let (stop, history) = (stop.clone(), history.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let (mut offset, mut bytes) = (0, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let request = Message::Fetch(Fetch {
                    stream: history.clone(),
                    partition: PartitionId::new(0),
                    position: FetchPosition::Offset(floe_wire::Offset::new(offset)),
                    max_bytes: 8 << 20,
                    max_wait_ms: 0,
                });
                match reader.request(request).await? {
                    Message::FetchResponse(r) => {
                        bytes += r.records.len() as u64;
                        offset = r.next_offset.get();
                        if offset >= end {
                            offset = 0;
                        }
                    }
                    other => anyhow::bail!("fetch at {offset}: {other:?}"),
                }
            }
            anyhow::Ok(raw::mib_per_s(bytes, started.elapsed()))
        })
    };
    let latency = load::fixed_rate(client, paced, rate, seconds).await;
    stop.store(true, Ordering::Relaxed);
    let read = reading.await??;
    Ok((latency?, read))
}

/// Publishes at a fixed rate while a consumer follows the tail; the value carries the send
/// time, the latency is from send to the consumer seeing the record.
async fn tail_latency(
    config: &ClientConfig,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Histogram<u64>> {
    let client = Client::connect(config.clone()).await?;
    let stream = StreamName::new("tail")?;
    client
        .create_stream(&stream, 1, AckMode::Leader, StreamSettings::default())
        .await?;
    let reader = Client::connect(config.clone()).await?;
    let mut consumer = Consumer::new(
        reader,
        stream.clone(),
        PartitionId::new(0),
        FetchPosition::Latest,
        ConsumerConfig::default(),
    );
    consumer.resolve_position().await?;
    let origin = Instant::now();
    let total = rate * seconds;
    let reading = tokio::spawn(async move {
        let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
        for _ in 0..total {
            let record = consumer.next().await?;
            let mut sent = [0u8; 8];
            sent.copy_from_slice(&record.value[..8]);
            let now = origin.elapsed().as_micros() as u64;
            latency.saturating_record(now.saturating_sub(u64::from_le_bytes(sent)));
        }
        anyhow::Ok(latency)
    });
    let config = ProducerConfig {
        linger: Duration::ZERO,
        max_in_flight: load::in_flight(),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(&client, stream, config).await?;
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut deliveries = Vec::with_capacity(total as usize);
    for _ in 0..total {
        tick.tick().await;
        let mut value = vec![b'y'; 1024];
        value[..8].copy_from_slice(&(origin.elapsed().as_micros() as u64).to_le_bytes());
        deliveries.push(producer.send(ProducerRecord::new(value)).await?);
    }
    for delivery in deliveries {
        delivery.await?;
    }
    producer.close().await?;
    reading.await?
}

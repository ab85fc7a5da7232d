//! Quorum replication against the single-node path, on one cluster in one run.
//!
//! `cargo bench -p floe-broker --bench replication` starts a controlplane and three
//! `floe-broker serve` processes (release build) with peer ports on loopback, all on this
//! machine's two cores, then measures:
//! 1. publishing 1 KiB records as fast as the producer allows to a stream of replication
//!    factor 1, ack mode `leader` (the single-node path), and to a stream of replication
//!    factor 3, ack mode `quorum`, alternately, twice each; the ratio of the best quorum run
//!    to the best single-node run (target ≥ 0.40);
//! 2. send→ack latency at a fixed moderate rate, for both streams, once the segments the
//!    full-speed runs sealed are uploaded;
//! 3. open loop, with `floe bench publish --rate` (the `floe` binary beside `floe-broker`, or
//!    `FLOE_BENCH_FLOE_BIN`): 1 KiB records at `FLOE_BENCH_OPEN_RATE` records/s (default
//!    20,000) for `FLOE_BENCH_OPEN_SECS` (default 20) after a 3 s warm-up, each record's
//!    latency from its intended send time, alternately on both streams, twice each; beside
//!    each run, where the time went on the brokers: the leader's append→quorum and publish
//!    latency and every broker's `fdatasync` latency, from their `/metrics`.
//!
//! Sizes: `FLOE_BENCH_MIB` (default 128) per run, `FLOE_BENCH_RATE` records/s (default 1000)
//! over `FLOE_BENCH_LATENCY_SECS` (default 5). `FLOE_BENCH_OPEN_SECS=0` leaves out phase 3.

#![allow(clippy::print_stdout)] // the report is the benchmark's output

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "publish/load.rs"]
mod load;
#[allow(dead_code)] // the QUIC probe is the publish benchmark's
#[path = "publish/raw.rs"]
mod raw;

use common::cluster::{Cluster, Timing};
use floe_client::{Client, StreamName};
use floe_wire::AckMode;
use floe_wire::admin::CreateStreamRequest;
use load::{env_u64, fixed_rate, percentiles, publish};

fn main() -> anyhow::Result<()> {
    common::install_crypto();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn create(
    cluster: &Cluster,
    name: &str,
    factor: u32,
    ack_mode: AckMode,
) -> anyhow::Result<Client> {
    cluster
        .rest
        .create_stream(&CreateStreamRequest {
            name: StreamName::new(name)?,
            partitions: 1,
            replication_factor: Some(factor),
            ack_mode: Some(ack_mode),
            segment: floe_wire::admin::SegmentSettings {
                bytes: std::env::var("FLOE_BENCH_SEGMENT_BYTES")
                    .ok()
                    .and_then(|v| v.parse().ok()),
                age_ms: None,
            },
            retention: Default::default(),
        })
        .await?;
    let (leader, _) = cluster
        .leader_after(name, 0, floe_wire::LeaderEpoch::ZERO)
        .await;
    Ok(cluster.client(leader).await)
}

async fn run() -> anyhow::Result<()> {
    let mib = env_u64("FLOE_BENCH_MIB", 128);
    let records = mib * 1024;
    let cluster = Cluster::start(3, Timing::default()).await;
    println!(
        "floe replication benchmark: 3 brokers and a controlplane on this machine, {mib} MiB of 1 KiB records per run"
    );
    let batch = load::batch_bytes();
    let fsync = raw::fsync_bandwidth(cluster.dir.path(), batch as usize, records * 1024)?;
    println!(
        "raw write+fdatasync, {} KiB writes: {fsync:8.1} MiB/s (one writer; the brokers share this disk)",
        batch / 1024
    );
    let single_name = StreamName::new("single")?;
    let quorum_name = StreamName::new("quorum")?;
    let single = create(&cluster, "single", 1, AckMode::Leader).await?;
    let quorum = create(&cluster, "quorum", 3, AckMode::Quorum).await?;
    let mut best = (0.0f64, 0.0f64);
    let mut runs = Vec::new();
    for round in 0..2 {
        let (elapsed, latency) = publish(&single, &single_name, records).await?;
        let single_mib = raw::mib_per_s(records * 1024, elapsed);
        println!(
            "round {round}: factor 1, leader acks: {single_mib:8.1} MiB/s, send→ack {}",
            percentiles(&latency)
        );
        let (elapsed, latency) = publish(&quorum, &quorum_name, records).await?;
        let quorum_mib = raw::mib_per_s(records * 1024, elapsed);
        println!(
            "round {round}: factor 3, quorum acks: {quorum_mib:8.1} MiB/s, send→ack {}",
            percentiles(&latency)
        );
        best = (best.0.max(single_mib), best.1.max(quorum_mib));
        runs.push((single_mib, quorum_mib));
    }
    println!(
        "ratio quorum / single-node (best runs): {:.2}   (target ≥ 0.40)",
        best.1 / best.0
    );
    let rate = env_u64("FLOE_BENCH_RATE", 1000);
    let seconds = env_u64("FLOE_BENCH_LATENCY_SECS", 5);
    let limit = std::time::Duration::from_secs(300);
    let drained = load::drain_uploads(&single, &[&single_name], limit).await?
        + load::drain_uploads(&quorum, &[&quorum_name], limit).await?;
    println!(
        "uploads of the sealed segments drained {:.1} s after the last run",
        drained.as_secs_f64()
    );
    let single_latency = fixed_rate(&single, &single_name, rate, seconds).await?;
    let quorum_latency = fixed_rate(&quorum, &quorum_name, rate, seconds).await?;
    println!(
        "send→ack at {rate} records/s for {seconds} s, factor 1, leader acks: {}",
        percentiles(&single_latency)
    );
    println!(
        "send→ack at {rate} records/s for {seconds} s, factor 3, quorum acks: {}",
        percentiles(&quorum_latency)
    );
    let open_rate = env_u64("FLOE_BENCH_OPEN_RATE", 20_000);
    let open_secs = env_u64("FLOE_BENCH_OPEN_SECS", 20);
    let mut open_runs = Vec::new();
    for round in 0..if open_secs > 0 { 2 } else { 0 } {
        for name in ["single", "quorum"] {
            let run = open_loop(&cluster, name, open_rate, open_secs).await?;
            println!("open loop round {round}: {name}: {}", run.line());
            open_runs.push(run.json(name));
        }
    }
    println!(
        "BENCH_JSON {}",
        serde_json::json!({
            "raw_fsync_mib_s": fsync, "runs_mib_s": runs, "single_mib_s": best.0, "quorum_mib_s": best.1,
            "ratio": best.1 / best.0, "rate": rate,
            "single_p50_us": single_latency.value_at_quantile(0.5),
            "single_p99_us": single_latency.value_at_quantile(0.99),
            "quorum_p50_us": quorum_latency.value_at_quantile(0.5),
            "quorum_p99_us": quorum_latency.value_at_quantile(0.99),
            "open_loop": open_runs,
        })
    );
    single.close().await;
    quorum.close().await;
    cluster.shutdown().await;
    Ok(())
}

/// One open-loop run: the generator's report and what the brokers' histograms gained.
struct OpenRun {
    report: serde_json::Value,
    /// p50 and p99 (ms) of the leader's append→quorum latency, publish latency, and each
    /// broker's `fdatasync`, over the run.
    quorum_ms: Option<(f64, f64)>,
    publish_ms: Option<(f64, f64)>,
    fsync_ms: Vec<Option<(f64, f64)>>,
}

impl OpenRun {
    fn line(&self) -> String {
        let latency = &self.report["latency_ms"];
        let pair = |q: Option<(f64, f64)>| {
            q.map_or("-".to_owned(), |(p50, p99)| format!("{p50:.2}/{p99:.2}"))
        };
        format!(
            "{:.0} records/s, intended send→ack ms p50 {} p99 {} p999 {} max {} (send lag p99 {} ms); \
             brokers, p50/p99 ms (bucket bounds): leader publish {}, append→quorum {}, fdatasync {}",
            self.report["records_per_s"].as_f64().unwrap_or(0.0),
            latency["p50"],
            latency["p99"],
            latency["p999"],
            latency["max"],
            self.report["send_lag_ms"]["p99"],
            pair(self.publish_ms),
            pair(self.quorum_ms),
            self.fsync_ms
                .iter()
                .map(|q| pair(*q))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }

    fn json(&self, stream: &str) -> serde_json::Value {
        serde_json::json!({
            "stream": stream,
            "report": self.report,
            "leader_publish_ms": self.publish_ms,
            "leader_quorum_ms": self.quorum_ms,
            "fsync_ms": self.fsync_ms,
        })
    }
}

/// The `floe` binary: `FLOE_BENCH_FLOE_BIN`, else the one built beside `floe-broker`.
fn floe_program() -> anyhow::Result<std::path::PathBuf> {
    let path = match std::env::var_os("FLOE_BENCH_FLOE_BIN") {
        Some(path) => path.into(),
        None => common::broker_program().with_file_name("floe"),
    };
    anyhow::ensure!(
        path.exists(),
        "no `floe` binary at {}: build it first (`cargo build --release -p floe-cli`), or name \
         one with FLOE_BENCH_FLOE_BIN, or leave the open-loop phase out (FLOE_BENCH_OPEN_SECS=0)",
        path.display()
    );
    Ok(path)
}

/// `floe bench publish --rate` against the cluster's stream `name`, with the brokers'
/// histograms read before and after.
async fn open_loop(
    cluster: &Cluster,
    name: &str,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<OpenRun> {
    let scrape = || async {
        let mut texts = Vec::new();
        for i in 0..cluster.brokers.len() {
            texts.push(common::http_get(&cluster.metrics_addr(i), "/metrics").await);
        }
        texts
    };
    let before = scrape().await;
    let output = tokio::process::Command::new(floe_program()?)
        .args(["--endpoint", &cluster.client_endpoints()])
        .arg("--ca-cert")
        .arg(&cluster.certificates.files.ca)
        .args(["--server-name", "localhost", "--json", "bench", "publish"])
        .args(["--stream", name, "--record-size", "1KiB"])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            &format!("{seconds}s"),
        ])
        .args(["--warmup", "3s"])
        .env_remove("FLOE_PROFILE")
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "floe bench publish failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = scrape().await;
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let gained = |i: usize, family: &str| {
        let delta = histogram(&after[i], family)
            .into_iter()
            .zip(histogram(&before[i], family))
            .map(|((le, a), (_, b))| (le, a - b))
            .collect::<Vec<_>>();
        Some((quantile(&delta, 0.5)?, quantile(&delta, 0.99)?))
    };
    // The leader is the broker whose publish histogram moved most.
    let leader = (0..after.len())
        .max_by_key(|&i| {
            let count = |t: &str| common::metric(t, "floe_publish_latency_seconds_count");
            (count(&after[i]) - count(&before[i])) as u64
        })
        .unwrap_or(0);
    Ok(OpenRun {
        report,
        quorum_ms: gained(leader, "floe_quorum_ack_latency_seconds"),
        publish_ms: gained(leader, "floe_publish_latency_seconds"),
        fsync_ms: (0..after.len())
            .map(|i| gained(i, "floe_log_fsync_latency_seconds"))
            .collect(),
    })
}

/// The cumulative buckets `(upper bound in ms, count)` of a histogram family without labels.
fn histogram(text: &str, family: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{family}_bucket{{le=\"");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse::<f64>().ok()? * 1e3
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q` of cumulative `buckets`: an upper
/// estimate, as coarse as the buckets (powers of two here).
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, count)| *count >= q * total)
        .map(|(le, _)| *le)
}

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
//!    full-speed runs sealed are uploaded.
//!
//! Sizes: `FLOE_BENCH_MIB` (default 128) per run, `FLOE_BENCH_RATE` records/s (default 1000)
//! over `FLOE_BENCH_LATENCY_SECS` (default 5).

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
    println!(
        "BENCH_JSON {}",
        serde_json::json!({
            "raw_fsync_mib_s": fsync, "runs_mib_s": runs, "single_mib_s": best.0, "quorum_mib_s": best.1,
            "ratio": best.1 / best.0, "rate": rate,
            "single_p50_us": single_latency.value_at_quantile(0.5),
            "single_p99_us": single_latency.value_at_quantile(0.99),
            "quorum_p50_us": quorum_latency.value_at_quantile(0.5),
            "quorum_p99_us": quorum_latency.value_at_quantile(0.99),
        })
    );
    single.close().await;
    quorum.close().await;
    cluster.shutdown().await;
    Ok(())
}

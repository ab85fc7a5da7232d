//! A fault-injection harness in the style of Jepsen: three `floe-broker serve` processes at
//! replication factor 3, tiering to a private S3-compatible server (moto), a stream of
//! several partitions with `quorum` acks, and idempotent producers publishing all along
//! while a nemesis injects one fault per cycle:
//!
//! - **kill**: SIGKILL a broker, leave it down a while, start it again on its data;
//! - **freeze**: SIGSTOP the object store, then SIGCONT it;
//! - **cut**: drop a broker's peer port with nftables (both ways, or only what reaches it);
//! - **fill**: fill the small filesystem (tmpfs) one broker keeps its data on, then free it.
//!   That broker refuses publishes (retryably) while full, and must go on without a restart.
//!
//! After each fault heals, the producers flush, the harness waits until every broker is
//! back and every follower has caught up (a liveness check), and reads the partitions back.
//! Every acknowledged record must be there exactly once, at the offset it was acknowledged
//! with; every producer's records in the order it sent them; nothing that was never sent;
//! and no committed record may change between reads (see `history.rs`).
//!
//! - `FLOE_CHAOS_CYCLES`: cycles to run (default 50).
//! - `FLOE_CHAOS_SEED`: the nemesis's seed (default: from the clock). It is printed first;
//!   the same seed gives the same faults, targets and durations in the same order (the
//!   processes' timing, and so the records, differ from run to run).
//! - `FLOE_CHAOS_FULL_READ_EVERY`: every this many cycles (and after the last) every
//!   partition is read from offset 0 (default 10); the other cycles read from where the
//!   previous cycle's records begin, so every record is read back after its own cycle and
//!   the next.
//!
//! The kill and freeze faults always run. Cutting ports needs root and nft
//! (`FLOE_TEST_NFT`, set by scripts/test.sh), and filling a disk needs root to mount a
//! tmpfs; without them those faults are left out, and the harness says so. Without
//! `FLOE_TEST_MOTO_SERVER` (scripts/test.sh sets it) nothing runs.
//!
//! The figures of the last run (cycles, faults of each kind, records acknowledged, lost,
//! duplicated) end the output, also as one JSON line starting `chaos-tally`; every full read
//! prints the figures so far (`chaos-tally-so-far`).

mod checker;
#[path = "../common/mod.rs"]
mod common;
mod history;
mod nemesis;
mod read_back;
mod workload;

use std::time::{Duration, Instant};

use checker::{Checker, Violations};
use common::cluster::{BrokerSetup, Bucket, Cluster, Timing};
use common::moto::Moto;
use common::small_disk::SmallDisk;
use floe_wire::admin::{BrokerState, CreateStreamRequest};
use nemesis::{FaultKind, Nemesis};
use workload::Workload;

const STREAM: &str = "chaos";
const PARTITIONS: u32 = 4;
/// The broker process whose data directory is on the small filesystem.
const SMALL_DISK_BROKER: usize = 2;
/// How long a cycle may take to become healthy again, or to read back, before the harness
/// calls the cluster stuck.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(60);

struct Settings {
    seed: u64,
    cycles: u64,
    full_read_every: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value}: not a number")),
    )
}

impl Settings {
    fn from_env() -> Settings {
        let seed = env_u64("FLOE_CHAOS_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_000)
        });
        Settings {
            seed,
            cycles: env_u64("FLOE_CHAOS_CYCLES").unwrap_or(50),
            full_read_every: env_u64("FLOE_CHAOS_FULL_READ_EVERY").unwrap_or(10).max(1),
        }
    }
}

/// What a run counted; printed at the end, and as one JSON line.
#[derive(Debug, Default)]
struct Tally {
    cycles: u64,
    faults: std::collections::BTreeMap<&'static str, u64>,
    acknowledged: u64,
    /// Deliveries that failed: not acknowledged, so they may or may not be stored.
    failed: u64,
    /// Records read back, all reads together.
    read: u64,
    /// Publishes the full broker refused, from its metrics.
    disk_full_refusals: u64,
    violations: Violations,
}

impl Tally {
    fn json(&self, seed: u64, wall: Duration) -> serde_json::Value {
        serde_json::json!({
            "seed": seed,
            "cycles": self.cycles,
            "faults": self.faults,
            "acknowledged": self.acknowledged,
            "failed_deliveries": self.failed,
            "records_read": self.read,
            "disk_full_refusals": self.disk_full_refusals,
            "lost": self.violations.lost,
            "duplicated": self.violations.duplicated,
            "unknown": self.violations.unknown,
            "reordered": self.violations.reordered,
            "changed": self.violations.changed,
            "wall_seconds": wall.as_secs(),
        })
    }
}

async fn create_stream(cluster: &Cluster) {
    // Small segments sealed every few seconds and little local retention: uploads run all
    // the time (so a frozen object store matters), and full reads reach into the tier.
    let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
        "name": STREAM, "partitions": PARTITIONS, "replication_factor": 3,
        "ack_mode": "quorum",
        "segment": {"bytes": 256 * 1024, "age_ms": 3_000},
        "retention": {"local_bytes": 1024 * 1024},
    }))
    .expect("request");
    cluster.rest.create_stream(&request).await.expect("create");
}

/// Waits until every broker process runs and is live, and every partition has a leader
/// whose high watermark covers `ends` and whose followers have caught up. A broker that
/// exited by itself, or a cluster that does not recover within [`RECOVERY_DEADLINE`], fails
/// the run.
async fn wait_healthy(cluster: &Cluster, ends: &[u64], context: &str) -> Duration {
    let started = Instant::now();
    loop {
        for (i, broker) in cluster.brokers.iter().enumerate() {
            assert_eq!(
                broker.state(),
                "running",
                "{context}: broker process {i} exited by itself\n{}",
                cluster.diagnostics()
            );
        }
        let Err(last) = healthy(cluster, ends).await else {
            return started.elapsed();
        };
        assert!(
            started.elapsed() < RECOVERY_DEADLINE,
            "{context}: the cluster did not recover within {RECOVERY_DEADLINE:?}: {last}\n{}",
            cluster.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn healthy(cluster: &Cluster, ends: &[u64]) -> Result<(), String> {
    let brokers = cluster.rest.brokers().await.map_err(|e| e.to_string())?;
    let live = brokers
        .brokers
        .iter()
        .filter(|b| b.state == BrokerState::Live)
        .count();
    if live != cluster.brokers.len() {
        return Err(format!("{live} brokers live"));
    }
    let description = cluster
        .rest
        .stream(STREAM)
        .await
        .map_err(|e| e.to_string())?;
    for p in &description.partitions {
        let id = p.partition.get();
        let end = ends.get(id as usize).copied().unwrap_or(0);
        let lagging: Vec<_> = p.replica_lag.iter().filter(|l| l.records > 0).collect();
        let ok = p.leader.is_some()
            && !p.electing
            && p.previous_replicas.is_empty()
            && p.replicas.len() == 3
            && p.replica_lag.len() == 2
            && lagging.is_empty()
            && p.high_watermark.unwrap_or(0) >= end;
        if !ok {
            return Err(format!(
                "partition {id}: leader {:?} epoch {} electing {} high watermark {:?} (acknowledged up to {end}) lag {:?}",
                p.leader, p.epoch, p.electing, p.high_watermark, p.replica_lag
            ));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_kills_cuts_frozen_storage_and_full_disks() {
    // The controlplane runs in this process: its warnings (a failing metadata store, say)
    // explain a cluster that does not recover.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("floe_controlplane=warn")),
        )
        .with_test_writer()
        .try_init();
    let Some(moto) = Moto::start("floe-chaos").await else {
        eprintln!("FLOE_TEST_MOTO_SERVER is not set (scripts/test.sh sets it): not run");
        return;
    };
    let settings = Settings::from_env();
    eprintln!(
        "chaos: seed {} ({} cycles); replay with FLOE_CHAOS_SEED={}",
        settings.seed, settings.cycles, settings.seed
    );
    let mut kinds = vec![FaultKind::Kill, FaultKind::Freeze];
    if common::port_block::enabled() {
        kinds.push(FaultKind::Cut);
    } else {
        eprintln!("chaos: FLOE_TEST_NFT is not set (needs root and nft): no cut peer ports");
    }
    let disk = match SmallDisk::mount(64) {
        Ok(disk) => {
            kinds.push(FaultKind::Fill);
            Some(disk)
        }
        Err(why) => {
            eprintln!("chaos: cannot mount a tmpfs ({why}; needs root): no full disks");
            None
        }
    };
    let mut setups = vec![BrokerSetup::default(); 3];
    if let Some(disk) = &disk {
        // Publishes are refused past 90% of this broker's filesystem (the default), as in a
        // deployment, not past the test run's fixed size of logs.
        setups[SMALL_DISK_BROKER] = BrokerSetup {
            data_dir: Some(disk.data_dir()),
            args: vec!["--disk-high-water".into(), "90%".into()],
        };
    }
    let bucket = Bucket::S3 {
        url: "s3://floe-chaos/cluster".into(),
        endpoint: format!("http://{}", moto.endpoint),
    };
    let started = Instant::now();
    let mut cluster = Cluster::start_with_setup(3, Timing::default(), bucket, setups).await;
    create_stream(&cluster).await;
    let client = cluster.cluster_client().await;
    let mut workload = Workload::new(client.clone(), STREAM, PARTITIONS).await;
    let mut checker = Checker::new(PARTITIONS);
    let mut nemesis = Nemesis::new(settings.seed, kinds);
    let mut tally = Tally::default();
    wait_healthy(&cluster, &[], "start").await;

    for cycle in 1..=settings.cycles {
        let cycle_started = Instant::now();
        let context = format!("seed {} cycle {cycle}", settings.seed);
        let round = workload.start_round().await;
        let fault = nemesis.next_fault();
        let effect = nemesis
            .inject(&fault, &mut cluster, &moto, disk.as_ref())
            .await;
        // A full leader refuses its producers, retryably, and never needs a restart (the
        // wait below shows it is back).
        assert!(
            fault.kind != FaultKind::Fill || effect.led.is_empty() || effect.disk_full_refusals > 0,
            "{context}: {fault}{}: the full broker refused no publish",
            effect.note
        );
        let outcome = workload.finish_round(round).await;
        let ends = workload.acked_ends();
        let recovered = wait_healthy(&cluster, &ends, &context).await;
        let full = cycle % settings.full_read_every == 0 || cycle == settings.cycles;
        let check = checker
            .read_and_check(&client, STREAM, workload.history(), full, RECOVERY_DEADLINE)
            .await;
        *tally.faults.entry(fault.kind.name()).or_default() += 1;
        tally.cycles += 1;
        tally.acknowledged += outcome.acked;
        tally.failed += outcome.failed;
        tally.read += check.records_read;
        tally.disk_full_refusals += effect.disk_full_refusals;
        tally.violations.add(&check.violations);
        eprintln!(
            "cycle {cycle}/{}: {fault}{}; {} acknowledged, {} failed; healthy {:.1} s after; read {} records{} in {:.1} s; cycle {:.1} s",
            settings.cycles,
            effect.note,
            outcome.acked,
            outcome.failed,
            recovered.as_secs_f64(),
            check.records_read,
            if full { " (all)" } else { "" },
            check.took.as_secs_f64(),
            cycle_started.elapsed().as_secs_f64(),
        );
        if full && cycle < settings.cycles {
            // The figures so far, for a long run stopped before its end.
            eprintln!(
                "chaos-tally-so-far {}",
                tally.json(settings.seed, started.elapsed())
            );
        }
        if !check.violations.is_clean() {
            eprintln!("{context}: {}", check.report);
            eprintln!("{}", cluster.diagnostics());
            eprintln!(
                "chaos-tally {}",
                tally.json(settings.seed, started.elapsed())
            );
            panic!(
                "{context}: {:?}; replay with FLOE_CHAOS_SEED={}",
                check.violations, settings.seed
            );
        }
    }
    workload.close().await;
    client.close().await;
    let wall = started.elapsed();
    eprintln!(
        "chaos: seed {}: {} cycles in {:.0} s; faults {:?}; {} records acknowledged, {} deliveries failed; {} read back; lost {}, duplicated {}, unknown {}, reordered {}, changed {}",
        settings.seed,
        tally.cycles,
        wall.as_secs_f64(),
        tally.faults,
        tally.acknowledged,
        tally.failed,
        tally.read,
        tally.violations.lost,
        tally.violations.duplicated,
        tally.violations.unknown,
        tally.violations.reordered,
        tally.violations.changed,
    );
    eprintln!("chaos-tally {}", tally.json(settings.seed, wall));
    cluster.shutdown().await;
    drop(disk);
    drop(moto);
}

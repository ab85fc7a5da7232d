//! The hot log's benchmark: durable append throughput, ack latency at low load and the time to
//! open after a crash, each next to the same disk's raw `write` + `fdatasync` figures measured
//! in the same run, in the same directory, with the same write sizes.
//!
//! Ack mode `leader` (an append counts once an `fdatasync` covers it), replication factor 1.
//!
//! Raw and log runs are interleaved in rounds, so a disk whose speed drifts during the run
//! (shared or virtual disks do) weighs on both alike; the per-round ratios show how much.
//!
//! Run with `cargo bench -p floe-hot-log --bench hot_log`. Environment:
//! - `FLOE_BENCH_DIR`: where the temporary directory goes (default: the cargo target
//!   directory). It must be on the disk being measured; tmpfs is refused.
//! - `FLOE_BENCH_MIB`: bytes written by each throughput figure, in MiB (default 512).
//! - `FLOE_BENCH_OPEN_GIB`: size of the log built for the open-after-crash figure, in GiB
//!   (default 2; fractions allowed).
//! - `FLOE_BENCH_LATENCY_SAMPLES`: samples per latency figure (default 5000; the latency
//!   loops stop after 15 s in total).
//! - `FLOE_BENCH_ROUNDS`: rounds the throughput and latency runs are split into (default 4).
//!
//! Everything it writes lives in one temporary directory removed at the end. It prints a
//! table and a last line `BENCH_JSON {...}` with every figure.
#![allow(clippy::print_stdout)] // printing the report is this program's job

#[path = "hot_log/appenders.rs"]
mod appenders;
#[path = "hot_log/latency.rs"]
mod latency;
#[path = "hot_log/raw.rs"]
mod raw;
#[path = "hot_log/recovery.rs"]
mod recovery;
#[path = "hot_log/report.rs"]
mod report;
#[path = "hot_log/sys.rs"]
mod sys;

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floe_hot_log::{FsStorage, Log, LogConfig};
use floe_wire::BatchBuilder;

use appenders::{LogAppenders, LogThroughput};
use latency::Percentiles;
use raw::{HelperSyncer, RawAppender};
use recovery::OpenAfterCrash;

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Value size of every record.
const RECORD_VALUE_BYTES: usize = 1024;
/// The throughput batch: 1 KiB records filling exactly 64 KiB.
const BATCH_BYTES: usize = 64 * 1024;
/// The latency batch: 1 KiB records filling exactly 4 KiB.
const SMALL_BATCH_BYTES: usize = 4 * 1024;
/// Batches per raw large write: the size of eight grouped batches.
const GROUPED_BATCHES: usize = 8;
const APPENDERS: usize = 8;
const LEADER_EPOCH: floe_wire::LeaderEpoch = floe_wire::LeaderEpoch::new(1);
const LATENCY_WARMUP: usize = 100;
const LATENCY_TIME_MAX: Duration = Duration::from_secs(15);

const TARGET_THROUGHPUT_RATIO: f64 = 0.90;
const TARGET_P99_EXTRA_US: f64 = 100.0;
const TARGET_OPEN_MS: f64 = 1000.0;

fn main() -> BenchResult<()> {
    let settings = Settings::from_env()?;
    let base = bench_base_dir()?;
    let disk = sys::fs_info(&base)?;
    if disk.is_memory {
        return Err(format!(
            "{} is on {}: fdatasync there measures nothing; set FLOE_BENCH_DIR to a directory \
             on a real disk",
            base.display(),
            disk.kind
        )
        .into());
    }
    let needed = settings.disk_bytes_needed();
    if disk.free_bytes < needed {
        println!(
            "Not running: the benchmark needs {:.1} GiB free in {} and only {:.1} GiB are. \
             Lower FLOE_BENCH_MIB / FLOE_BENCH_OPEN_GIB or point FLOE_BENCH_DIR elsewhere.",
            needed as f64 / GIB as f64,
            base.display(),
            disk.free_bytes as f64 / GIB as f64
        );
        return Ok(());
    }
    let temp = tempfile::Builder::new()
        .prefix("floe-hot-log-bench-")
        .tempdir_in(&base)?;
    let machine = Machine::observe(temp.path(), &disk)?;
    let workload = Workload::build(&settings)?;
    report::print_header(&machine, &workload, &settings);

    let results = run_all(temp.path(), &workload, &settings)?;
    let load_after = sys::load_average();
    report::print_results(&results, &workload);
    temp.close()?;
    println!("Removed the temporary directory.");
    let json = report::bench_json(&machine, &workload, &settings, &results, &load_after);
    println!("BENCH_JSON {json}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Settings, workload and machine

/// What the environment asked for.
struct Settings {
    volume_bytes: u64,
    open_bytes: u64,
    latency_samples: usize,
    rounds: u64,
}

impl Settings {
    fn from_env() -> BenchResult<Settings> {
        let volume_mib: u64 = env_number("FLOE_BENCH_MIB", 512)?;
        let open_gib: f64 = env_number("FLOE_BENCH_OPEN_GIB", 2.0)?;
        let latency_samples: usize = env_number("FLOE_BENCH_LATENCY_SAMPLES", 5000)?;
        let rounds: u64 = env_number("FLOE_BENCH_ROUNDS", 4)?;
        if volume_mib == 0
            || open_gib.is_nan()
            || open_gib <= 0.0
            || latency_samples == 0
            || rounds == 0
        {
            return Err(
                "FLOE_BENCH_MIB, FLOE_BENCH_OPEN_GIB, FLOE_BENCH_LATENCY_SAMPLES and \
                        FLOE_BENCH_ROUNDS must be positive"
                    .into(),
            );
        }
        Ok(Settings {
            volume_bytes: volume_mib * MIB,
            open_bytes: (open_gib * GIB as f64) as u64,
            latency_samples,
            rounds,
        })
    }

    /// Files are kept until the end: deleting a file on a disk mounted with `discard` makes
    /// a later journal commit pay for it, which would bias whichever run comes next.
    fn disk_bytes_needed(&self) -> u64 {
        let throughput_files = 4;
        let latency_files = 3;
        let latency = latency_files
            * (self.latency_samples + LATENCY_WARMUP) as u64
            * SMALL_BATCH_BYTES as u64;
        let data = throughput_files * self.volume_bytes + self.open_bytes + latency;
        data + data / 10 + GIB
    }
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> BenchResult<T> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{name}={text:?} is not a number").into()),
        Err(_) => Ok(default),
    }
}

/// `FLOE_BENCH_DIR`, else the cargo target directory this bench was built into.
fn bench_base_dir() -> BenchResult<PathBuf> {
    if let Some(dir) = std::env::var_os("FLOE_BENCH_DIR") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)?;
        return Ok(dir);
    }
    // The bench runs as `<target>/<profile>/deps/hot_log-<hash>`.
    let exe = std::env::current_exe()?;
    let mut ancestors = exe.ancestors();
    let deps = ancestors.nth(1);
    match (deps, ancestors.nth(1)) {
        (Some(deps), Some(target)) if deps.ends_with("deps") => Ok(target.to_path_buf()),
        _ => Ok(std::env::current_dir()?),
    }
}

/// The batches every run writes, built once.
struct Workload {
    /// 64 KiB of 1 KiB records, unstamped; the log stamps a copy.
    batch: Vec<u8>,
    batch_records: u64,
    /// 4 KiB of 1 KiB records, for the latency loops.
    small_batch: Vec<u8>,
    small_records: u64,
    /// Batches per throughput figure per round: a multiple of [`GROUPED_BATCHES`].
    round_batches: u64,
    rounds: u64,
    /// Batches of the log built for the open-after-crash figure.
    open_batches: u64,
}

impl Workload {
    fn build(settings: &Settings) -> BenchResult<Workload> {
        let (batch, batch_records) = batch_of_size(BATCH_BYTES, RECORD_VALUE_BYTES)?;
        let (small_batch, small_records) = batch_of_size(SMALL_BATCH_BYTES, RECORD_VALUE_BYTES)?;
        let per_group = (GROUPED_BATCHES * BATCH_BYTES) as u64;
        let groups = settings.volume_bytes.div_ceil(per_group);
        let round_groups = groups.div_ceil(settings.rounds).max(1);
        Ok(Workload {
            batch,
            batch_records,
            small_batch,
            small_records,
            round_batches: round_groups * GROUPED_BATCHES as u64,
            rounds: settings.rounds,
            open_batches: settings.open_bytes.div_ceil(BATCH_BYTES as u64).max(1),
        })
    }

    /// Batches per throughput figure, all rounds together.
    fn batches(&self) -> u64 {
        self.rounds * self.round_batches
    }

    fn volume_bytes(&self) -> u64 {
        self.batches() * self.batch.len() as u64
    }
}

/// A batch of exactly `len` bytes: records of `value_len` while they fit, then one shorter
/// record filling the rest. Returns the bytes and the record count.
fn batch_of_size(len: usize, value_len: usize) -> BenchResult<(Vec<u8>, u64)> {
    let value = vec![b'x'; value_len];
    let full = BatchBuilder::record_len(None, &value, &[]);
    let empty = BatchBuilder::record_len(None, &[], &[]);
    let mut builder = BatchBuilder::new(len);
    let timestamp = 1_700_000_000_000;
    loop {
        let room = len - builder.len();
        if room == full || room >= full + empty {
            builder.push(timestamp, None, &value, &[])?;
        } else if room >= empty {
            builder.push(timestamp, None, &value[..room - empty], &[])?;
            break;
        } else {
            break;
        }
    }
    let records = u64::from(builder.record_count());
    let bytes = builder.finish()?.to_vec();
    if bytes.len() != len {
        return Err(format!("built a batch of {} bytes instead of {len}", bytes.len()).into());
    }
    Ok((bytes, records))
}

/// Where and on what the benchmark runs.
struct Machine {
    dir: PathBuf,
    fs_kind: String,
    free_gib: f64,
    cpus: usize,
    kernel: String,
    load_before: String,
    unix_time: u64,
}

impl Machine {
    fn observe(dir: &Path, disk: &sys::FsInfo) -> BenchResult<Machine> {
        Ok(Machine {
            dir: dir.to_path_buf(),
            fs_kind: disk.kind.clone(),
            free_gib: disk.free_bytes as f64 / GIB as f64,
            cpus: thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
            load_before: sys::load_average(),
            unix_time: SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The runs

/// Every figure of one benchmark run.
struct Results {
    raw_batch: Throughput,
    raw_grouped: Throughput,
    log_concurrent: LogThroughput,
    log_serial: LogThroughput,
    /// Log (8 appenders) over raw 64 KiB, round by round.
    round_ratios: Vec<f64>,
    raw_latency: Percentiles,
    helper_latency: Percentiles,
    log_latency: Percentiles,
    open: OpenAfterCrash,
}

fn run_all(dir: &Path, w: &Workload, settings: &Settings) -> BenchResult<Results> {
    // Latency first, while nothing else of ours is in flight.
    let [raw_latency, helper_latency, log_latency] = latency_runs(dir, w, settings)?;
    let throughput = throughput_runs(dir, w)?;
    progress("open after crash: building the log");
    let open = recovery::open_after_crash(&dir.join("log-open"), w)?;
    Ok(Results {
        raw_batch: throughput.raw_batch,
        raw_grouped: throughput.raw_grouped,
        log_concurrent: throughput.log_concurrent,
        log_serial: throughput.log_serial,
        round_ratios: throughput.round_ratios,
        raw_latency,
        helper_latency,
        log_latency,
        open,
    })
}

fn progress(what: &str) {
    println!("  running {what} ...");
    let _ = std::io::stdout().flush();
}

/// Latency of one small batch at a time: raw, raw with the sync on a second thread, the log.
fn latency_runs(dir: &Path, w: &Workload, s: &Settings) -> BenchResult<[Percentiles; 3]> {
    let mut raw = RawAppender::create(&dir.join("raw-latency"), &w.small_batch, 1)?;
    let mut helper = HelperSyncer::create(&dir.join("helper-latency"))?;
    let log = Log::open(
        Arc::new(FsStorage),
        &dir.join("log-latency"),
        LogConfig::default(),
    )?;
    let mut raw_op = || raw.append_synced();
    let mut helper_op = || helper.append_synced(&w.small_batch);
    let mut log_op = || appenders::append_synced(&log, &w.small_batch);
    let mut ops: [&mut dyn FnMut() -> BenchResult<()>; 3] =
        [&mut raw_op, &mut helper_op, &mut log_op];
    let mut histograms = [
        latency::new_histogram()?,
        latency::new_histogram()?,
        latency::new_histogram()?,
    ];
    for op in ops.iter_mut() {
        for _ in 0..LATENCY_WARMUP {
            op()?;
        }
    }
    let per_round = s.latency_samples.div_ceil(w.rounds as usize);
    let deadline = Instant::now() + LATENCY_TIME_MAX;
    for round in 1..=w.rounds {
        progress(&format!("latency round {round}/{}", w.rounds));
        for (op, histogram) in ops.iter_mut().zip(histograms.iter_mut()) {
            latency::sample(histogram, per_round, deadline, op)?;
        }
    }
    drop(ops);
    log.close()?;
    Ok(histograms.map(|h| Percentiles::of(&h)))
}

struct ThroughputRuns {
    raw_batch: Throughput,
    raw_grouped: Throughput,
    log_concurrent: LogThroughput,
    log_serial: LogThroughput,
    round_ratios: Vec<f64>,
}

/// Each round writes the same number of bytes four ways: raw 64 KiB, the log with 8
/// appenders, raw 512 KiB, the log with 1 appender.
fn throughput_runs(dir: &Path, w: &Workload) -> BenchResult<ThroughputRuns> {
    let mut raw_batch = RawAppender::create(&dir.join("raw-64k"), &w.batch, 1)?;
    let mut raw_grouped = RawAppender::create(&dir.join("raw-512k"), &w.batch, GROUPED_BATCHES)?;
    let mut log_concurrent = LogAppenders::open(&dir.join("log-8"), APPENDERS)?;
    let mut log_serial = LogAppenders::open(&dir.join("log-1"), 1)?;
    let mut round_ratios = Vec::new();
    for round in 1..=w.rounds {
        progress(&format!("throughput round {round}/{}", w.rounds));
        let raw = raw_batch.run(w.round_batches)?;
        let log = log_concurrent.run(&w.batch, w.round_batches)?;
        round_ratios.push(log.mib_per_sec() / raw.mib_per_sec());
        raw_grouped.run(w.round_batches / GROUPED_BATCHES as u64)?;
        log_serial.run(&w.batch, w.round_batches)?;
    }
    let expected_end = w.batches() * w.batch_records;
    Ok(ThroughputRuns {
        raw_batch: raw_batch.total(),
        raw_grouped: raw_grouped.total(),
        log_concurrent: log_concurrent.finish(expected_end)?,
        log_serial: log_serial.finish(expected_end)?,
        round_ratios,
    })
}

/// Bytes made durable and what it took.
#[derive(Debug, Clone, Copy, Default)]
struct Throughput {
    bytes: u64,
    elapsed: Duration,
    syncs: u64,
    /// CPU time of the whole process meanwhile.
    cpu: Duration,
}

impl Throughput {
    fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / MIB as f64 / self.elapsed.as_secs_f64()
    }

    fn bytes_per_sync(&self) -> f64 {
        self.bytes as f64 / self.syncs.max(1) as f64
    }

    fn add(&mut self, other: &Throughput) {
        self.bytes += other.bytes;
        self.elapsed += other.elapsed;
        self.syncs += other.syncs;
        self.cpu += other.cpu;
    }
}

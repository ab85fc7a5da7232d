//! Opening the log after a crash that left a torn batch at the end of its last segment.
//!
//! The log keeps no clean-shutdown marker, so a log closed gracefully and then torn by hand
//! is recovered exactly like one whose process died: the active segment is scanned and its
//! torn tail truncated; sealed segments are trusted through their index files.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_hot_log::{FsStorage, Log, LogConfig};
use floe_wire::Offset;

use crate::{BenchResult, LEADER_EPOCH, MIB, Workload, progress, sys};

const OPEN_REPEATS: usize = 3;
/// Bytes of a real batch left at the end of the last segment, as a torn write leaves them.
pub const TORN_BYTES: usize = 300;

/// Open times after a crash that left a torn batch at the end of the last segment.
pub struct OpenAfterCrash {
    pub log_bytes: u64,
    pub segments: usize,
    pub active_segment_bytes: u64,
    pub build_mib_per_sec: f64,
    /// Opens after the log files' cached pages were dropped, as after a machine crash.
    pub cold: Vec<Duration>,
    /// Opens with the log files in the page cache, as after a process crash.
    pub warm: Vec<Duration>,
}

/// Builds the log and closes it, then before each timed open appends a torn batch to the
/// last segment: every open finds the same torn tail and truncates it again, so each does
/// the same recovery work.
pub fn open_after_crash(dir: &Path, w: &Workload) -> BenchResult<OpenAfterCrash> {
    let build_mib_per_sec = build_log(dir, w)?;
    let expected_end = w.open_batches * w.batch_records;
    let segments = segment_files(dir)?;
    let last = segments
        .last()
        .ok_or("the built log has no segment")?
        .clone();
    let active_segment_bytes = std::fs::metadata(&last)?.len();
    let mut torn = w.batch[..TORN_BYTES].to_vec();
    floe_wire::batch::stamp(&mut torn, Offset::new(expected_end), LEADER_EPOCH)?;
    let mut cold = Vec::with_capacity(OPEN_REPEATS);
    let mut warm = Vec::with_capacity(OPEN_REPEATS);
    for round in 0..2 * OPEN_REPEATS {
        tear(&last, &torn)?;
        let is_cold = round < OPEN_REPEATS;
        if is_cold {
            progress(&format!("open after crash: cold open {}", round + 1));
            for path in log_dir_files(dir)? {
                sys::drop_cached_pages(&File::open(path)?)?;
            }
        } else {
            progress(&format!(
                "open after crash: warm open {}",
                round + 1 - OPEN_REPEATS
            ));
        }
        let took = timed_open(dir, expected_end)?;
        if is_cold { &mut cold } else { &mut warm }.push(took);
    }
    Ok(OpenAfterCrash {
        log_bytes: w.open_batches * w.batch.len() as u64,
        segments: segments.len(),
        active_segment_bytes,
        build_mib_per_sec,
        cold,
        warm,
    })
}

/// Appends the log without waiting per batch, waits once at the end, closes it. Returns the
/// build rate in MiB/s.
fn build_log(dir: &Path, w: &Workload) -> BenchResult<f64> {
    let log = Log::open(Arc::new(FsStorage), dir, LogConfig::default())?;
    let start = Instant::now();
    let mut last = None;
    for _ in 0..w.open_batches {
        last = Some(log.append(&w.batch, LEADER_EPOCH)?);
    }
    if let Some(appended) = last {
        log.wait_synced_blocking(appended.next_offset())?;
    }
    let elapsed = start.elapsed();
    log.close()?;
    let bytes = w.open_batches * w.batch.len() as u64;
    Ok(bytes as f64 / MIB as f64 / elapsed.as_secs_f64())
}

/// Leaves the first bytes of a batch at the end of `segment`, durably, as a crash in the
/// middle of writing it would.
fn tear(segment: &Path, torn: &[u8]) -> BenchResult<()> {
    let mut file = OpenOptions::new().append(true).open(segment)?;
    file.write_all(torn)?;
    file.sync_data()?;
    Ok(())
}

/// Times `Log::open` and checks that recovery kept every batch but the torn one.
fn timed_open(dir: &Path, expected_end: u64) -> BenchResult<Duration> {
    let start = Instant::now();
    let log = Log::open(Arc::new(FsStorage), dir, LogConfig::default())?;
    let took = start.elapsed();
    let end = log.log_end();
    if end != Offset::new(expected_end) {
        return Err(format!("reopened log ends at {end}, expected {expected_end}").into());
    }
    log.close()?;
    Ok(took)
}

/// The log's segment files, oldest first.
fn segment_files(dir: &Path) -> BenchResult<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = log_dir_files(dir)?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    Ok(files)
}

/// Every file in the log directory.
fn log_dir_files(dir: &Path) -> BenchResult<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    Ok(files)
}

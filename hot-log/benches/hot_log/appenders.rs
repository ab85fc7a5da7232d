//! Driving the log as producers with ack mode `leader` would: append, then wait until the
//! batch is durable before counting it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use floe_hot_log::{FsStorage, Log, LogConfig};
use floe_wire::Offset;
use hdrhistogram::Histogram;

use crate::latency::{self, Percentiles};
use crate::{BenchResult, LEADER_EPOCH, Throughput, sys};

/// One append, acknowledged: returns once the batch is durable.
pub fn append_synced(log: &Log, batch: &[u8]) -> BenchResult<()> {
    let appended = log.append(batch, LEADER_EPOCH)?;
    log.wait_synced_blocking(appended.next_offset())?;
    Ok(())
}

/// A log with the default configuration, written by a fixed number of appender threads.
pub struct LogAppenders {
    log: Log,
    appenders: usize,
    total: Throughput,
    ack: Histogram<u64>,
}

/// A log's throughput over all rounds and what its appenders waited per batch.
pub struct LogThroughput {
    pub appenders: usize,
    pub run: Throughput,
    /// Bytes the syncer's `fdatasync`s covered (from the log's stats).
    pub synced_bytes: u64,
    pub ack: Percentiles,
}

impl LogAppenders {
    pub fn open(dir: &Path, appenders: usize) -> BenchResult<LogAppenders> {
        Ok(LogAppenders {
            log: Log::open(Arc::new(FsStorage), dir, LogConfig::default())?,
            appenders,
            total: Throughput::default(),
            ack: latency::new_histogram()?,
        })
    }

    /// Appends `batches` copies of `batch` from the appender threads, each acknowledged only
    /// once `wait_synced_blocking` for it returns. Timed from the moment all threads start.
    pub fn run(&mut self, batch: &[u8], batches: u64) -> BenchResult<Throughput> {
        let log = &self.log;
        let remaining = AtomicU64::new(batches);
        let barrier = Barrier::new(self.appenders + 1);
        let syncs = log.stats().syncs.load(Ordering::Relaxed);
        let cpu = sys::cpu_time();
        let (elapsed, outcomes) = thread::scope(|scope| {
            let handles: Vec<_> = (0..self.appenders)
                .map(|_| scope.spawn(|| append_until_done(log, batch, &remaining, &barrier)))
                .collect();
            barrier.wait();
            let start = Instant::now();
            let outcomes: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            (start.elapsed(), outcomes)
        });
        let cpu = sys::cpu_time().saturating_sub(cpu);
        for outcome in outcomes {
            let histogram = outcome.map_err(|_| "an appender thread panicked")??;
            self.ack.add(&histogram)?;
        }
        let run = Throughput {
            bytes: batches * batch.len() as u64,
            elapsed,
            syncs: log.stats().syncs.load(Ordering::Relaxed) - syncs,
            cpu,
        };
        self.total.add(&run);
        Ok(run)
    }

    /// Checks that everything appended is durable, closes the log and returns the totals.
    pub fn finish(self, expected_end: u64) -> BenchResult<LogThroughput> {
        let synced = self.log.synced_end();
        if synced != Offset::new(expected_end) {
            return Err(format!("log synced to {synced}, expected {expected_end}").into());
        }
        let synced_bytes = self.log.stats().synced_bytes.load(Ordering::Relaxed);
        self.log.close()?;
        Ok(LogThroughput {
            appenders: self.appenders,
            run: self.total,
            synced_bytes,
            ack: Percentiles::of(&self.ack),
        })
    }
}

impl LogThroughput {
    pub fn bytes_per_sync(&self) -> f64 {
        self.synced_bytes as f64 / self.run.syncs.max(1) as f64
    }
}

/// One appender's loop: claim a batch, append it, wait until it is durable.
fn append_until_done(
    log: &Log,
    batch: &[u8],
    remaining: &AtomicU64,
    barrier: &Barrier,
) -> BenchResult<Histogram<u64>> {
    let mut ack = latency::new_histogram()?;
    barrier.wait();
    while remaining
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        let start = Instant::now();
        append_synced(log, batch)?;
        ack.saturating_record(latency::elapsed_nanos(start));
    }
    Ok(ack)
}

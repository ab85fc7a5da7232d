//! Waits for the acknowledgements of published bench records and measures them: latency
//! from each record's start time (its send, or its intended send on a fixed schedule) to
//! the arrival of its batch's acknowledgement. A task of its own, fed a chunk at a time, so
//! that its bookkeeping costs the sender little.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use floe_client::TimedDelivery;
use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{micros, new_histogram};

/// Records handed over at once.
pub(crate) const CHUNK: usize = 1024;
/// Chunks queued for the collector before the sender waits.
const CHUNKS_QUEUED: usize = 64;

/// A published record whose acknowledgement is awaited.
#[derive(Debug)]
pub(crate) struct Pending {
    /// Where its latency starts.
    pub from: Instant,
    /// Counted in the figures (not part of the warm-up).
    pub measured: bool,
    pub delivery: TimedDelivery,
}

/// What the acknowledgements showed.
#[derive(Debug)]
pub(crate) struct Acknowledged {
    /// Latencies of the measured records, µs.
    pub latency: Histogram<u64>,
    /// Measured records acknowledged.
    pub measured: u64,
    /// When the last measured record's acknowledgement arrived.
    pub last: Option<Instant>,
}

impl Acknowledged {
    fn new() -> Result<Acknowledged> {
        Ok(Acknowledged {
            latency: new_histogram()?,
            measured: 0,
            last: None,
        })
    }

    /// Adds another sender's figures.
    pub fn merge(&mut self, other: Acknowledged) -> Result<()> {
        self.latency
            .add(&other.latency)
            .context("merging latencies")?;
        self.measured += other.measured;
        self.last = self.last.max(other.last);
        Ok(())
    }
}

/// Starts a collector. Send it chunks of at most [`CHUNK`] records in send order, then drop
/// the sender; the task ends with the figures, or with the first record that failed.
/// `acked` counts every acknowledged record (warm-up included), for the progress line.
pub(crate) fn collect(
    acked: Arc<AtomicU64>,
) -> (mpsc::Sender<Vec<Pending>>, JoinHandle<Result<Acknowledged>>) {
    let (pending, mut chunks) = mpsc::channel::<Vec<Pending>>(CHUNKS_QUEUED);
    let task = tokio::spawn(async move {
        let mut figures = Acknowledged::new()?;
        while let Some(chunk) = chunks.recv().await {
            let count = chunk.len() as u64;
            for record in chunk {
                // The moment the acknowledgement arrived, not the moment it is looked at.
                let (_, acknowledged) = record.delivery.await.context("a record failed")?;
                if record.measured {
                    figures.latency.saturating_record(micros(
                        acknowledged.saturating_duration_since(record.from),
                    ));
                    figures.measured += 1;
                    figures.last = figures.last.max(Some(acknowledged));
                }
            }
            acked.fetch_add(count, Ordering::Relaxed);
        }
        Ok(figures)
    });
    (pending, task)
}

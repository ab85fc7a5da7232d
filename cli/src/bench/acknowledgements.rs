//! Waits for the acknowledgements of published bench records and measures them: latency
//! from each record's start time (its send, or its intended send on a fixed schedule) to
//! the arrival of its batch's acknowledgement. A task of its own, fed a chunk at a time, so
//! that its bookkeeping costs the sender little.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use floe_client::{TimedDeliveries, TimedDelivery};
use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{micros, new_histogram};

/// Records handed over at once.
pub(crate) const CHUNK: usize = 1024;
/// Chunks queued for the collector before the sender waits.
const CHUNKS_QUEUED: usize = 64;

/// Published records whose acknowledgement is awaited: one, or the records of one
/// `send_all` call (`--batch`).
#[derive(Debug)]
pub(crate) struct Pending {
    /// Where their latency starts.
    pub from: Instant,
    /// Counted in the figures (not part of the warm-up).
    pub measured: bool,
    pub delivery: Awaited,
}

#[derive(Debug)]
pub(crate) enum Awaited {
    One(TimedDelivery),
    Many(TimedDeliveries),
}

impl Awaited {
    fn records(&self) -> u64 {
        match self {
            Awaited::One(_) => 1,
            Awaited::Many(deliveries) => deliveries.len() as u64,
        }
    }

    /// When the (last) acknowledgement arrived.
    async fn acknowledged(self) -> Result<Instant, floe_client::Error> {
        match self {
            Awaited::One(delivery) => delivery.await.map(|(_, at)| at),
            Awaited::Many(deliveries) => deliveries.await.map(|(_, at)| at),
        }
    }
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

/// Starts a collector. Send it chunks of at most [`CHUNK`] entries in send order, then drop
/// the sender; the task ends with the figures, or with the first record that failed.
/// `acked` counts every acknowledged record (warm-up included), for the progress line.
pub(crate) fn collect(
    acked: Arc<AtomicU64>,
) -> (mpsc::Sender<Vec<Pending>>, JoinHandle<Result<Acknowledged>>) {
    let (pending, mut chunks) = mpsc::channel::<Vec<Pending>>(CHUNKS_QUEUED);
    let task = tokio::spawn(async move {
        let mut figures = Acknowledged::new()?;
        while let Some(chunk) = chunks.recv().await {
            let mut count = 0;
            for entry in chunk {
                let records = entry.delivery.records();
                count += records;
                // The moment the acknowledgement arrived, not the moment it is looked at.
                let acknowledged = entry
                    .delivery
                    .acknowledged()
                    .await
                    .context("a record failed")?;
                if entry.measured {
                    let latency = micros(acknowledged.saturating_duration_since(entry.from));
                    figures.latency.saturating_record_n(latency, records);
                    figures.measured += records;
                    figures.last = figures.last.max(Some(acknowledged));
                }
            }
            acked.fetch_add(count, Ordering::Relaxed);
        }
        Ok(figures)
    });
    (pending, task)
}

//! The bench's load generator: sends records through one or more producers, either on a
//! fixed schedule from a thread of its own (open loop) or as fast as the producers take them
//! (closed loop), and hands every delivery to an acknowledgement collector.
//!
//! The open-loop sender runs on a plain thread, not a tokio task: tokio's timer wakes at
//! millisecond granularity, which at 20,000 records/s would send in bursts up to 1 ms late.
//! The thread sleeps to near each due time and polls the clock for the rest
//! ([`Schedule::wait`]); how late it still was is reported apart from the broker's latency.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use floe_client::{Producer, ProducerRecord};
use hdrhistogram::Histogram;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::acknowledgements::{self, Acknowledged, Awaited, CHUNK, Pending};
use super::schedule::{Phase, Schedule, Wait, Window};
use super::stamp::{WallClock, stamp};
use super::{micros, new_histogram};

/// What to send, and how.
#[derive(Debug)]
pub(crate) struct Load {
    pub producers: Vec<Producer>,
    pub window: Window,
    pub record_size: usize,
    /// Closed loop: records per producer call (`send_all` above 1, `send` at 1).
    pub batch: usize,
    /// Open loop: the schedule (shared by the producers, round-robin) and how long before
    /// each due time to stop sleeping. Closed loop: `None`.
    pub pace: Option<(Schedule, Duration)>,
    /// The run's start: the schedule and the warm-up count from it. Now, or just before.
    pub start: Instant,
    /// Reads the times stamped in values; a reader that sorts records by their stamp must
    /// use the same one (two clocks may differ by a microsecond at the warm-up's edge).
    pub clock: WallClock,
}

/// What sending showed.
#[derive(Debug)]
pub(crate) struct Sent {
    pub acknowledged: Acknowledged,
    /// Open loop: how late each measured record was handed to its producer, µs.
    pub lag: Option<Histogram<u64>>,
    /// Where the measured part started.
    pub measure_start: Instant,
    /// Records sent, warm-up included.
    pub records: u64,
}

impl Load {
    /// Sends everything, closes the producers and waits for every acknowledgement.
    /// `acked` counts acknowledged records for the progress line.
    pub async fn run(self, acked: Arc<AtomicU64>) -> Result<Sent> {
        anyhow::ensure!(!self.producers.is_empty(), "no producer to send with");
        match self.pace {
            Some((schedule, spin)) => {
                open_loop(
                    self.producers,
                    self.window,
                    self.record_size,
                    (schedule, spin),
                    (self.start, self.clock),
                    acked,
                )
                .await
            }
            None => {
                closed_loop(
                    self.producers,
                    self.window,
                    (self.record_size, self.batch),
                    (self.start, self.clock),
                    acked,
                )
                .await
            }
        }
    }
}

async fn open_loop(
    producers: Vec<Producer>,
    window: Window,
    record_size: usize,
    (schedule, spin): (Schedule, Duration),
    (start, clock): (Instant, WallClock),
    acked: Arc<AtomicU64>,
) -> Result<Sent> {
    let (pending, collector) = acknowledgements::collect(acked);
    let pacer = Pacer {
        producers: producers.clone(),
        schedule,
        spin,
        window,
        record_size,
        start,
        clock,
    };
    let runtime = Handle::current();
    let paced = tokio::task::spawn_blocking(move || pacer.run(&pending, &runtime))
        .await
        .context("the pacing thread")?;
    // Close (flush) even after a failure, so that the collector sees every record's fate;
    // the sender's own failure is the one to report.
    let mut closed = Ok(());
    for producer in producers {
        let result = producer.close().await;
        closed = closed.and(result);
    }
    let (lag, records) = paced?;
    closed.context("flushing")?;
    let acknowledged = collector.await.context("the acknowledgement collector")??;
    Ok(Sent {
        acknowledged,
        lag: Some(lag),
        measure_start: start + window.warmup(),
        records,
    })
}

/// The open-loop sender, run on a blocking thread.
struct Pacer {
    producers: Vec<Producer>,
    schedule: Schedule,
    spin: Duration,
    window: Window,
    record_size: usize,
    start: Instant,
    clock: WallClock,
}

impl Pacer {
    /// Sends each record at its due time, round-robin over the producers. Returns how late
    /// each measured record was handed over and how many records were sent.
    fn run(
        self,
        pending: &mpsc::Sender<Vec<Pending>>,
        runtime: &Handle,
    ) -> Result<(Histogram<u64>, u64)> {
        let mut lag = new_histogram()?;
        let mut value = vec![b'x'; self.record_size];
        let mut chunk = Vec::with_capacity(CHUNK);
        let mut measured = 0;
        let mut index = 0;
        loop {
            let due = self.schedule.due(index);
            let phase = self.window.phase(due, measured);
            if phase == Phase::Over {
                break;
            }
            self.wait_until(due);
            // Latency runs from the intended time, however late the thread got there.
            let intended = self.start + due;
            stamp(&mut value, self.clock.micros_at(intended));
            let handed = Instant::now();
            let producer = &self.producers[(index % self.producers.len() as u64) as usize];
            let record = ProducerRecord::new(Bytes::copy_from_slice(&value));
            let delivery = runtime
                .block_on(producer.send(record))
                .context("publishing")?;
            let is_measured = phase == Phase::Measured;
            if is_measured {
                measured += 1;
                lag.saturating_record(micros(handed.saturating_duration_since(intended)));
            }
            chunk.push(Pending {
                from: intended,
                measured: is_measured,
                delivery: Awaited::One(delivery.timed()),
            });
            index += 1;
            if chunk.len() == CHUNK
                && pending
                    .blocking_send(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)))
                    .is_err()
            {
                break;
            }
        }
        if !chunk.is_empty() {
            let _ = pending.blocking_send(chunk);
        }
        Ok((lag, index))
    }

    /// Sleeps to `spin` before `due` (from the start), then yields the core until it.
    fn wait_until(&self, due: Duration) {
        loop {
            match Schedule::wait(self.start.elapsed(), due, self.spin) {
                Wait::Send => return,
                Wait::Sleep(pause) => std::thread::sleep(pause),
                // Yield rather than spin hard: on a small machine the broker may need the
                // core.
                Wait::Spin => std::thread::yield_now(),
            }
        }
    }
}

async fn closed_loop(
    producers: Vec<Producer>,
    window: Window,
    (record_size, batch): (usize, usize),
    (start, clock): (Instant, WallClock),
    acked: Arc<AtomicU64>,
) -> Result<Sent> {
    let count = producers.len() as u32;
    let mut tasks = Vec::new();
    for (index, producer) in producers.into_iter().enumerate() {
        let window = window.share(count, index as u32);
        let (pending, collector) = acknowledgements::collect(acked.clone());
        tasks.push((
            tokio::spawn(send_as_acknowledged(
                producer,
                window,
                (record_size, batch),
                (start, clock),
                pending,
            )),
            collector,
        ));
    }
    let mut acknowledged: Option<Acknowledged> = None;
    let mut records = 0;
    for (sender, collector) in tasks {
        records += sender.await.context("a producer task")??;
        let figures = collector.await.context("the acknowledgement collector")??;
        match &mut acknowledged {
            Some(all) => all.merge(figures)?,
            None => acknowledged = Some(figures),
        }
    }
    Ok(Sent {
        acknowledged: acknowledged.context("no producer ran")?,
        lag: None,
        measure_start: start + window.warmup(),
        records,
    })
}

/// Sends as fast as the producer takes records (its buffer and in-flight window are the
/// only bound), `batch` records per call; latency from each actual send. Returns the
/// records sent.
async fn send_as_acknowledged(
    producer: Producer,
    window: Window,
    (record_size, batch): (usize, usize),
    (start, clock): (Instant, WallClock),
    pending: mpsc::Sender<Vec<Pending>>,
) -> Result<u64> {
    let mut value = vec![b'x'; record_size];
    let mut records_of_call: Vec<ProducerRecord> = Vec::with_capacity(batch);
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut measured = 0;
    let mut records = 0;
    loop {
        let sent = Instant::now();
        let phase = window.phase(sent.saturating_duration_since(start), measured);
        if phase == Phase::Over {
            break;
        }
        stamp(&mut value, clock.micros_at(sent));
        let (delivery, count) = if batch <= 1 {
            let delivery = producer
                .send(ProducerRecord::new(Bytes::copy_from_slice(&value)))
                .await
                .context("publishing")?;
            (Awaited::One(delivery.timed()), 1)
        } else {
            // The records of one call share one stamped value: they are sent together.
            let shared = Bytes::copy_from_slice(&value);
            records_of_call.clear();
            records_of_call.extend((0..batch).map(|_| ProducerRecord::new(shared.clone())));
            let deliveries = producer
                .send_all(&records_of_call)
                .await
                .context("publishing")?;
            (Awaited::Many(deliveries.timed()), batch as u64)
        };
        let is_measured = phase == Phase::Measured;
        if is_measured {
            measured += count;
        }
        records += count;
        chunk.push(Pending {
            from: sent,
            measured: is_measured,
            delivery,
        });
        if chunk.len() == CHUNK
            && pending
                .send(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)))
                .await
                .is_err()
        {
            break;
        }
    }
    if !chunk.is_empty() {
        let _ = pending.send(chunk).await;
    }
    drop(pending);
    producer.close().await.context("flushing")?;
    Ok(records)
}

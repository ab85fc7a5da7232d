//! The publishing load the benchmarks share: as fast as the producer allows, or at a fixed
//! rate, with send→ack latencies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_client::{Client, Producer, ProducerConfig, ProducerRecord, StreamName};
use hdrhistogram::Histogram;

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn percentiles(h: &Histogram<u64>) -> String {
    format!(
        "p50 {} µs, p99 {} µs, p999 {} µs",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999)
    )
}

/// The producer's batch size in the benchmarks: `FLOE_BENCH_BATCH_BYTES`, default the
/// producer's own default. The raw fsync baseline writes in steps of this size.
pub fn batch_bytes() -> u32 {
    let default = ProducerConfig::default().max_batch_bytes;
    u32::try_from(env_u64("FLOE_BENCH_BATCH_BYTES", u64::from(default))).unwrap_or(default)
}

/// Batches in flight per partition in the benchmarks: `FLOE_BENCH_IN_FLIGHT`, default the
/// producer's own default.
pub fn in_flight() -> usize {
    let default = ProducerConfig::default().max_in_flight;
    usize::try_from(env_u64("FLOE_BENCH_IN_FLIGHT", default as u64)).unwrap_or(default)
}

/// Publishes `records` of 1 KiB as fast as the producer allows (batches of [`batch_bytes`]);
/// returns the time and the send→ack latency in microseconds.
pub async fn publish(
    client: &Client,
    stream: &StreamName,
    records: u64,
) -> anyhow::Result<(Duration, Histogram<u64>)> {
    let config = ProducerConfig {
        max_batch_bytes: batch_bytes(),
        max_in_flight: in_flight(),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, stream.clone(), config).await?;
    let (mut sent_records, collector) = collect_latencies();
    let value = Bytes::from(vec![b'x'; 1024]);
    let started = Instant::now();
    for _ in 0..records {
        let sent = Instant::now();
        let delivery = producer.send(ProducerRecord::new(value.clone())).await?;
        if !sent_records.push(sent, delivery).await {
            break; // the collector stopped on a failed delivery: its error is the answer
        }
    }
    sent_records.finish().await;
    let latency = collector.await??;
    producer.close().await?;
    Ok((started.elapsed(), latency))
}

/// Publishes 1 KiB records at `rate` per second for `seconds`, one record per request
/// (no linger); returns the send→ack latency in microseconds.
pub async fn fixed_rate(
    client: &Client,
    stream: &StreamName,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Histogram<u64>> {
    let config = ProducerConfig {
        linger: Duration::ZERO,
        max_in_flight: in_flight(),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, stream.clone(), config).await?;
    let (mut sent_records, collector) = collect_latencies();
    let value = Bytes::from(vec![b'z'; 1024]);
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for _ in 0..rate * seconds {
        tick.tick().await;
        let sent = Instant::now();
        let delivery = producer.send(ProducerRecord::new(value.clone())).await?;
        if !sent_records.push(sent, delivery).await {
            break; // the collector stopped on a failed delivery: its error is the answer
        }
    }
    sent_records.finish().await;
    let latency = collector.await??;
    producer.close().await?;
    Ok(latency)
}

type Sent = (Instant, floe_client::TimedDelivery);

/// Records per message to the collector. The latency of each record comes from the moment
/// its acknowledgement arrived (kept by its delivery), not from when the collector looks, so
/// handing records over in chunks changes no figure; it keeps the benchmark's own
/// bookkeeping (a channel send and receive per record) out of the producer's way.
const CHUNK: usize = 1024;

/// The sending side of [`collect_latencies`]: sent records, handed over a chunk at a time.
pub struct SentRecords {
    chunk: Vec<Sent>,
    tx: tokio::sync::mpsc::Sender<Vec<Sent>>,
}

impl SentRecords {
    /// Adds a sent record; false once the collector has stopped (a delivery failed).
    pub async fn push(&mut self, sent: Instant, delivery: floe_client::Delivery) -> bool {
        self.chunk.push((sent, delivery.timed()));
        if self.chunk.len() < CHUNK {
            return true;
        }
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK));
        self.tx.send(chunk).await.is_ok()
    }

    /// Hands over the last, partial chunk and closes the channel.
    pub async fn finish(mut self) {
        let chunk = std::mem::take(&mut self.chunk);
        if !chunk.is_empty() {
            let _ = self.tx.send(chunk).await;
        }
    }
}

/// A place for sent records' deliveries, and the task that waits for each and records its
/// send→ack latency in microseconds.
fn collect_latencies() -> (
    SentRecords,
    tokio::task::JoinHandle<anyhow::Result<Histogram<u64>>>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Sent>>(64);
    let collector = tokio::spawn(async move {
        let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
        while let Some(chunk) = rx.recv().await {
            for (sent, delivery) in chunk {
                let (_, acked) = delivery.await?;
                latency.saturating_record(acked.saturating_duration_since(sent).as_micros() as u64);
            }
        }
        anyhow::Ok(latency)
    });
    let sent = SentRecords {
        chunk: Vec::with_capacity(CHUNK),
        tx,
    };
    (sent, collector)
}

/// Waits until no partition of `streams` has sealed data waiting for upload, up to
/// `limit`; returns how long that took. A fixed-rate run measures the steady state at that
/// rate, not the upload of what a full-speed run before it sealed.
pub async fn drain_uploads(
    client: &Client,
    streams: &[&StreamName],
    limit: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for stream in streams {
        loop {
            let info = client.stream(stream).await?;
            if info
                .partitions
                .iter()
                .all(|p| p.upload_backlog.segments == 0)
            {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < limit,
                "{stream}: uploads still pending after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(started.elapsed())
}

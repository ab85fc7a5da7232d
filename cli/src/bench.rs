//! `floe bench publish` and `floe bench consume`: throughput (MB/s of record values,
//! records/s) and latency percentiles from an HDR histogram.
//!
//! Publish latency is per record, from `send` to the arrival of its batch's
//! acknowledgement. Consume latency is end to end: from the moment the bench's producer
//! stamped the record (a timestamp in microseconds embedded at the start of the value, after
//! the magic `FLBN`) to the moment the consumer got it; for values without that stamp, from
//! the record's own timestamp (ms).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use floe_client::{
    AckMode, Client, ClientConfig, ConsumedRecord, Consumer, ConsumerConfig, ErrorCode,
    FetchPosition, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamInfo, StreamName,
    StreamSettings, TimedDelivery,
};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::mpsc;

use crate::output::{print, print_json};
use crate::progress::Progress;
use crate::size::{parse_duration, parse_size};
use crate::stream::stream_name;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Publish records as fast as the broker acknowledges them.
    Publish(PublishBench),
    /// Read records: live, end to end from a concurrent publisher (the default), or from
    /// the stream's history.
    Consume(ConsumeBench),
}

#[derive(Args, Debug)]
pub struct PublishBench {
    /// Stream to use; created if missing.
    #[arg(long, default_value = "bench")]
    stream: String,
    /// Records to publish in total.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Bytes of each record's value, e.g. 100 or 1KiB.
    #[arg(long, default_value = "100", value_parser = parse_size)]
    record_size: u64,
    /// Producers, each on its own connection; the records are shared among them.
    #[arg(long, default_value_t = 1)]
    producers: u32,
    /// Batches in flight per partition and producer (1 to 16; a broker may allow fewer).
    #[arg(long, default_value_t = floe_client::DEFAULT_IN_FLIGHT_BATCHES)]
    in_flight: usize,
    /// Partitions of the stream when it has to be created.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Largest batch.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    batch_bytes: u64,
    /// How long a batch waits for more records.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    linger: Duration,
    /// Send on a fixed schedule of this many records per second (shared among the
    /// producers) instead of as fast as acknowledgements allow; latency then runs from each
    /// record's intended send time, so a stall that delays sending is counted, not hidden.
    #[arg(long, value_name = "RECORDS_PER_S", value_parser = parse_rate)]
    rate: Option<f64>,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!(
            "`{text}` is not a positive number of records per second"
        )),
    }
}

#[derive(Args, Debug)]
pub struct ConsumeBench {
    /// Stream to use; created if missing.
    #[arg(long, default_value = "bench")]
    stream: String,
    /// Records to read in total.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Bytes of each value the live publisher sends.
    #[arg(long, default_value = "100", value_parser = parse_size)]
    record_size: u64,
    /// Partitions of the stream when it has to be created.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// `latest`: publish concurrently and measure end to end; `earliest`: read the
    /// stream's existing records from its start.
    #[arg(long, value_enum, default_value_t = Mode::Latest)]
    from: Mode,
    /// Keep only one fetch in flight per partition (no read-ahead), to compare.
    #[arg(long)]
    no_read_ahead: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Latest,
    Earliest,
}

/// Marks a value that carries its publish time.
const STAMP_MAGIC: &[u8; 4] = b"FLBN";
const STAMP_LEN: usize = 12;
/// Latencies are recorded in microseconds, up to ten minutes.
const LATENCY_MAX_US: u64 = 600_000_000;

pub async fn run(config: ClientConfig, command: BenchCommand, json: bool) -> Result<()> {
    match command {
        BenchCommand::Publish(args) => publish(config, args, json).await,
        BenchCommand::Consume(args) => consume(config, args, json).await,
    }
}

async fn publish(config: ClientConfig, args: PublishBench, json: bool) -> Result<()> {
    anyhow::ensure!(args.producers >= 1, "--producers must be at least 1");
    let stream = stream_name(&args.stream)?;
    let record_size = usize::try_from(args.record_size).context("--record-size")?;
    let client = crate::connect(config.clone()).await?;
    let info = ensure_stream(&client, &stream, args.partitions).await?;
    let mut clients = vec![client];
    for _ in 1..args.producers {
        clients.push(crate::connect(config.clone()).await?);
    }
    let acked = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("publish", args.records, acked.clone());
    let started = Instant::now();
    let latency = publish_shares(&clients, &stream, &args, record_size, acked).await?;
    let elapsed = started.elapsed();
    progress.finish();
    for client in &clients {
        client.close().await;
    }
    let report = Report {
        title: format!(
            "bench publish: {} records of {} B to {stream} ({} partitions, ack mode {}), \
             {} producer(s), {} in flight per partition{}",
            args.records,
            record_size,
            info.partition_count,
            info.ack_mode.as_str(),
            args.producers,
            args.in_flight,
            args.rate
                .map(|rate| format!(", {rate} records/s on a fixed schedule"))
                .unwrap_or_default()
        ),
        latency_label: if args.rate.is_some() {
            "intended send to ack"
        } else {
            "send to ack"
        },
        records: args.records,
        bytes: args.records * args.record_size,
        elapsed,
        latency,
    };
    report.print(
        json,
        json!({
            "bench": "publish",
            "stream": stream.as_str(),
            "partitions": info.partition_count,
            "ack_mode": info.ack_mode.as_str(),
            "record_size": record_size,
            "producers": args.producers,
            "in_flight": args.in_flight,
            "rate": args.rate,
        }),
    )
}

/// Publishes `args.records` shared among one producer per client, counting acknowledged
/// records in `acked`; returns the merged send-to-ack latencies.
async fn publish_shares(
    clients: &[Client],
    stream: &StreamName,
    args: &PublishBench,
    record_size: usize,
    acked: Arc<AtomicU64>,
) -> Result<Histogram<u64>> {
    let producer_config = ProducerConfig {
        linger: args.linger,
        max_batch_bytes: u32::try_from(args.batch_bytes).unwrap_or(u32::MAX),
        max_in_flight: args.in_flight,
        ..ProducerConfig::default()
    };
    let mut tasks = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let share = share(args.records, args.producers, index as u32);
        let producer = Producer::new(client, stream.clone(), producer_config.clone())
            .await
            .context("starting a producer")?;
        let rate = args.rate.map(|rate| rate / f64::from(args.producers));
        tasks.push(tokio::spawn(publish_share(
            producer,
            share,
            record_size,
            rate,
            acked.clone(),
        )));
    }
    let mut latency = new_histogram()?;
    for task in tasks {
        let histogram = task.await.context("a producer task")??;
        latency.add(&histogram).context("merging latencies")?;
    }
    Ok(latency)
}

/// Records for producer `index` of `producers`: an even share, the remainder to the first.
fn share(records: u64, producers: u32, index: u32) -> u64 {
    let base = records / u64::from(producers);
    if index == 0 {
        base + records % u64::from(producers)
    } else {
        base
    }
}

async fn publish_share(
    producer: Producer,
    records: u64,
    record_size: usize,
    rate: Option<f64>,
    acked: Arc<AtomicU64>,
) -> Result<Histogram<u64>> {
    // Acknowledgements are awaited in send order by a second task; the latency uses the
    // moment each one arrived, not the moment it was looked at. Records reach that task a
    // chunk at a time, so that its bookkeeping costs little beside the producer's own.
    let (pending, mut deliveries) = mpsc::channel::<Vec<(Instant, TimedDelivery)>>(64);
    let collector = tokio::spawn(async move {
        let mut latency = new_histogram()?;
        while let Some(chunk) = deliveries.recv().await {
            let count = chunk.len() as u64;
            for (sent, delivery) in chunk {
                let (_, acknowledged) = delivery.await.context("a record failed")?;
                latency.saturating_record(micros(acknowledged.saturating_duration_since(sent)));
            }
            acked.fetch_add(count, Ordering::Relaxed);
        }
        anyhow::Ok(latency)
    });
    const CHUNK: usize = 1024;
    let mut chunk = Vec::with_capacity(CHUNK);
    let clock = WallClock::new();
    let mut value = vec![b'x'; record_size];
    let schedule = rate.map(|rate| (Instant::now(), Duration::from_secs_f64(1.0 / rate)));
    for index in 0..records {
        let sent = match schedule {
            Some((start, every)) => {
                // The intended time, however late the loop gets there.
                let due = start + every.mul_f64(index as f64);
                tokio::time::sleep_until(due.into()).await;
                due
            }
            None => Instant::now(),
        };
        stamp(&mut value, clock.micros_at(sent));
        let delivery = producer
            .send(ProducerRecord::new(Bytes::copy_from_slice(&value)))
            .await
            .context("publishing")?;
        chunk.push((sent, delivery.timed()));
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
    collector.await.context("the acknowledgement collector")?
}

async fn consume(config: ClientConfig, args: ConsumeBench, json: bool) -> Result<()> {
    let stream = stream_name(&args.stream)?;
    let record_size = usize::try_from(args.record_size).context("--record-size")?;
    let client = crate::connect(config.clone()).await?;
    let info = ensure_stream(&client, &stream, args.partitions).await?;
    let live = args.from == Mode::Latest;
    let read_ahead = !args.no_read_ahead;
    let readers = readers(&client, &stream, &info, args.from, args.records, read_ahead).await?;
    let consumed = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("consume", args.records, consumed.clone());
    let started = Instant::now();
    let publisher = if live {
        Some(Publisher::start(config, &stream, args.records, record_size).await?)
    } else {
        None
    };
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|consumer| tokio::spawn(read_share(consumer, args.records, consumed.clone())))
        .collect();
    let mut latency = new_histogram()?;
    let mut bytes = 0;
    for task in tasks {
        let (histogram, read) = task.await.context("a consumer task")??;
        latency.add(&histogram).context("merging latencies")?;
        bytes += read;
    }
    let elapsed = started.elapsed();
    progress.finish();
    if let Some(publisher) = publisher {
        publisher.finish().await?;
    }
    client.close().await;
    let report = Report {
        title: format!(
            "bench consume: {} records from {stream} ({} partitions, ack mode {}), {}",
            args.records,
            info.partition_count,
            info.ack_mode.as_str(),
            if live {
                "live, end to end from a concurrent publisher"
            } else {
                "from the earliest offset"
            }
        ),
        latency_label: if live { "end to end" } else { "record age" },
        records: args.records,
        bytes,
        elapsed,
        latency,
    };
    report.print(
        json,
        json!({
            "bench": "consume",
            "stream": stream.as_str(),
            "partitions": info.partition_count,
            "ack_mode": info.ack_mode.as_str(),
            "mode": if live { "live" } else { "history" },
        }),
    )
}

/// One consumer per partition, each with its start fixed before anything is published.
/// Reading history needs `records` records to be there already.
async fn readers(
    client: &Client,
    stream: &StreamName,
    info: &StreamInfo,
    from: Mode,
    records: u64,
    read_ahead: bool,
) -> Result<Vec<Consumer>> {
    let position = match from {
        Mode::Latest => FetchPosition::Latest,
        Mode::Earliest => {
            let available: u64 = info
                .partitions
                .iter()
                .map(|p| p.high_watermark.distance_from(p.log_start))
                .sum();
            anyhow::ensure!(
                available >= records,
                "stream {stream} holds {available} records, fewer than --records {records}: \
                 publish more (floe bench publish) or measure live with --from latest",
            );
            FetchPosition::Earliest
        }
    };
    let mut readers = Vec::new();
    for partition in 0..info.partition_count {
        let mut consumer = Consumer::new(
            client.clone(),
            stream.clone(),
            PartitionId::new(partition),
            position,
            ConsumerConfig {
                max_wait: Duration::from_millis(100),
                read_ahead,
                ..ConsumerConfig::default()
            },
        );
        consumer
            .resolve_position()
            .await
            .context("resolving the start")?;
        readers.push(consumer);
    }
    Ok(readers)
}

/// The live consume bench's publisher, on its own connection.
struct Publisher {
    client: Client,
    task: tokio::task::JoinHandle<Result<Histogram<u64>>>,
}

impl Publisher {
    async fn start(
        config: ClientConfig,
        stream: &StreamName,
        records: u64,
        record_size: usize,
    ) -> Result<Publisher> {
        let client = crate::connect(config).await?;
        let producer = Producer::new(&client, stream.clone(), ProducerConfig::default())
            .await
            .context("starting the publisher")?;
        let task = tokio::spawn(publish_share(
            producer,
            records,
            record_size,
            None,
            Arc::new(AtomicU64::new(0)),
        ));
        Ok(Publisher { client, task })
    }

    async fn finish(self) -> Result<()> {
        self.task.await.context("the publisher task")??;
        self.client.close().await;
        Ok(())
    }
}

/// Reads until `total` records have been read across all readers. Returns the latencies and
/// the value bytes this reader saw.
async fn read_share(
    mut consumer: Consumer,
    total: u64,
    consumed: Arc<AtomicU64>,
) -> Result<(Histogram<u64>, u64)> {
    let mut latency = new_histogram()?;
    let mut bytes = 0;
    while consumed.load(Ordering::Relaxed) < total {
        let Some(record) = consumer
            .poll(Duration::from_millis(100))
            .await
            .context("consuming")?
        else {
            continue;
        };
        // Count first, so that no reader takes more than the total between them.
        if consumed.fetch_add(1, Ordering::Relaxed) >= total {
            break;
        }
        latency.saturating_record(age_micros(&record, now_micros()));
        bytes += record.value.len() as u64;
    }
    Ok((latency, bytes))
}

/// Writes the magic and a time (µs since the Unix epoch) at the start of a value long enough
/// to hold them.
fn stamp(value: &mut [u8], micros: u64) {
    if value.len() >= STAMP_LEN {
        value[..4].copy_from_slice(STAMP_MAGIC);
        value[4..STAMP_LEN].copy_from_slice(&micros.to_le_bytes());
    }
}

/// The wall clock read off the monotonic one: one clock read per record gives both the
/// send time a latency is measured from and the time stamped in the value. Over a
/// benchmark's minutes the two clocks drift apart by microseconds at most.
struct WallClock {
    origin: Instant,
    origin_micros: u64,
}

impl WallClock {
    fn new() -> WallClock {
        WallClock {
            origin: Instant::now(),
            origin_micros: now_micros(),
        }
    }

    /// Microseconds since the Unix epoch at `at`.
    fn micros_at(&self, at: Instant) -> u64 {
        self.origin_micros + micros(at.saturating_duration_since(self.origin))
    }
}

/// How long ago a record was published, in µs: from the stamp in its value if it has one,
/// else from its timestamp.
fn age_micros(record: &ConsumedRecord, now_us: u64) -> u64 {
    let stamped = record
        .value
        .get(..STAMP_LEN)
        .filter(|head| head.starts_with(STAMP_MAGIC))
        .and_then(|head| head[4..].try_into().ok())
        .map(u64::from_le_bytes);
    let published = stamped.unwrap_or_else(|| {
        u64::try_from(record.timestamp)
            .unwrap_or(0)
            .saturating_mul(1000)
    });
    now_us.saturating_sub(published)
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn new_histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).context("creating a latency histogram")
}

/// The stream, created with `partitions` partitions (ack mode `leader`) if missing.
async fn ensure_stream(
    client: &Client,
    stream: &StreamName,
    partitions: u32,
) -> Result<StreamInfo> {
    match client.stream(stream).await {
        Ok(info) => return Ok(info),
        Err(e) if e.code() == Some(ErrorCode::UnknownStream) => {}
        Err(e) => return Err(e).with_context(|| format!("reading stream {stream}")),
    }
    match client
        .create_stream(
            stream,
            partitions,
            AckMode::Leader,
            StreamSettings::default(),
        )
        .await
    {
        Ok(()) => {}
        // Another bench created it meanwhile.
        Err(e) if e.code() == Some(ErrorCode::StreamExists) => {}
        Err(e) => return Err(e).with_context(|| format!("creating stream {stream}")),
    }
    // Served a moment after it is created (its partitions are assigned then).
    client
        .stream_when_known(stream, crate::stream::SERVED_WAIT)
        .await
        .with_context(|| format!("reading stream {stream}"))
}

/// The figures of one run.
struct Report {
    title: String,
    latency_label: &'static str,
    records: u64,
    bytes: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Report {
    fn print(&self, json: bool, mut fields: serde_json::Value) -> Result<()> {
        let seconds = self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let mb_per_s = self.bytes as f64 / 1e6 / seconds;
        let records_per_s = self.records as f64 / seconds;
        let ms = |quantile: f64| self.latency.value_at_quantile(quantile) as f64 / 1000.0;
        if json {
            if let Some(object) = fields.as_object_mut() {
                object.insert("records".into(), json!(self.records));
                object.insert("bytes".into(), json!(self.bytes));
                object.insert("elapsed_s".into(), json!(seconds));
                object.insert("mb_per_s".into(), json!(mb_per_s));
                object.insert("records_per_s".into(), json!(records_per_s));
                object.insert(
                    "latency_ms".into(),
                    json!({
                        "kind": self.latency_label,
                        "p50": ms(0.5),
                        "p99": ms(0.99),
                        "p999": ms(0.999),
                        "max": self.latency.max() as f64 / 1000.0,
                    }),
                );
            }
            print_json(&fields)?;
            return Ok(());
        }
        print(&format!(
            "{}\n  throughput  {mb_per_s:.1} MB/s  {records_per_s:.0} records/s  ({seconds:.2} s)\n  \
             latency     {}: p50 {:.3} ms  p99 {:.3} ms  p999 {:.3} ms  max {:.3} ms\n",
            self.title,
            self.latency_label,
            ms(0.5),
            ms(0.99),
            ms(0.999),
            self.latency.max() as f64 / 1000.0,
        ))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use floe_client::Offset;

    use super::*;

    #[test]
    fn records_are_shared_evenly_with_the_remainder_to_the_first() {
        let shares: Vec<u64> = (0..3).map(|i| share(10, 3, i)).collect();
        assert_eq!(shares, [4, 3, 3]);
        assert_eq!(share(7, 1, 0), 7);
    }

    #[test]
    fn a_stamped_value_gives_its_age_in_microseconds() {
        let mut value = vec![0u8; 100];
        stamp(&mut value, WallClock::new().micros_at(Instant::now()));
        let published = u64::from_le_bytes(value[4..12].try_into().expect("8 bytes"));
        let record = ConsumedRecord {
            partition: PartitionId::new(0),
            offset: Offset::new(0),
            timestamp: 0,
            key: None,
            value: Bytes::from(value),
            headers: vec![],
        };
        assert_eq!(age_micros(&record, published + 1500), 1500);
    }

    #[test]
    fn an_unstamped_value_falls_back_to_the_record_timestamp() {
        let record = ConsumedRecord {
            partition: PartitionId::new(0),
            offset: Offset::new(0),
            timestamp: 2_000,
            key: None,
            value: Bytes::from_static(b"short"),
            headers: vec![],
        };
        assert_eq!(age_micros(&record, 2_500_000), 500_000);
        let mut tiny = [0u8; 4];
        stamp(&mut tiny, now_micros());
        assert_eq!(tiny, [0; 4], "too short to stamp");
    }
}

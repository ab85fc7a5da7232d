//! `floe bench consume`: read records live, end to end from a concurrent publisher (closed
//! loop, or open loop with `--rate`), or from the stream's history.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use floe_client::{
    Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer,
    ProducerConfig, StreamInfo, StreamName,
};
use hdrhistogram::Histogram;
use serde_json::json;

use super::load::{Load, Sent};
use super::report::Report;
use super::stamp::{WallClock, micros_between, now_micros, published_micros};
use super::{Pace, ensure_stream, merged, micros, new_histogram};
use crate::progress::Progress;
use crate::size::parse_size;
use crate::stream::stream_name;

#[derive(Args, Debug)]
pub struct ConsumeBench {
    /// Stream to use; created if missing.
    #[arg(long, default_value = "bench")]
    stream: String,
    /// Records to measure (after the warm-up).
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
    /// The live publisher's pace.
    #[command(flatten)]
    pace: Pace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Latest,
    Earliest,
}

pub(super) async fn run(config: ClientConfig, args: ConsumeBench, json: bool) -> Result<()> {
    let stream = stream_name(&args.stream)?;
    let record_size = usize::try_from(args.record_size).context("--record-size")?;
    let live = args.from == Mode::Latest;
    anyhow::ensure!(
        live || (args.pace.rate.is_none()
            && args.pace.duration.is_none()
            && args.pace.warmup.is_zero()),
        "--rate, --duration and --warmup pace the live publisher: they need --from latest"
    );
    let client = crate::connect(config.clone()).await?;
    let info = ensure_stream(&client, &stream, args.partitions).await?;
    let read_ahead = !args.no_read_ahead;
    let readers = readers(&client, &stream, &info, args.from, args.records, read_ahead).await?;
    let consumed = Arc::new(AtomicU64::new(0));
    // Records to read in all: known now for history, once the publisher is done when live.
    let target = Arc::new(AtomicU64::new(if live { u64::MAX } else { args.records }));
    let progress = Progress::start(
        "consume",
        args.pace.expected(args.records),
        consumed.clone(),
    );
    let (publisher, measure_start, measure_from_us) = if live {
        let publisher =
            Publisher::start(config, &stream, &args, record_size, target.clone()).await?;
        let (start, from_us) = (publisher.measure_start, publisher.measure_from_us);
        (Some(publisher), start, from_us)
    } else {
        (None, Instant::now(), 0)
    };
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|consumer| {
            tokio::spawn(read_share(
                consumer,
                target.clone(),
                consumed.clone(),
                measure_from_us,
            ))
        })
        .collect();
    let mut read = Read::new()?;
    for task in tasks {
        read.merge(task.await.context("a consumer task")??)?;
    }
    progress.finish();
    let sent = match publisher {
        Some(publisher) => Some(publisher.finish().await?),
        None => None,
    };
    client.close().await;
    anyhow::ensure!(
        read.records > 0,
        "no record was measured: the run ended within its warm-up"
    );
    report(&args, &stream, &info, read, sent, measure_start, json)
}

fn report(
    args: &ConsumeBench,
    stream: &StreamName,
    info: &StreamInfo,
    read: Read,
    sent: Option<Sent>,
    measure_start: Instant,
    json: bool,
) -> Result<()> {
    let live = sent.is_some();
    let last = read.last.unwrap_or(measure_start);
    let acknowledged = sent.as_ref().map(|sent| &sent.acknowledged.latency);
    let ack_ms = acknowledged.map(|latency| {
        let ms = |us: u64| us as f64 / 1000.0;
        json!({
            "p50": ms(latency.value_at_quantile(0.5)),
            "p99": ms(latency.value_at_quantile(0.99)),
            "p999": ms(latency.value_at_quantile(0.999)),
            "max": ms(latency.max()),
        })
    });
    let report = Report {
        title: format!(
            "bench consume: {} records from {stream} ({} partitions, ack mode {}), {}",
            read.records,
            info.partition_count,
            info.ack_mode.as_str(),
            if live {
                format!(
                    "live, end to end from a concurrent publisher ({})",
                    args.pace.describe(args.records)
                )
            } else {
                "from the earliest offset".to_owned()
            }
        ),
        latency_label: match (live, args.pace.rate.is_some()) {
            (true, true) => "intended send to consumed",
            (true, false) => "end to end",
            (false, _) => "record age",
        },
        records: read.records,
        bytes: read.bytes,
        elapsed: last.saturating_duration_since(measure_start),
        latency: read.latency,
        lag: sent.and_then(|sent| sent.lag),
        notes: if live { args.pace.notes() } else { Vec::new() },
    };
    report.print(
        json,
        merged(
            json!({
                "bench": "consume",
                "stream": stream.as_str(),
                "partitions": info.partition_count,
                "ack_mode": info.ack_mode.as_str(),
                "mode": if live { "live" } else { "history" },
                "record_size": args.record_size,
                "ack_latency_ms": ack_ms,
            }),
            args.pace.fields(),
        ),
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
    task: tokio::task::JoinHandle<Result<Sent>>,
    /// Where the measured part starts, and the same as a time stamped in values.
    measure_start: Instant,
    measure_from_us: u64,
}

impl Publisher {
    /// Starts publishing. Once done, sets `target` to the records sent (0 on failure), so
    /// that the readers know when to stop.
    async fn start(
        config: ClientConfig,
        stream: &StreamName,
        args: &ConsumeBench,
        record_size: usize,
        target: Arc<AtomicU64>,
    ) -> Result<Publisher> {
        let client = crate::connect(config).await?;
        let producer_config = ProducerConfig {
            linger: args.pace.linger(),
            ..ProducerConfig::default()
        };
        let producer = Producer::new(&client, stream.clone(), producer_config)
            .await
            .context("starting the publisher")?;
        let clock = WallClock::new();
        let load = Load {
            producers: vec![producer],
            window: args.pace.window(args.records),
            record_size,
            batch: 1,
            pace: args.pace.schedule(),
            start: Instant::now(),
            clock,
        };
        let measure_start = load.start + args.pace.warmup;
        let task = tokio::spawn(async move {
            let sent = load.run(Arc::new(AtomicU64::new(0))).await;
            target.store(
                sent.as_ref().map_or(0, |sent| sent.records),
                Ordering::Relaxed,
            );
            sent
        });
        Ok(Publisher {
            client,
            task,
            measure_start,
            measure_from_us: clock.micros_at(measure_start),
        })
    }

    async fn finish(self) -> Result<Sent> {
        let sent = self.task.await.context("the publisher task")?;
        self.client.close().await;
        sent
    }
}

/// What one or all readers saw of the measured records.
#[derive(Debug)]
struct Read {
    /// µs.
    latency: Histogram<u64>,
    records: u64,
    /// Value bytes.
    bytes: u64,
    /// When the last measured record arrived.
    last: Option<Instant>,
}

impl Read {
    fn new() -> Result<Read> {
        Ok(Read {
            latency: new_histogram()?,
            records: 0,
            bytes: 0,
            last: None,
        })
    }

    fn merge(&mut self, other: Read) -> Result<()> {
        self.latency
            .add(&other.latency)
            .context("merging latencies")?;
        self.records += other.records;
        self.bytes += other.bytes;
        self.last = self.last.max(other.last);
        Ok(())
    }
}

/// Reads until `target` records have been read across all readers. Records published
/// before `measure_from_us` (the warm-up) are read but not measured.
async fn read_share(
    mut consumer: Consumer,
    target: Arc<AtomicU64>,
    consumed: Arc<AtomicU64>,
    measure_from_us: u64,
) -> Result<Read> {
    let mut read = Read::new()?;
    while consumed.load(Ordering::Relaxed) < target.load(Ordering::Relaxed) {
        let Some(record) = consumer
            .poll(Duration::from_millis(100))
            .await
            .context("consuming")?
        else {
            continue;
        };
        let arrived = Instant::now();
        let now_us = now_micros();
        // Count first, so that no reader takes more than the total between them.
        if consumed.fetch_add(1, Ordering::Relaxed) >= target.load(Ordering::Relaxed) {
            break;
        }
        let published = published_micros(&record);
        if published < measure_from_us {
            continue;
        }
        read.latency
            .saturating_record(micros(micros_between(published, now_us)));
        read.records += 1;
        read.bytes += record.value.len() as u64;
        read.last = Some(arrived);
    }
    Ok(read)
}

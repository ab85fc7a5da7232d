//! `floe bench publish`: publish records and measure the acknowledgements.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use floe_client::{ClientConfig, Producer, ProducerConfig};
use serde_json::json;

use super::load::Load;
use super::report::Report;
use super::stamp::WallClock;
use super::{Pace, ensure_stream, merged};
use crate::progress::Progress;
use crate::size::parse_size;
use crate::stream::stream_name;

#[derive(Args, Debug)]
pub struct PublishBench {
    /// Stream to use; created if missing.
    #[arg(long, default_value = "bench")]
    stream: String,
    /// Records to measure (after the warm-up), shared among the producers.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Bytes of each record's value, e.g. 100 or 1KiB.
    #[arg(long, default_value = "100", value_parser = parse_size)]
    record_size: u64,
    /// Producers, each on its own connection.
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
    /// Records handed to the producer per call: above 1, `Producer::send_all` with this many
    /// (as an application that already holds records together would); 1, `Producer::send`
    /// per record. Closed loop only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    batch: u32,
    #[command(flatten)]
    pace: Pace,
}

pub(super) async fn run(config: ClientConfig, args: PublishBench, json: bool) -> Result<()> {
    anyhow::ensure!(args.producers >= 1, "--producers must be at least 1");
    anyhow::ensure!(
        args.batch == 1 || args.pace.rate.is_none(),
        "--batch sends many records per call as fast as the producer takes them: it cannot \
         be combined with --rate, which sends each record at its own time"
    );
    let stream = stream_name(&args.stream)?;
    let record_size = usize::try_from(args.record_size).context("--record-size")?;
    let client = crate::connect(config.clone()).await?;
    let info = ensure_stream(&client, &stream, args.partitions).await?;
    let mut clients = vec![client];
    for _ in 1..args.producers {
        clients.push(crate::connect(config.clone()).await?);
    }
    let producer_config = ProducerConfig {
        linger: args.pace.linger(),
        max_batch_bytes: u32::try_from(args.batch_bytes).unwrap_or(u32::MAX),
        max_in_flight: args.in_flight,
        ..ProducerConfig::default()
    };
    let mut producers = Vec::new();
    for client in &clients {
        producers.push(
            Producer::new(client, stream.clone(), producer_config.clone())
                .await
                .context("starting a producer")?,
        );
    }
    let window = args.pace.window(args.records);
    let acked = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("publish", args.pace.expected(args.records), acked.clone());
    let load = Load {
        producers,
        window,
        record_size,
        batch: args.batch as usize,
        pace: args.pace.schedule(),
        start: Instant::now(),
        clock: WallClock::new(),
    };
    let sent = load.run(acked).await;
    progress.finish();
    for client in &clients {
        client.close().await;
    }
    let sent = sent?;
    let records = sent.acknowledged.measured;
    anyhow::ensure!(
        records > 0,
        "no record was measured: the run ended within its warm-up"
    );
    let last = sent.acknowledged.last.unwrap_or(sent.measure_start);
    let report = Report {
        title: format!(
            "bench publish: {records} records of {record_size} B to {stream} ({} partitions, ack \
             mode {}), {} producer(s), {} in flight per partition, {}{}",
            info.partition_count,
            info.ack_mode.as_str(),
            args.producers,
            args.in_flight,
            args.pace.describe(args.records),
            if args.batch > 1 {
                format!(", {} records per send_all call", args.batch)
            } else {
                String::new()
            },
        ),
        latency_label: if args.pace.rate.is_some() {
            "intended send to ack"
        } else {
            "send to ack"
        },
        records,
        bytes: records * args.record_size,
        elapsed: last.saturating_duration_since(sent.measure_start),
        latency: sent.acknowledged.latency,
        lag: sent.lag,
        notes: args.pace.notes(),
    };
    report.print(
        json,
        merged(
            json!({
                "bench": "publish",
                "stream": stream.as_str(),
                "partitions": info.partition_count,
                "ack_mode": info.ack_mode.as_str(),
                "record_size": record_size,
                "producers": args.producers,
                "in_flight": args.in_flight,
                "batch": args.batch,
                "records_sent": sent.records,
            }),
            args.pace.fields(),
        ),
    )
}

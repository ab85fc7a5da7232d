//! Publishes to NATS JetStream the workload `floe bench publish` sends to Floe, and prints
//! the same JSON shape. Closed loop: as fast as a bounded number of unacknowledged publishes
//! allows (`--in-flight`), latency from each send. Open loop (`--rate`): a thread of its own
//! publishes each record at its due time ([`Schedule`]), latency from the intended time, and
//! its own lateness reported apart, as in Floe's bench.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream::context::{Context as JetStream, ContextBuilder, PublishAckFuture};
use async_nats::jetstream::stream::{Config, StorageType};
use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::figures::{micros, new_histogram, parse_duration, parse_size, percentiles_ms};
use crate::schedule::{Length, Phase, Schedule, Wait, Window};

#[derive(Args, Debug)]
pub struct NatsBench {
    /// The server.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    url: String,
    /// Stream (and subject) to publish to; created afresh, file storage, one replica.
    #[arg(long, default_value = "bench")]
    stream: String,
    /// Records to measure (after the warm-up).
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Bytes of each record's payload, e.g. 1024 or 1KiB.
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    record_size: u64,
    /// Publishes awaiting their acknowledgement at once; `publish` waits beyond that. On two
    /// cores the closed loop gains up to about 4096 and no more beyond.
    #[arg(long, default_value_t = 4096)]
    in_flight: usize,
    /// Publish on a fixed schedule of this many records per second.
    #[arg(long, value_name = "RECORDS_PER_S")]
    rate: Option<f64>,
    /// Run for this long after the warm-up instead of a number of records.
    #[arg(long, value_parser = parse_duration, conflicts_with = "records")]
    duration: Option<Duration>,
    /// Publish for this long first and leave it out of every figure.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    warmup: Duration,
    /// With --rate: stop sleeping this long before each due time and yield until it.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    spin: Duration,
    /// How the server syncs its file store (its configuration decides; this only labels
    /// the output), e.g. `default` or `always`.
    #[arg(long, default_value = "default")]
    sync: String,
    /// Print JSON (the only output; kept for the same command line as `floe`).
    #[arg(long)]
    json: bool,
}

/// A publish whose acknowledgement is awaited.
struct Pending {
    from: Instant,
    measured: bool,
    ack: PublishAckFuture,
}

pub async fn run(args: NatsBench) -> Result<()> {
    if let Some(rate) = args.rate {
        anyhow::ensure!(rate.is_finite() && rate > 0.0, "--rate must be positive");
    }
    let client = async_nats::connect(&args.url)
        .await
        .with_context(|| format!("connecting to {}", args.url))?;
    let jetstream = ContextBuilder::new()
        .max_ack_inflight(args.in_flight.max(1))
        .backpressure_on_inflight(true)
        .timeout(Duration::from_secs(30))
        .build(client.clone());
    let _ = jetstream.delete_stream(&args.stream).await;
    jetstream
        .create_stream(Config {
            name: args.stream.clone(),
            subjects: vec![args.stream.clone()],
            storage: StorageType::File,
            num_replicas: 1,
            ..Config::default()
        })
        .await
        .context("creating the stream")?;
    let record_size = usize::try_from(args.record_size)?;
    let length = match args.duration {
        Some(duration) => Length::Duration(duration),
        None => Length::Records(args.records),
    };
    let window = Window::new(args.warmup, length);
    // Handed over one at a time: an acknowledgement's time is when the collector sees it
    // (the client keeps no arrival time), so none may wait in a sender's chunk. The client
    // acknowledges in order; the collector waits on the oldest.
    let (pending, mut records) = mpsc::channel::<Pending>(args.in_flight.max(1) + 1);
    let collector = tokio::spawn(async move {
        let mut latency = new_histogram()?;
        let mut measured = 0u64;
        let mut last = None;
        while let Some(record) = records.recv().await {
            record.ack.await.context("a publish failed")?;
            let acknowledged = Instant::now();
            if record.measured {
                latency.saturating_record(micros(acknowledged - record.from));
                measured += 1;
                last = Some(acknowledged);
            }
        }
        anyhow::Ok((latency, measured, last))
    });
    let start = Instant::now();
    let (lag, sent) = match args.rate {
        Some(rate) => {
            let pacer = Pacer {
                jetstream: jetstream.clone(),
                subject: args.stream.clone(),
                schedule: Schedule::new(rate),
                spin: args.spin,
                window,
                record_size,
                start,
            };
            let runtime = Handle::current();
            let (lag, sent) = tokio::task::spawn_blocking(move || pacer.run(pending, &runtime))
                .await
                .context("the pacing thread")??;
            (Some(lag), sent)
        }
        None => {
            let sent = closed_loop(
                &jetstream,
                &args.stream,
                window,
                record_size,
                start,
                pending,
            )
            .await?;
            (None, sent)
        }
    };
    let (latency, records, last) = collector.await.context("the collector")??;
    anyhow::ensure!(
        records > 0,
        "no record was measured: the run ended within its warm-up"
    );
    let measure_start = start + args.warmup;
    let seconds = last
        .unwrap_or(measure_start)
        .saturating_duration_since(measure_start)
        .as_secs_f64()
        .max(f64::MIN_POSITIVE);
    let bytes = records * args.record_size;
    let mut latency_ms = percentiles_ms(&latency);
    latency_ms["kind"] = json!(if args.rate.is_some() {
        "intended send to ack"
    } else {
        "send to ack"
    });
    let figures = json!({
        "bench": "publish",
        "system": "nats-jetstream",
        "stream": args.stream,
        "partitions": 1,
        "ack_mode": format!("jetstream file store, sync {}", args.sync),
        "record_size": record_size,
        "producers": 1,
        "in_flight": args.in_flight,
        "records_sent": sent,
        "rate": args.rate,
        "linger_ms": null,
        "warmup_s": args.warmup.as_secs_f64(),
        "duration_s": args.duration.map(|d| d.as_secs_f64()),
        "spin_us": args.rate.map(|_| micros(args.spin)),
        "records": records,
        "bytes": bytes,
        "elapsed_s": seconds,
        "mb_per_s": bytes as f64 / 1e6 / seconds,
        "records_per_s": records as f64 / seconds,
        "latency_ms": latency_ms,
        "send_lag_ms": lag.as_ref().map(percentiles_ms),
    });
    #[allow(clippy::print_stdout)]
    {
        println!("{figures}");
    }
    client.drain().await.ok();
    Ok(())
}

async fn closed_loop(
    jetstream: &JetStream,
    subject: &str,
    window: Window,
    record_size: usize,
    start: Instant,
    pending: mpsc::Sender<Pending>,
) -> Result<u64> {
    let value = vec![b'x'; record_size];
    let (mut measured, mut sent) = (0, 0);
    loop {
        let now = Instant::now();
        let phase = window.phase(now - start, measured);
        if phase == Phase::Over {
            break;
        }
        // A copy per record, as `floe bench` makes.
        let ack = jetstream
            .publish(subject.to_owned(), Bytes::copy_from_slice(&value))
            .await
            .context("publishing")?;
        measured += u64::from(phase == Phase::Measured);
        sent += 1;
        let record = Pending {
            from: now,
            measured: phase == Phase::Measured,
            ack,
        };
        if pending.send(record).await.is_err() {
            break;
        }
    }
    Ok(sent)
}

/// The open-loop publisher, on a blocking thread.
struct Pacer {
    jetstream: JetStream,
    subject: String,
    schedule: Schedule,
    spin: Duration,
    window: Window,
    record_size: usize,
    start: Instant,
}

impl Pacer {
    fn run(
        self,
        pending: mpsc::Sender<Pending>,
        runtime: &Handle,
    ) -> Result<(Histogram<u64>, u64)> {
        let mut lag = new_histogram()?;
        let value = vec![b'x'; self.record_size];
        let (mut measured, mut index) = (0, 0);
        loop {
            let due = self.schedule.due(index);
            let phase = self.window.phase(due, measured);
            if phase == Phase::Over {
                break;
            }
            loop {
                match Schedule::wait(self.start.elapsed(), due, self.spin) {
                    Wait::Send => break,
                    Wait::Sleep(pause) => std::thread::sleep(pause),
                    Wait::Spin => std::thread::yield_now(),
                }
            }
            let intended = self.start + due;
            let handed = Instant::now();
            let ack = runtime
                .block_on(
                    self.jetstream
                        .publish(self.subject.clone(), Bytes::copy_from_slice(&value)),
                )
                .context("publishing")?;
            let is_measured = phase == Phase::Measured;
            if is_measured {
                measured += 1;
                lag.saturating_record(micros(handed.saturating_duration_since(intended)));
            }
            index += 1;
            let record = Pending {
                from: intended,
                measured: is_measured,
                ack,
            };
            if pending.blocking_send(record).is_err() {
                break;
            }
        }
        Ok((lag, index))
    }
}

//! `floe bench publish` and `floe bench consume`: throughput (MB/s of record values,
//! records/s) and latency percentiles from an HDR histogram.
//!
//! Two ways to load the broker:
//! - **Closed loop** (the default): send as fast as the producer takes records; latency per
//!   record from `send` to the arrival of its batch's acknowledgement. Its percentiles
//!   include the time records queue behind each other, and a stall that stops sending hides
//!   from it.
//! - **Open loop** (`--rate`): send on a fixed schedule; latency from each record's
//!   *intended* send time, so a stall that delays sending is counted in full (no
//!   coordinated omission). The load generator's own lateness is reported beside it.
//!
//! `--warmup` sends first and leaves that part out of every figure; `--duration` runs for a
//! time instead of a number of records. Consume latency is end to end: from the (intended)
//! send time the bench stamps at the start of each value ([`stamp`]) to the moment the
//! consumer got it; for values without that stamp, from the record's own timestamp (ms).

mod acknowledgements;
mod consume;
mod load;
mod publish;
mod report;
mod schedule;
mod stamp;

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use floe_client::{
    AckMode, Client, ClientConfig, ErrorCode, StreamInfo, StreamName, StreamSettings,
};
use hdrhistogram::Histogram;

pub use consume::ConsumeBench;
pub use publish::PublishBench;

use crate::size::parse_duration;
use schedule::{Length, Schedule, Window};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Publish records as fast as the broker acknowledges them, or on a fixed schedule
    /// (--rate).
    Publish(PublishBench),
    /// Read records: live, end to end from a concurrent publisher (the default), or from
    /// the stream's history.
    Consume(ConsumeBench),
}

pub async fn run(config: ClientConfig, command: BenchCommand, json: bool) -> Result<()> {
    match command {
        BenchCommand::Publish(args) => publish::run(config, args, json).await,
        BenchCommand::Consume(args) => consume::run(config, args, json).await,
    }
}

/// The producer's linger when none is given and records go out as fast as acknowledgements
/// allow: batches fill while earlier ones are in flight.
const CLOSED_LOOP_LINGER: Duration = Duration::from_millis(5);

/// How records are published: the pace and the length of a run. Shared by both benches.
#[derive(Args, Debug)]
pub struct Pace {
    /// Send on a fixed schedule of this many records per second (shared among the
    /// producers) instead of as fast as acknowledgements allow; latency then runs from each
    /// record's intended send time, so a stall that delays sending is counted, not hidden.
    #[arg(long, value_name = "RECORDS_PER_S", value_parser = parse_rate)]
    rate: Option<f64>,
    /// Run for this long after the warm-up, e.g. 30s, instead of a number of records.
    #[arg(long, value_parser = parse_duration, conflicts_with = "records")]
    duration: Option<Duration>,
    /// Send for this long first, e.g. 5s, and leave it out of every figure.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    warmup: Duration,
    /// How long a batch waits for more records [default: 0 with --rate (a record goes out
    /// at once when a batch may be sent, and batches form while others are in flight),
    /// else 5ms]. A linger adds up to its length to every record's latency.
    #[arg(long, value_parser = parse_duration)]
    linger: Option<Duration>,
    /// With --rate: stop sleeping this long before each due time and yield the core until
    /// it, for a more punctual schedule at the cost of CPU. Sleeps overshoot by about 50 µs
    /// on Linux; the output's send lag shows what was left.
    #[arg(long, default_value = "0s", value_parser = parse_duration, requires = "rate")]
    spin: Duration,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!(
            "`{text}` is not a positive number of records per second"
        )),
    }
}

impl Pace {
    /// The run's window, ended by `--duration` or else by `records` measured records.
    fn window(&self, records: u64) -> Window {
        let length = match self.duration {
            Some(duration) => Length::Duration(duration),
            None => Length::Records(records),
        };
        Window::new(self.warmup, length)
    }

    fn linger(&self) -> Duration {
        self.linger.unwrap_or(if self.rate.is_some() {
            Duration::ZERO
        } else {
            CLOSED_LOOP_LINGER
        })
    }

    /// The open-loop schedule and spin, if any.
    fn schedule(&self) -> Option<(Schedule, Duration)> {
        self.rate.map(|rate| (Schedule::new(rate), self.spin))
    }

    /// For a report's title: linger, schedule, length and warm-up.
    fn describe(&self, records: u64) -> String {
        let mut text = format!("linger {} ms", self.linger().as_secs_f64() * 1000.0);
        if let Some(rate) = self.rate {
            text.push_str(&format!(", {rate} records/s on a fixed schedule"));
        }
        match self.duration {
            Some(duration) => text.push_str(&format!(", for {duration:?}")),
            None => text.push_str(&format!(", {records} records")),
        }
        if !self.warmup.is_zero() {
            text.push_str(&format!(" after a {:?} warm-up", self.warmup));
        }
        text
    }

    /// Records the run will send, warm-up included, for the progress line (a guess for a
    /// timed run on no schedule).
    fn expected(&self, records: u64) -> u64 {
        let seconds = |d: Duration| d.as_secs_f64();
        let warmup = self.rate.map_or(0.0, |rate| rate * seconds(self.warmup));
        let measured = match self.duration {
            Some(duration) => self.rate.map_or(0.0, |rate| rate * seconds(duration)),
            None => records as f64,
        };
        (warmup + measured) as u64
    }

    /// What a person should know about these settings' effect on the figures.
    fn notes(&self) -> Vec<String> {
        let linger = self.linger();
        if self.rate.is_some() && !linger.is_zero() {
            vec![format!(
                "a {linger:?} linger adds up to {linger:?} to each record's latency; \
                 open-loop latency runs usually want --linger 0"
            )]
        } else {
            Vec::new()
        }
    }

    /// The JSON fields that describe the pace.
    fn fields(&self) -> serde_json::Value {
        serde_json::json!({
            "rate": self.rate,
            "linger_ms": self.linger().as_secs_f64() * 1000.0,
            "warmup_s": self.warmup.as_secs_f64(),
            "duration_s": self.duration.map(|d| d.as_secs_f64()),
            "spin_us": self.rate.map(|_| micros(self.spin)),
        })
    }
}

/// Adds `extra`'s fields to `object`.
fn merged(mut object: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(object), serde_json::Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
    object
}

/// Latencies are recorded in microseconds, up to ten minutes.
const LATENCY_MAX_US: u64 = 600_000_000;

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

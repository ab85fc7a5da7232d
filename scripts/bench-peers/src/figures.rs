//! Latency histograms and the JSON figures `floe bench publish --json` prints.

use std::time::Duration;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Latencies are recorded in microseconds, up to ten minutes.
pub fn new_histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 600_000_000, 3).context("creating a latency histogram")
}

pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// p50, p99, p999 and max in ms, as `floe bench` prints them.
pub fn percentiles_ms(histogram: &Histogram<u64>) -> Value {
    let ms = |us: u64| us as f64 / 1000.0;
    json!({
        "p50": ms(histogram.value_at_quantile(0.5)),
        "p99": ms(histogram.value_at_quantile(0.99)),
        "p999": ms(histogram.value_at_quantile(0.999)),
        "max": ms(histogram.max()),
    })
}

/// p50, p99 and p999 in µs.
pub fn percentiles_us(histogram: &Histogram<u64>) -> Value {
    json!({
        "p50": histogram.value_at_quantile(0.5),
        "p99": histogram.value_at_quantile(0.99),
        "p999": histogram.value_at_quantile(0.999),
        "max": histogram.max(),
    })
}

/// Parses `1024`, `1KiB` or `4MiB`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("`{other}` is not a size unit (B, KiB, MiB, GiB)")),
    };
    digits
        .parse::<u64>()
        .map(|n| n * scale)
        .map_err(|e| format!("`{text}` is not a size: {e}"))
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}` is not a duration: {e}"))
}

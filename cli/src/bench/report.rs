//! The figures of one bench run, printed for people or as one JSON object.

use std::time::Duration;

use anyhow::Result;
use hdrhistogram::Histogram;
use serde_json::json;

use crate::output::{print, print_json};

/// The figures of one run. Throughput and latency cover the measured records only (not the
/// warm-up).
#[derive(Debug)]
pub(crate) struct Report {
    pub title: String,
    pub latency_label: &'static str,
    pub records: u64,
    pub bytes: u64,
    /// From the end of the warm-up to the last measured record's acknowledgement (or
    /// arrival, for consuming).
    pub elapsed: Duration,
    /// µs.
    pub latency: Histogram<u64>,
    /// On a fixed schedule: how late the load generator handed each record to its producer,
    /// µs. Part of the latency above; large values mean the generator, not the broker, fell
    /// behind (or the producer's buffer was full).
    pub lag: Option<Histogram<u64>>,
    /// Lines printed under the figures for people.
    pub notes: Vec<String>,
}

/// p50, p99, p999 and max of a histogram of µs, in ms.
fn percentiles_ms(histogram: &Histogram<u64>) -> [f64; 4] {
    let ms = |us: u64| us as f64 / 1000.0;
    [
        ms(histogram.value_at_quantile(0.5)),
        ms(histogram.value_at_quantile(0.99)),
        ms(histogram.value_at_quantile(0.999)),
        ms(histogram.max()),
    ]
}

impl Report {
    pub fn print(&self, json: bool, mut fields: serde_json::Value) -> Result<()> {
        let seconds = self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let mb_per_s = self.bytes as f64 / 1e6 / seconds;
        let records_per_s = self.records as f64 / seconds;
        let [p50, p99, p999, max] = percentiles_ms(&self.latency);
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
                        "p50": p50, "p99": p99, "p999": p999, "max": max,
                    }),
                );
                let lag = self.lag.as_ref().map(|lag| {
                    let [p50, p99, p999, max] = percentiles_ms(lag);
                    json!({"p50": p50, "p99": p99, "p999": p999, "max": max})
                });
                object.insert("send_lag_ms".into(), json!(lag));
            }
            print_json(&fields)?;
            return Ok(());
        }
        let mut text = format!(
            "{}\n  throughput  {mb_per_s:.1} MB/s  {records_per_s:.0} records/s  ({seconds:.2} s)\n  \
             latency     {}: p50 {p50:.3} ms  p99 {p99:.3} ms  p999 {p999:.3} ms  max {max:.3} ms\n",
            self.title, self.latency_label,
        );
        if let Some(lag) = &self.lag {
            let [p50, p99, p999, max] = percentiles_ms(lag);
            text.push_str(&format!(
                "  send lag    intended send to handed to the producer (the load generator's own \
                 lateness, part of the latency): p50 {p50:.3} ms  p99 {p99:.3} ms  p999 {p999:.3} ms  \
                 max {max:.3} ms\n"
            ));
        }
        for note in &self.notes {
            text.push_str(&format!("  note: {note}\n"));
        }
        print(&text)?;
        Ok(())
    }
}

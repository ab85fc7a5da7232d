//! Latency samples: an HDR histogram in nanoseconds, reported as percentiles in µs.

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::BenchResult;
use crate::report::Json;

pub fn new_histogram() -> BenchResult<Histogram<u64>> {
    // Nanoseconds, 1 ns to 60 s, three significant digits.
    Ok(Histogram::new_with_bounds(1, 60_000_000_000, 3)?)
}

pub fn elapsed_nanos(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Records the duration of `samples` calls of `op`, fewer if `deadline` passes.
pub fn sample(
    histogram: &mut Histogram<u64>,
    samples: usize,
    deadline: Instant,
    op: &mut dyn FnMut() -> BenchResult<()>,
) -> BenchResult<()> {
    for _ in 0..samples {
        let start = Instant::now();
        if start >= deadline {
            break;
        }
        op()?;
        histogram.saturating_record(elapsed_nanos(start));
    }
    Ok(())
}

/// Percentiles of a latency histogram, in microseconds.
pub struct Percentiles {
    pub samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        let us = |nanos: u64| nanos as f64 / 1000.0;
        Percentiles {
            samples: h.len(),
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }

    pub fn json(&self, prefix: &str, out: &mut Json) {
        out.number(&format!("{prefix}_samples"), self.samples as f64, 0);
        out.number(&format!("{prefix}_p50_us"), self.p50_us, 1);
        out.number(&format!("{prefix}_p99_us"), self.p99_us, 1);
        out.number(&format!("{prefix}_p999_us"), self.p999_us, 1);
        out.number(&format!("{prefix}_max_us"), self.max_us, 1);
    }
}

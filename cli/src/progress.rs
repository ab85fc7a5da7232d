//! A one-line progress display on stderr for long runs, drawn only when stderr is a
//! terminal, so logs and pipes stay clean.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// Redraws `label: done/total` four times a second until finished.
#[derive(Debug)]
pub struct Progress {
    task: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing, if stderr is a terminal. `done` is read, never written.
    pub fn start(label: &'static str, total: u64, done: Arc<AtomicU64>) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { task: None };
        }
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let text = line(
                    label,
                    done.load(Ordering::Relaxed),
                    total,
                    started.elapsed(),
                );
                let mut stderr = std::io::stderr().lock();
                let _ = write!(stderr, "\r\x1b[2K{text}");
                let _ = stderr.flush();
            }
        });
        Progress { task: Some(task) }
    }

    /// Stops drawing and clears the line.
    pub fn finish(self) {
        if let Some(task) = self.task {
            task.abort();
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
    }
}

/// The progress text: count, percentage and rate.
pub fn line(label: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let percent = if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    };
    let rate = if elapsed.is_zero() {
        0.0
    } else {
        done as f64 / elapsed.as_secs_f64()
    };
    format!("{label}: {done}/{total} records ({percent:.0}%), {rate:.0} records/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_count_share_and_rate() {
        assert_eq!(
            line("publish", 250, 1000, Duration::from_secs(2)),
            "publish: 250/1000 records (25%), 125 records/s"
        );
        assert_eq!(
            line("consume", 0, 0, Duration::ZERO),
            "consume: 0/0 records (100%), 0 records/s"
        );
    }
}

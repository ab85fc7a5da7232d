//! [`SyncActivity`]: the `fdatasync`s running in every log that shares it, and when the last
//! one ended. Logs on one disk share one, so that background work on that disk (uploading
//! sealed segments to a local directory, reading them for an upload) can wait for a pause
//! in the syncs producers are waiting on instead of queueing its transfers and cache
//! flushes ahead of them.
//!
//! Waiting is bounded: background work is delayed, never stopped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Syncs running and the end of the last one, shared by the logs of one disk.
#[derive(Debug, Default)]
pub struct SyncActivity {
    state: Mutex<Activity>,
    ended: Condvar,
    waited_nanos: AtomicU64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Activity {
    running: usize,
    last_end: Option<Instant>,
}

/// When background I/O may start, a pure function of the syncs at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// No sync has run for `quiet`: go.
    Now,
    /// The last sync ended less than `quiet` ago: ask again at this instant.
    At(Instant),
    /// A sync is running: ask again when one ends.
    AfterSync,
}

fn pause(activity: Activity, now: Instant, quiet: Duration) -> Pause {
    if activity.running > 0 {
        return Pause::AfterSync;
    }
    match activity.last_end {
        Some(end) if now < end + quiet => Pause::At(end + quiet),
        _ => Pause::Now,
    }
}

/// Held while one `fdatasync` runs; see [`SyncActivity::begin`].
#[derive(Debug)]
#[must_use]
pub struct Syncing<'a>(&'a SyncActivity);

impl Drop for Syncing<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.running = s.running.saturating_sub(1);
        s.last_end = Some(Instant::now());
        drop(s);
        self.0.ended.notify_all();
    }
}

impl SyncActivity {
    pub fn new() -> SyncActivity {
        SyncActivity::default()
    }

    fn lock(&self) -> MutexGuard<'_, Activity> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks a sync as running until the guard drops.
    pub fn begin(&self) -> Syncing<'_> {
        self.lock().running += 1;
        Syncing(self)
    }

    /// Blocks until no sync has run for `quiet`, or for at most `max_wait`; returns how long
    /// it waited. Blocking: call it from a thread that may block (a blocking task).
    pub fn wait_for_pause(&self, quiet: Duration, max_wait: Duration) -> Duration {
        let started = Instant::now();
        let deadline = started + max_wait;
        let mut s = self.lock();
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let until = match pause(*s, now, quiet) {
                Pause::Now => break,
                Pause::At(at) => at.min(deadline),
                Pause::AfterSync => deadline,
            };
            s = self
                .ended
                .wait_timeout(s, until.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(s);
        let waited = started.elapsed();
        self.waited_nanos.fetch_add(
            u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        waited
    }

    /// Total time [`SyncActivity::wait_for_pause`] has waited, over every caller.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited_nanos.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_running_sync_holds_background_io_until_it_ends() {
        let now = Instant::now();
        let running = Activity {
            running: 1,
            last_end: Some(now - 50 * MS),
        };
        assert_eq!(pause(running, now, 10 * MS), Pause::AfterSync);
    }

    #[test]
    fn background_io_waits_out_the_quiet_time_after_the_last_sync() {
        let now = Instant::now();
        let recent = Activity {
            running: 0,
            last_end: Some(now - 3 * MS),
        };
        assert_eq!(pause(recent, now, 10 * MS), Pause::At(now + 7 * MS));
        assert_eq!(pause(recent, now + 7 * MS, 10 * MS), Pause::Now);
        assert_eq!(pause(Activity::default(), now, 10 * MS), Pause::Now);
    }

    #[test]
    fn waiting_is_bounded_while_syncs_keep_running() {
        let activity = SyncActivity::new();
        let syncing = activity.begin();
        let waited = activity.wait_for_pause(MS, 30 * MS);
        assert!(waited >= 30 * MS, "waited only {waited:?}");
        drop(syncing);
        assert!(activity.waited() >= 30 * MS);
    }

    #[test]
    fn the_end_of_a_sync_wakes_a_waiter_after_the_quiet_time() {
        let activity = std::sync::Arc::new(SyncActivity::new());
        let syncing = activity.begin();
        let waiter = {
            let activity = activity.clone();
            std::thread::spawn(move || activity.wait_for_pause(5 * MS, Duration::from_secs(30)))
        };
        std::thread::sleep(20 * MS);
        drop(syncing);
        let waited = waiter.join().expect("waiter");
        assert!(
            waited >= 20 * MS && waited < Duration::from_secs(30),
            "waited {waited:?}"
        );
    }
}

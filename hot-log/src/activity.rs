//! [`SyncActivity`]: the `fdatasync`s running in every log that shares it, how busy they
//! have kept the disk lately, and when the last one ended. Logs on one disk share one, so
//! that background work on that disk (uploading sealed segments to a local directory,
//! reading them for an upload) can wait for a pause in the syncs producers are waiting on
//! instead of queueing its transfers and cache flushes ahead of them.
//!
//! Only a busy disk makes background work wait: while syncs have run less than a given
//! share of the last ~100 ms, it goes at once. Waiting is bounded: background work is
//! delayed, never stopped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The time constant of [`SyncActivity`]'s busy share: syncs further back than a few of
/// these no longer count.
pub const BUSY_WINDOW: Duration = Duration::from_millis(100);

/// Syncs running, their recent busy share and the end of the last one, shared by the logs
/// of one disk.
#[derive(Debug, Default)]
pub struct SyncActivity {
    state: Mutex<Activity>,
    ended: Condvar,
    waited_nanos: AtomicU64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Activity {
    running: usize,
    last_end: Option<Instant>,
    /// The share of recent time some sync was running, an exponential average over
    /// [`BUSY_WINDOW`], as of `level_at`: the last time the syncs went from none running
    /// to some, or back.
    level: f64,
    level_at: Option<Instant>,
}

impl Activity {
    /// The busy share at `now`: `level` decayed since `level_at`, plus, while syncs run,
    /// the time since they began.
    fn busy_share(&self, now: Instant) -> f64 {
        let elapsed = self
            .level_at
            .map_or(Duration::MAX, |at| now.saturating_duration_since(at));
        let decay = (-elapsed.as_secs_f64() / BUSY_WINDOW.as_secs_f64()).exp();
        match self.running {
            0 => self.level * decay,
            _ => self.level * decay + (1.0 - decay),
        }
    }

    /// Folds the time since `level_at` into `level`, as of `now`.
    fn settle(&mut self, now: Instant) {
        self.level = self.busy_share(now);
        self.level_at = Some(now);
    }

    fn begin(&mut self, now: Instant) {
        if self.running == 0 {
            self.settle(now);
        }
        self.running += 1;
    }

    fn end(&mut self, now: Instant) {
        if self.running == 1 {
            self.settle(now);
        }
        self.running = self.running.saturating_sub(1);
        self.last_end = Some(now);
    }
}

/// When background I/O may start, a pure function of the syncs at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// The disk is not busy with syncs, or none has run for `quiet`: go.
    Now,
    /// The last sync ended less than `quiet` ago: ask again at this instant.
    At(Instant),
    /// A sync is running: ask again when one ends.
    AfterSync,
}

/// `busy`: the busy share below which nothing waits.
fn pause(activity: &Activity, now: Instant, quiet: Duration, busy: f64) -> Pause {
    if activity.busy_share(now) < busy {
        return Pause::Now;
    }
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
        self.0.lock().end(Instant::now());
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
        self.lock().begin(Instant::now());
        Syncing(self)
    }

    /// Blocks while syncs have kept the disk busy at least `busy` of the time lately (0 to
    /// 1; see [`BUSY_WINDOW`]) until none has run for `quiet`, or for at most `max_wait`;
    /// returns how long it waited. Blocking: call it from a thread that may block.
    pub fn wait_for_pause(&self, quiet: Duration, busy: f64, max_wait: Duration) -> Duration {
        let started = Instant::now();
        let deadline = started + max_wait;
        let mut s = self.lock();
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let until = match pause(&s, now, quiet, busy) {
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

    /// An activity that was syncing from `start` for `busy`, then idle until `now`.
    fn after(start: Instant, busy: Duration, running: bool) -> Activity {
        let mut a = Activity::default();
        a.begin(start);
        if !running {
            a.end(start + busy);
        }
        a
    }

    #[test]
    fn a_long_running_sync_holds_background_io_until_it_ends() {
        let t = Instant::now();
        let a = after(t, Duration::ZERO, true);
        assert!(a.busy_share(t + 300 * MS) > 0.9);
        assert_eq!(pause(&a, t + 300 * MS, 10 * MS, 0.5), Pause::AfterSync);
    }

    #[test]
    fn short_syncs_on_an_idle_disk_do_not_hold_background_io() {
        let t = Instant::now();
        let mut a = Activity::default();
        // A 1 ms sync every 10 ms for a second: busy a tenth of the time.
        for i in 0..100 {
            a.begin(t + 10 * MS * i);
            a.end(t + 10 * MS * i + MS);
        }
        let now = t + 10 * MS * 99 + 2 * MS;
        let share = a.busy_share(now);
        assert!(share > 0.05 && share < 0.2, "{share}");
        assert_eq!(pause(&a, now, 10 * MS, 0.5), Pause::Now);
        a.begin(now);
        assert_eq!(pause(&a, now + MS, 10 * MS, 0.5), Pause::Now);
    }

    #[test]
    fn after_a_busy_spell_background_io_waits_out_the_quiet_time() {
        let t = Instant::now();
        let a = after(t, 500 * MS, false);
        let end = t + 500 * MS;
        assert_eq!(
            pause(&a, end + 3 * MS, 10 * MS, 0.5),
            Pause::At(end + 10 * MS)
        );
        assert_eq!(pause(&a, end + 10 * MS, 10 * MS, 0.5), Pause::Now);
        // Long after, the spell no longer counts.
        assert!(a.busy_share(end + 500 * MS) < 0.01);
    }

    #[test]
    fn a_busy_share_of_zero_makes_every_running_sync_count() {
        let t = Instant::now();
        let a = after(t, Duration::ZERO, true);
        assert_eq!(pause(&a, t, 10 * MS, 0.0), Pause::AfterSync);
        assert_eq!(pause(&Activity::default(), t, 10 * MS, 0.0), Pause::Now);
    }

    #[test]
    fn waiting_is_bounded_while_syncs_keep_running() {
        let activity = SyncActivity::new();
        let syncing = activity.begin();
        let waited = activity.wait_for_pause(MS, 0.0, 30 * MS);
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
            std::thread::spawn(move || {
                activity.wait_for_pause(5 * MS, 0.0, Duration::from_secs(30))
            })
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

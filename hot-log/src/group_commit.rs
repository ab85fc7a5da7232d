//! When to `fdatasync`: the group-commit policy, a pure function of the pending writes and
//! the clock. No I/O and no clock reads here; the syncer thread passes `now` in.
//!
//! With the default `max_wait` of zero the log syncs as soon as anything is pending and no
//! sync is running. Batching then comes from the sync itself: every append that lands while
//! one `fdatasync` runs is covered by the next, so N concurrent appenders share one sync and
//! a lone appender pays for exactly one. A positive `max_wait` trades latency for fewer,
//! larger syncs: the log waits until `max_bytes` are pending or the oldest pending write has
//! waited `max_wait`.

use std::time::{Duration, Instant};

/// The group-commit policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitPolicy {
    /// Longest an appended byte waits for its sync to start.
    pub max_wait: Duration,
    /// Pending bytes that start a sync at once, whatever `max_wait` says.
    pub max_bytes: u64,
}

impl Default for GroupCommitPolicy {
    fn default() -> Self {
        GroupCommitPolicy {
            max_wait: Duration::ZERO,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Writes that are in the page cache but not yet synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pending {
    /// Bytes written since the last sync started.
    pub bytes: u64,
    /// When the oldest of them was written; `None` when nothing is pending.
    pub oldest: Option<Instant>,
}

/// What the syncer should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum SyncDecision {
    /// Nothing is pending: sleep until an append arrives.
    Idle,
    /// Something is pending; sleep until this instant (or an append) and ask again.
    WaitUntil(Instant),
    /// Start an `fdatasync` covering everything written so far.
    SyncNow,
}

impl GroupCommitPolicy {
    /// Decides, given what is pending at `now`. Call again after every append and wake-up.
    pub fn decide(&self, pending: Pending, now: Instant) -> SyncDecision {
        let Some(oldest) = pending.oldest else {
            return SyncDecision::Idle;
        };
        if pending.bytes == 0 {
            return SyncDecision::Idle;
        }
        if pending.bytes >= self.max_bytes {
            return SyncDecision::SyncNow;
        }
        let deadline = oldest + self.max_wait;
        if now >= deadline {
            SyncDecision::SyncNow
        } else {
            SyncDecision::WaitUntil(deadline)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn pending(bytes: u64, oldest: Instant) -> Pending {
        Pending {
            bytes,
            oldest: Some(oldest),
        }
    }

    #[test]
    fn nothing_pending_is_idle() {
        let policy = GroupCommitPolicy::default();
        assert_eq!(
            policy.decide(Pending::default(), Instant::now()),
            SyncDecision::Idle
        );
    }

    #[test]
    fn default_policy_syncs_the_first_pending_byte_at_once() {
        let now = Instant::now();
        let policy = GroupCommitPolicy::default();
        assert_eq!(policy.decide(pending(1, now), now), SyncDecision::SyncNow);
    }

    #[test]
    fn positive_wait_holds_small_writes_until_the_deadline() {
        let t0 = Instant::now();
        let policy = GroupCommitPolicy {
            max_wait: 2 * MS,
            max_bytes: 1 << 20,
        };
        assert_eq!(
            policy.decide(pending(100, t0), t0 + MS),
            SyncDecision::WaitUntil(t0 + 2 * MS)
        );
        assert_eq!(
            policy.decide(pending(100, t0), t0 + 2 * MS),
            SyncDecision::SyncNow
        );
    }

    #[test]
    fn enough_bytes_sync_before_the_deadline() {
        let t0 = Instant::now();
        let policy = GroupCommitPolicy {
            max_wait: 10 * MS,
            max_bytes: 1000,
        };
        assert_eq!(
            policy.decide(pending(999, t0), t0),
            SyncDecision::WaitUntil(t0 + 10 * MS)
        );
        assert_eq!(policy.decide(pending(1000, t0), t0), SyncDecision::SyncNow);
    }

    #[test]
    fn the_deadline_counts_from_the_oldest_write() {
        let t0 = Instant::now();
        let policy = GroupCommitPolicy {
            max_wait: 5 * MS,
            max_bytes: u64::MAX,
        };
        // A write 4 ms after the oldest does not push the deadline out.
        assert_eq!(
            policy.decide(pending(10, t0), t0 + 4 * MS),
            SyncDecision::WaitUntil(t0 + 5 * MS)
        );
    }
}

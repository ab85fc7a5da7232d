//! The syncer thread: runs `fdatasync` when the group-commit policy says so and publishes
//! how far the log is durable. Never retries a failed sync.

use std::time::Instant;

use crate::LogError;
use crate::group_commit::{Pending, SyncDecision};

use super::{Shared, add_stat};

pub(super) fn run(shared: &Shared) {
    let policy = shared.config.group_commit;
    let mut s = shared.sync_state();
    loop {
        let now = Instant::now();
        let decision = if shared.failure.get().is_some() {
            SyncDecision::Idle
        } else {
            match policy.decide(s.pending, now) {
                // Closing: sync what is pending without waiting for company.
                SyncDecision::WaitUntil(_) if s.shutdown => SyncDecision::SyncNow,
                decision => decision,
            }
        };
        match decision {
            SyncDecision::Idle if s.shutdown => return,
            SyncDecision::Idle => {
                s = shared.work.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            SyncDecision::WaitUntil(deadline) => {
                let timeout = deadline.saturating_duration_since(now);
                s = shared
                    .work
                    .wait_timeout(s, timeout)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            SyncDecision::SyncNow => {
                let target = s.written;
                let truncations = s.truncations;
                let file = s.file.clone();
                let bytes = s.pending.bytes;
                s.pending = Pending::default();
                drop(s);
                let started = Instant::now();
                let result = file.sync_data();
                let took = started.elapsed();
                add_stat(&shared.stats.sync_nanos, took.as_nanos() as u64);
                if let Some(observer) = &shared.config.sync_observer {
                    (observer.0)(took);
                }
                add_stat(&shared.stats.syncs, 1);
                match result {
                    Ok(()) => {
                        add_stat(&shared.stats.synced_bytes, bytes);
                        s = shared.sync_state();
                        // A truncation during the sync changed what the offsets hold.
                        if s.truncations == truncations && target > s.synced {
                            s.synced = target;
                        }
                        shared.publish(&s);
                    }
                    Err(source) => {
                        let error = LogError::Io {
                            op: "fdatasync",
                            path: shared.dir.clone(),
                            source,
                        };
                        shared.fail(&error);
                        s = shared.sync_state();
                    }
                }
            }
        }
    }
}

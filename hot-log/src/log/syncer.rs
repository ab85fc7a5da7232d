//! The syncer thread: runs `fdatasync` when the group-commit policy says so and publishes
//! how far the log is durable. Never retries a failed sync. After a sync it has the chores
//! thread release from the page cache what lies more than a window behind the synced end.

use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use crate::LogError;
use crate::group_commit::{Pending, SyncDecision};
use crate::storage::StorageFile;

use super::chores::Chore;
use super::{CacheRelease, Shared, SyncState, add_stat};

/// Page-cache releases are page-aligned and at least this large (one `fadvise` per step).
const RELEASE_STEP: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// What to release after a sync that started with `truncations` done and made `file`
/// durable up to `synced_bytes`, keeping the newest `window` bytes cached; updates what `s`
/// tracks as released.
fn plan_release(
    s: &mut SyncState,
    file: &Arc<dyn StorageFile>,
    synced_bytes: u64,
    truncations: u64,
    window: Option<u64>,
) -> Vec<CacheRelease> {
    let mut out = Vec::new();
    // A roll, truncation or reset during the sync changed the file or its positions.
    let unchanged = s.truncations == truncations && Arc::ptr_eq(&s.file, file);
    let Some(window) = window.filter(|_| unchanged) else {
        return out;
    };
    if synced_bytes >= window
        && let Some(previous) = s.previous.take()
    {
        out.push(previous);
    }
    let keep_from = synced_bytes.saturating_sub(window) / PAGE * PAGE;
    if keep_from >= s.cached_from + RELEASE_STEP {
        out.push((file.clone(), s.cached_from, keep_from - s.cached_from));
        s.cached_from = keep_from;
    }
    out
}

pub(super) fn run(shared: &Shared) {
    let mut s = shared.sync_state();
    loop {
        let now = Instant::now();
        match decide(shared, &s, now) {
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
            SyncDecision::SyncNow => s = sync_now(shared, s),
        }
    }
}

/// What the syncer does next: nothing once the log failed, else what the group-commit policy
/// says about what is pending.
fn decide(shared: &Shared, s: &SyncState, now: Instant) -> SyncDecision {
    if shared.failure.get().is_some() {
        return SyncDecision::Idle;
    }
    match shared.config.group_commit.decide(s.pending, now) {
        // Closing: sync what is pending without waiting for company.
        SyncDecision::WaitUntil(_) if s.shutdown => SyncDecision::SyncNow,
        decision => decision,
    }
}

/// Syncs everything written so far, then publishes the new synced end (or fails the log).
/// Called with the sync state locked; unlocks it for the sync and returns it locked again.
fn sync_now<'a>(shared: &'a Shared, mut s: MutexGuard<'a, SyncState>) -> MutexGuard<'a, SyncState> {
    let target = s.written;
    let target_bytes = s.written_bytes;
    let truncations = s.truncations;
    let file = s.file.clone();
    let bytes = s.pending.bytes;
    s.pending = Pending::default();
    drop(s);
    match timed_sync(shared, file.as_ref()) {
        Ok(()) => {
            add_stat(&shared.stats.synced_bytes, bytes);
            s = shared.sync_state();
            // A truncation during the sync changed what the offsets hold.
            if s.truncations == truncations && target > s.synced {
                s.synced = target;
            }
            shared.publish(&s);
            let releases = plan_release(
                &mut s,
                &file,
                target_bytes,
                truncations,
                shared.config.page_cache_bytes,
            );
            // Off this thread: the next sync must not wait for them.
            for release in releases {
                shared.add_chore(Chore::Release(release));
            }
            s
        }
        Err(source) => {
            let error = LogError::Io {
                op: "fdatasync",
                path: shared.dir.clone(),
                source,
            };
            shared.fail(&error);
            shared.sync_state()
        }
    }
}

/// Runs `fdatasync` on `file`, reporting it as sync activity and counting it and its time.
fn timed_sync(shared: &Shared, file: &dyn StorageFile) -> std::io::Result<()> {
    let started = Instant::now();
    let syncing = shared.config.sync_activity.as_ref().map(|a| a.begin());
    let result = file.sync_data();
    drop(syncing);
    let took = started.elapsed();
    add_stat(&shared.stats.sync_nanos, took.as_nanos() as u64);
    if let Some(observer) = &shared.config.sync_observer {
        (observer.0)(took);
    }
    add_stat(&shared.stats.syncs, 1);
    result
}

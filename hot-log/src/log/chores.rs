//! Chores: work the log owes but nothing waits for, done by a thread of its own so that
//! neither the writer (every append waits while it holds its lock) nor the syncer (every
//! acknowledgement waits for its next `fdatasync`) does it.
//!
//! - The state files a roll leaves: the sealed segment's index and the producers' snapshot
//!   at its end. Neither is needed for what is acknowledged: a missing index is rebuilt by
//!   scanning the segment when the log opens, and without the snapshot recovery replays
//!   from an older one (or from the log start).
//! - Page-cache releases of synced data (see [`crate::LogConfig::page_cache_bytes`]).
//!
//! What must not happen is a chore landing after an operation that removes files: a
//! snapshot above a truncation point, or an index of a segment retention deleted. Each such
//! operation first calls [`Shared::finish_chores`] under the writer's lock, which runs what
//! is queued and waits for the chore in hand; a roll queues only under the same lock, so
//! nothing queued before the operation lands after it.
//!
//! The thread is started by the first chore and ends after a second without any, or when
//! the log closes; it holds the log only while it runs a chore.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use floe_wire::Offset;

use crate::producer_state::PRODUCERS_MAGIC;
use crate::segment::Segment;
use crate::state_file;

use super::{CacheRelease, Shared};

/// How long the chores thread waits for more work before it ends.
const IDLE: Duration = Duration::from_secs(1);

pub(crate) enum Chore {
    /// Write the index of `segment`, just sealed, and the producers' `snapshot` (encoded)
    /// at its end, `next`.
    Sealed {
        segment: Arc<Segment>,
        next: Offset,
        snapshot: Vec<u8>,
    },
    /// Drop a synced range from the page cache.
    Release(CacheRelease),
}

impl std::fmt::Debug for Chore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Chore::Sealed { segment, .. } => write!(f, "Sealed({})", segment.base),
            Chore::Release((_, position, len)) => write!(f, "Release({position}+{len})"),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Chores {
    queue: Mutex<Queue>,
    /// Wakes the thread.
    wake: Condvar,
    /// Held while a chore runs, by the thread or by [`Shared::finish_chores`].
    running: Mutex<()>,
    /// The log, for the thread to start with; set once the log is shared.
    log: std::sync::OnceLock<Weak<Shared>>,
}

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<Chore>,
    /// A thread is running (or starting).
    thread: bool,
    closed: bool,
}

impl Chores {
    /// Lets chores start their thread for `log`.
    pub(crate) fn attach(&self, log: &Arc<Shared>) {
        let _ = self.log.set(Arc::downgrade(log));
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn running(&self) -> MutexGuard<'_, ()> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Shared {
    /// Queues `chore` for the chores thread, starting it if none runs. Once the log is
    /// closed (or when no thread can be started) the chore is done here and now.
    pub(crate) fn add_chore(&self, chore: Chore) {
        let mut q = self.chores.queue();
        if q.closed {
            drop(q);
            self.run_chore(chore);
            return;
        }
        q.pending.push_back(chore);
        if q.thread {
            drop(q);
            self.chores.wake.notify_one();
            return;
        }
        let Some(log) = self.chores.log.get().cloned() else {
            drop(q);
            self.finish_chores();
            return;
        };
        q.thread = true;
        drop(q);
        let chores = self.chores.clone();
        let started = std::thread::Builder::new()
            .name("floe-log-chores".into())
            .spawn(move || work(&chores, &log));
        if let Err(error) = started {
            tracing::warn!(dir = %self.dir.display(), %error, "no thread for the log's chores; doing them in place");
            self.chores.queue().thread = false;
            self.finish_chores();
        }
    }

    /// Runs every queued chore and waits for the one in hand: after it returns, no chore
    /// queued before it touches the files. Call with the writer's lock held (so that no roll
    /// queues more meanwhile) before removing files.
    pub(crate) fn finish_chores(&self) {
        let _running = self.chores.running();
        let pending = std::mem::take(&mut self.chores.queue().pending);
        pending.into_iter().for_each(|chore| self.run_chore(chore));
    }

    /// Finishes the chores and ends the thread; later chores are done in place.
    pub(crate) fn close_chores(&self) {
        self.chores.queue().closed = true;
        self.chores.wake.notify_all();
        self.finish_chores();
    }

    fn run_chore(&self, chore: Chore) {
        match chore {
            Chore::Sealed {
                segment,
                next,
                snapshot,
            } => {
                if let Err(error) = segment.write_index(self.storage.as_ref(), &self.dir) {
                    tracing::warn!(dir = %self.dir.display(), base = %segment.base, %error, "could not write a sealed segment's index; it is rebuilt when the log opens");
                }
                if let Err(error) = self.write_snapshot_file(next, &snapshot) {
                    tracing::warn!(dir = %self.dir.display(), at = %next, %error, "could not write the producers' snapshot; recovery replays from an older one");
                }
            }
            Chore::Release(release) => self.release_cache(release),
        }
    }

    fn write_snapshot_file(&self, at: Offset, encoded: &[u8]) -> Result<(), crate::LogError> {
        state_file::write_framed(
            self.storage.as_ref(),
            &self.dir,
            &Self::producer_snapshot_name(at),
            PRODUCERS_MAGIC,
            encoded,
        )
    }
}

/// The chores thread: runs chores as they come, until the log closes or goes away, or a
/// second passes without any.
fn work(chores: &Chores, log: &Weak<Shared>) {
    loop {
        {
            let mut q = chores.queue();
            while q.pending.is_empty() {
                if q.closed {
                    q.thread = false;
                    return;
                }
                let (guard, waited) = chores
                    .wake
                    .wait_timeout(q, IDLE)
                    .unwrap_or_else(|e| e.into_inner());
                q = guard;
                if waited.timed_out() && q.pending.is_empty() {
                    q.thread = false;
                    return;
                }
            }
        }
        // Taken before the chore leaves the queue: `finish_chores` either runs it itself or
        // waits for it here.
        let running = chores.running();
        let chore = chores.queue().pending.pop_front();
        match (chore, log.upgrade()) {
            (Some(chore), Some(shared)) => shared.run_chore(chore),
            (_, None) => {
                chores.queue().thread = false;
                return;
            }
            (None, Some(_)) => {}
        }
        drop(running);
    }
}

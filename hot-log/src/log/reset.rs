//! Reset: dropping the whole log and starting it again, empty, at an offset. Replication resets
//! a follower this way when its leader can no longer send what would join the follower's log
//! (the leader's local log starts above where the two agree, and everything below that start
//! is committed and in object storage).
//!
//! A reset is all or nothing across a crash: a `reset` marker naming the new start is written
//! first; opening a log that holds the marker finishes the reset before anything else.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use floe_wire::Offset;

use crate::LogError;
use crate::epoch_history::{EPOCH_FILE, EpochHistory};
use crate::group_commit::Pending;
use crate::producer_state::ProducerState;
use crate::segment::{self, INDEX_EXT, LOG_EXT, Segment};
use crate::state_file;
use crate::storage::Storage;

use super::truncation::remove_if_exists;
use super::{HIGH_WATERMARK_FILE, Log, Shared, Writer, open};

/// The marker of a reset in progress.
const RESET_FILE: &str = "reset";
const RESET_MAGIC: [u8; 4] = *b"FLRS";

impl Log {
    /// Drops every record and starts the log again, empty, at `start`: the next append
    /// gets offset `start`. The epoch history, producer state and high watermark go too (the
    /// high watermark becomes `start`). Durable when it returns. Waiters fail.
    pub fn reset(&self, start: Offset) -> Result<(), LogError> {
        let shared = &self.shared;
        let mut w = shared.writer();
        shared.check_writable(&w)?;
        let result = reset_locked(shared, &mut w, start);
        if let Err(e) = &result
            && e.is_fatal()
        {
            shared.fail(e);
        }
        result
    }
}

fn reset_locked(shared: &Shared, w: &mut Writer, start: Offset) -> Result<(), LogError> {
    let storage = shared.storage.as_ref();
    let dir = &shared.dir;
    state_file::write_framed(
        storage,
        dir,
        RESET_FILE,
        RESET_MAGIC,
        &start.get().to_le_bytes(),
    )?;
    finish(storage, dir, start)?;
    let path = dir.join(segment::file_name(start, LOG_EXT));
    let file = storage
        .open(&path, false)
        .map_err(LogError::io("open", &path))?;
    let mut state = Segment::empty_state();
    state.next_offset = start;
    let active = Arc::new(Segment::new(start, path, file.clone(), state));
    *shared.segments.write().unwrap_or_else(|e| e.into_inner()) = vec![active.clone()];
    w.active = active;
    w.active_since = Instant::now();
    w.producers = ProducerState::default();
    w.epochs = EpochHistory::default();
    shared.write_high_watermark(w, start)?;
    {
        let mut s = shared.sync_state();
        s.written = start;
        s.synced = start;
        s.pending = Pending::default();
        s.file = file;
        s.truncations += 1;
        shared.publish(&s);
    }
    shared.end_tx.send_replace(start);
    tracing::info!(dir = %dir.display(), %start, "reset the log");
    Ok(())
}

/// Finishes a reset whose marker is in `dir`, if there is one (opening a log).
pub(super) fn recover(storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
    let Some(payload) = state_file::read_framed(storage, dir, RESET_FILE, RESET_MAGIC)? else {
        return Ok(());
    };
    let bytes: [u8; 8] = payload.try_into().map_err(|_| LogError::Corrupt {
        file: dir.join(RESET_FILE),
        position: 0,
        reason: "payload is not 8 bytes".into(),
    })?;
    let start = Offset::new(u64::from_le_bytes(bytes));
    tracing::warn!(dir = %dir.display(), %start, "finishing a reset interrupted by a crash");
    finish(storage, dir, start)
}

/// Removes every segment and state file, creates the empty segment at `start`, then removes
/// the marker.
fn finish(storage: &dyn Storage, dir: &Path, start: Offset) -> Result<(), LogError> {
    let listing = open::list(storage, dir)?;
    // Newest first: until the marker goes, a crash leaves a prefix the next open discards.
    for &base in listing.segments.iter().rev() {
        remove_if_exists(storage, &dir.join(segment::file_name(base, LOG_EXT)))?;
    }
    for &base in &listing.indexes {
        remove_if_exists(storage, &dir.join(segment::file_name(base, INDEX_EXT)))?;
    }
    for &at in &listing.snapshots {
        remove_if_exists(
            storage,
            &dir.join(segment::file_name(at, crate::producer_state::PRODUCERS_EXT)),
        )?;
    }
    remove_if_exists(storage, &dir.join(EPOCH_FILE))?;
    remove_if_exists(storage, &dir.join(HIGH_WATERMARK_FILE))?;
    let path = dir.join(segment::file_name(start, LOG_EXT));
    storage
        .open(&path, true)
        .map_err(LogError::io("create", &path))?;
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))?;
    remove_if_exists(storage, &dir.join(RESET_FILE))?;
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))?;
    Ok(())
}

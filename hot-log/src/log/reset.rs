//! Reset: dropping the whole log and starting it again, empty, at an offset. Replication resets
//! a follower this way when its leader can no longer send what would join the follower's log
//! (the leader's local log starts above where the two agree, and everything below that start
//! is committed and in object storage).
//!
//! A reset is all or nothing across a crash: a `reset` marker naming the new start (and the
//! epoch of the entry before it) is written first; opening a log that holds the marker
//! finishes the reset before anything else.
//!
//! The marker's payload is `u64 start`, then `u32 base_epoch` (absent in markers written
//! before the epoch was kept; read as 0, unknown).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use floe_wire::{LeaderEpoch, Offset};

use crate::LogError;
use crate::epoch_history::{EPOCH_FILE, EPOCH_MAGIC, EpochHistory};
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
    /// gets offset `start`. The producer state and high watermark go too (the high
    /// watermark becomes `start`); the epoch history keeps only `base_epoch`, the epoch of
    /// the entry just below `start` (recorded as starting at `start - 1`; 0: not known,
    /// nothing kept), so that the emptied log still tells how recent it is. Durable when it
    /// returns. Waiters fail.
    pub fn reset(&self, start: Offset, base_epoch: LeaderEpoch) -> Result<(), LogError> {
        let shared = &self.shared;
        let mut w = shared.writer();
        shared.check_writable(&w)?;
        let result = reset_locked(shared, &mut w, start, base_epoch);
        if let Err(e) = &result
            // A full disk part-way leaves it half done.
            && (e.is_fatal() || matches!(e, LogError::DiskFull { .. }))
        {
            shared.fail(e);
        }
        result
    }
}

fn reset_locked(
    shared: &Shared,
    w: &mut Writer,
    start: Offset,
    base_epoch: LeaderEpoch,
) -> Result<(), LogError> {
    // Nothing a roll left to write may land in the emptied log.
    shared.finish_chores();
    let storage = shared.storage.as_ref();
    let dir = &shared.dir;
    let mut marker = start.get().to_le_bytes().to_vec();
    marker.extend_from_slice(&base_epoch.get().to_le_bytes());
    state_file::write_framed(storage, dir, RESET_FILE, RESET_MAGIC, &marker)?;
    finish(storage, dir, start, base_epoch)?;
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
    w.epochs = base_history(start, base_epoch);
    // Held until the log end moved: a high watermark stored meanwhile is clamped to it.
    let mut stored = shared.high_watermark();
    shared.write_high_watermark(&mut stored, start)?;
    // The synced end never passes the log end: a reset forward raises the end first.
    if start > *shared.end_tx.borrow() {
        shared.end_tx.send_replace(start);
    }
    {
        let mut s = shared.sync_state();
        s.written = start;
        s.synced = start;
        s.pending = Pending::default();
        s.switch_file(file, 0);
        s.truncations += 1;
        shared.publish(&s);
    }
    shared.end_tx.send_replace(start);
    drop(stored);
    tracing::info!(dir = %dir.display(), %start, "reset the log");
    Ok(())
}

/// Finishes a reset whose marker is in `dir`, if there is one (opening a log).
pub(super) fn recover(storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
    let Some(payload) = state_file::read_framed(storage, dir, RESET_FILE, RESET_MAGIC)? else {
        return Ok(());
    };
    let (start, base_epoch) = match payload.len() {
        8 | 12 => {
            let start = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
            let epoch = payload.get(8..12).map_or(LeaderEpoch::ZERO, |b| {
                LeaderEpoch::new(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            });
            (Offset::new(start), epoch)
        }
        n => {
            return Err(LogError::Corrupt {
                file: dir.join(RESET_FILE),
                position: 0,
                reason: format!("payload is {n} bytes, not 8 or 12"),
            });
        }
    };
    tracing::warn!(dir = %dir.display(), %start, "finishing a reset interrupted by a crash");
    finish(storage, dir, start, base_epoch)
}

/// The epoch history of a log reset to `start` after an entry of `base_epoch`.
fn base_history(start: Offset, base_epoch: LeaderEpoch) -> EpochHistory {
    let mut epochs = EpochHistory::default();
    if base_epoch > LeaderEpoch::ZERO
        && let Some(below) = start.get().checked_sub(1)
    {
        epochs.assign(base_epoch, Offset::new(below));
    }
    epochs
}

/// Removes every segment and state file, creates the empty segment at `start` and the epoch
/// history of `base_epoch`, then removes the marker.
fn finish(
    storage: &dyn Storage,
    dir: &Path,
    start: Offset,
    base_epoch: LeaderEpoch,
) -> Result<(), LogError> {
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
    let epochs = base_history(start, base_epoch);
    if !epochs.entries().is_empty() {
        state_file::write_framed(storage, dir, EPOCH_FILE, EPOCH_MAGIC, &epochs.encode())?;
    }
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))?;
    remove_if_exists(storage, &dir.join(RESET_FILE))?;
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))?;
    Ok(())
}

//! Truncation: removing the records at and after an offset (replication reconciles a
//! follower this way; only records above the high watermark are ever truncated).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use floe_wire::Offset;

use crate::LogError;
use crate::group_commit::Pending;
use crate::segment::{self, INDEX_EXT, Segment};
use crate::storage::Storage;

use super::{Log, Shared, Writer, open};

/// Removes a file; a file that is already gone is fine.
pub(super) fn remove_if_exists(storage: &dyn Storage, path: &Path) -> Result<(), LogError> {
    match storage.remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LogError::io("remove", path)(e)),
        _ => Ok(()),
    }
}

impl Log {
    /// Removes every record at or after `to`, which must be the first offset of a batch (or
    /// the log end). Durable when it returns. Waiters for truncated offsets fail.
    pub fn truncate(&self, to: Offset) -> Result<(), LogError> {
        let shared = &self.shared;
        let mut w = shared.writer();
        shared.check_writable(&w)?;
        let result = truncate_locked(shared, &mut w, to);
        if let Err(e) = &result
            // A full disk part-way leaves it half done.
            && (e.is_fatal() || matches!(e, LogError::DiskFull { .. }))
        {
            shared.fail(e);
        }
        result
    }
}

fn truncate_locked(shared: &Shared, w: &mut Writer, to: Offset) -> Result<(), LogError> {
    let segments = shared.segments();
    let end = w.active.state().next_offset;
    if to >= end {
        return Ok(());
    }
    let (keep_at, position) = locate_batch(&segments, to, end)?;
    // A snapshot a roll left to write must not land above the cut.
    shared.finish_chores();
    let keep = &segments[keep_at];
    let storage = shared.storage.as_ref();
    let dir = &shared.dir;
    remove_segments(shared, &segments[keep_at + 1..])?;
    cut_segment(shared, keep, position)?;
    remove_snapshots_after(storage, dir, to)?;

    w.active = keep.clone();
    w.active_since = Instant::now();
    if w.epochs.truncate_from(to) {
        shared.write_epochs(&w.epochs)?;
    }
    let remaining = shared.segments();
    let listing = open::list(storage, dir)?;
    w.producers = open::recover_producers(storage, dir, &listing, &remaining, &shared.config)?;
    // Held until the log end moved down: a high watermark stored meanwhile is clamped to it.
    let mut stored = shared.high_watermark();
    if *stored > to {
        shared.write_high_watermark(&mut stored, to)?;
    }
    {
        let mut s = shared.sync_state();
        s.written = to;
        s.synced = s.synced.min(to);
        s.pending = Pending::default();
        s.switch_file(keep.file.clone(), keep.state().size);
        s.truncations += 1;
        shared.publish(&s);
    }
    shared.end_tx.send_replace(to);
    drop(stored);
    tracing::info!(dir = %dir.display(), %to, "truncated log");
    Ok(())
}

/// Where the batch starting at `to` lies: the index in `segments` of the segment holding it
/// and its byte position there. `to` must be below the log end `end`.
fn locate_batch(
    segments: &[Arc<Segment>],
    to: Offset,
    end: Offset,
) -> Result<(usize, u64), LogError> {
    let start = segments.first().map_or(Offset::ZERO, |s| s.base);
    let out_of_range = || LogError::OffsetOutOfRange {
        requested: to,
        log_start: start,
        log_end: end,
    };
    if to < start {
        return Err(out_of_range());
    }
    let keep_at = segments.partition_point(|s| s.base <= to).saturating_sub(1);
    match segments[keep_at].position_of(to)? {
        Some((position, header)) if header.base_offset == to => Ok((keep_at, position)),
        Some((_, header)) => Err(LogError::NotBatchBoundary {
            offset: to,
            batch_base: header.base_offset,
        }),
        None => Err(out_of_range()),
    }
}

/// Removes `removed`, the segments after the one truncation keeps, and their index files,
/// durably.
fn remove_segments(shared: &Shared, removed: &[Arc<Segment>]) -> Result<(), LogError> {
    let storage = shared.storage.as_ref();
    let dir = &shared.dir;
    // Newest first, so a crash part-way leaves a contiguous log.
    for removed in removed.iter().rev() {
        shared
            .segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        remove_if_exists(storage, &removed.path)?;
        remove_if_exists(
            storage,
            &dir.join(segment::file_name(removed.base, INDEX_EXT)),
        )?;
    }
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))
}

/// Cuts `keep`, now the last segment, durably at `position`, drops its index file and
/// rescans what remains of it.
fn cut_segment(shared: &Shared, keep: &Segment, position: u64) -> Result<(), LogError> {
    let storage = shared.storage.as_ref();
    keep.file
        .set_len(position)
        .map_err(LogError::io("truncate", &keep.path))?;
    keep.file
        .sync_data()
        .map_err(LogError::io("fdatasync", &keep.path))?;
    remove_if_exists(
        storage,
        &shared.dir.join(segment::file_name(keep.base, INDEX_EXT)),
    )?;
    let (state, stop) = Segment::scan_state(
        keep.file.as_ref(),
        &keep.path,
        keep.base,
        position,
        shared.config.index_interval_bytes,
    )?;
    if let Some(stop) = stop {
        return Err(LogError::Corrupt {
            file: keep.path.clone(),
            position: stop.position,
            reason: stop.reason,
        });
    }
    *keep.state_mut() = state;
    Ok(())
}

/// Removes the producer snapshots taken after `to`, durably.
fn remove_snapshots_after(storage: &dyn Storage, dir: &Path, to: Offset) -> Result<(), LogError> {
    let listing = open::list(storage, dir)?;
    for &at in listing.snapshots.iter().filter(|&&at| at > to) {
        remove_if_exists(
            storage,
            &dir.join(segment::file_name(at, crate::producer_state::PRODUCERS_EXT)),
        )?;
    }
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))
}

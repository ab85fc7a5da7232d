//! Repair: what an operator runs on a log that refused to open as corrupt (rot that recovery
//! must not cut on its own). The log is cut at the first damaged batch: that batch and
//! everything after it — the rest of the damaged segment and every later segment — is
//! discarded, and the log opens again ending where the damage starts. Nothing is cut without
//! [`Repair`] first saying exactly what will be; the caller shows it, and applies it only
//! once the operator has acknowledged the first discarded offset.
//!
//! When older records are kept elsewhere up to `kept_elsewhere_end` (object storage), and
//! that end lies past the damage, the damaged range is not lost: the repair drops the whole
//! local log instead, and it starts again, empty, at that end — only records at or after it
//! are discarded.
//!
//! Each step is durable before the next, and each leaves a log that a repeated repair plans
//! the same cut for (later segments go first, newest first; the damaged file is cut last),
//! so a crash part-way is finished by running the repair again. The state files (epoch
//! history, high watermark) need no change: opening a log caps both at its recovered end.

use std::path::{Path, PathBuf};

use floe_wire::Offset;

use crate::LogConfig;
use crate::LogError;
use crate::producer_state::PRODUCERS_EXT;
use crate::segment::{self, INDEX_EXT, LOG_EXT, Segment};
use crate::storage::Storage;

use super::Log;
use super::open::{Listing, list};
use super::truncation::remove_if_exists;

/// What repairing a damaged log does, as planned from its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The damaged segment file.
    pub file: PathBuf,
    /// The first damaged byte in it: the start of the first batch that fails its checks.
    pub position: u64,
    /// The first discarded offset: every record at or after it goes, and the log continues
    /// from it. What the operator acknowledges.
    pub discard_from: Offset,
    /// Bytes of segment data discarded.
    pub discarded_bytes: u64,
    /// Whole segment files discarded (those after the damaged one; or, when the damaged
    /// range is kept elsewhere, every local segment).
    pub discarded_segments: usize,
    /// The local log is dropped whole and starts again, empty, at `discard_from`, because
    /// everything below it is kept elsewhere.
    pub restart: bool,
}

impl Log {
    /// Plans the repair of the log in `dir`, closed, whose open failed with damage at byte
    /// `position` of the segment `file`. Records below `kept_elsewhere_end` are kept
    /// elsewhere (object storage); `Offset::ZERO` when none are. Changes nothing.
    pub fn plan_repair(
        storage: &dyn Storage,
        dir: &Path,
        config: &LogConfig,
        file: &Path,
        position: u64,
        kept_elsewhere_end: Offset,
    ) -> Result<Repair, LogError> {
        let listing = list(storage, dir)?;
        let base = damaged_base(dir, file, &listing)?;
        let handle = storage
            .open(file, false)
            .map_err(LogError::io("open", file))?;
        let len = handle.len().map_err(LogError::io("stat", file))?;
        if position > len {
            return Err(LogError::Corrupt {
                file: file.to_path_buf(),
                position,
                reason: format!("the damage is said to start past the file's {len} bytes"),
            });
        }
        // The batches before the damage are whole: the log ends after them.
        let (state, stop) = Segment::scan_state(
            handle.as_ref(),
            file,
            base,
            position,
            config.index_interval_bytes,
        )?;
        let (cut, keep_end) = match stop {
            // Damage found earlier than said (the file changed since): cut there.
            Some(stop) => (stop.position, state.next_offset),
            None => (state.size, state.next_offset),
        };
        let later = later_segments(dir, &listing, base);
        let mut later_bytes = 0;
        for path in &later {
            later_bytes += segment_len(storage, path)?;
        }
        if kept_elsewhere_end > keep_end {
            let mut local_bytes = later_bytes + len;
            for earlier in listing.segments.iter().filter(|&&b| b < base) {
                local_bytes +=
                    segment_len(storage, &dir.join(segment::file_name(*earlier, LOG_EXT)))?;
            }
            return Ok(Repair {
                file: file.to_path_buf(),
                position: cut,
                discard_from: kept_elsewhere_end,
                discarded_bytes: local_bytes,
                discarded_segments: listing.segments.len(),
                restart: true,
            });
        }
        Ok(Repair {
            file: file.to_path_buf(),
            position: cut,
            discard_from: keep_end,
            discarded_bytes: later_bytes + (len - cut),
            discarded_segments: later.len(),
            restart: false,
        })
    }

    /// Carries out `repair` on the log in `dir`, closed, and opens it. Durable step by step;
    /// a crash part-way leaves a log that the same plan finishes.
    pub fn apply_repair(
        storage: std::sync::Arc<dyn Storage>,
        dir: &Path,
        config: LogConfig,
        repair: &Repair,
    ) -> Result<Log, LogError> {
        let listing = list(storage.as_ref(), dir)?;
        let base = damaged_base(dir, &repair.file, &listing)?;
        if repair.restart {
            // Newest first: a crash leaves a prefix of the log, which a repeated plan
            // restarts the same way.
            for at in listing.segments.iter().rev() {
                remove_segment(storage.as_ref(), dir, *at)?;
            }
            remove_snapshots(storage.as_ref(), dir, &listing, |_| true)?;
            sync_dir(storage.as_ref(), dir)?;
            return Log::open_at(storage, dir, config, repair.discard_from);
        }
        for at in listing.segments.iter().rev().filter(|&&b| b > base) {
            remove_segment(storage.as_ref(), dir, *at)?;
        }
        remove_snapshots(storage.as_ref(), dir, &listing, |at| {
            at > repair.discard_from
        })?;
        // The damaged segment becomes the active one, which keeps no index.
        remove_if_exists(
            storage.as_ref(),
            &dir.join(segment::file_name(base, INDEX_EXT)),
        )?;
        sync_dir(storage.as_ref(), dir)?;
        let handle = storage
            .open(&repair.file, false)
            .map_err(LogError::io("open", &repair.file))?;
        handle
            .set_len(repair.position)
            .map_err(LogError::io("truncate", &repair.file))?;
        handle
            .sync_data()
            .map_err(LogError::io("fdatasync", &repair.file))?;
        tracing::warn!(
            file = %repair.file.display(), position = repair.position,
            discard_from = %repair.discard_from, discarded_bytes = repair.discarded_bytes,
            "repaired a damaged log by cutting it at the damage"
        );
        Log::open_at(storage, dir, config, repair.discard_from)
    }
}

/// The base offset of the damaged segment `file`, which must be a segment of the log in
/// `dir`.
fn damaged_base(dir: &Path, file: &Path, listing: &Listing) -> Result<Offset, LogError> {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match segment::parse_file_name(name) {
        Some((base, LOG_EXT)) if file.parent() == Some(dir) && listing.segments.contains(&base) => {
            Ok(base)
        }
        _ => Err(LogError::Corrupt {
            file: file.to_path_buf(),
            position: 0,
            reason: "a repair cuts a damaged segment of the log; this file is not one".into(),
        }),
    }
}

fn later_segments(dir: &Path, listing: &Listing, base: Offset) -> Vec<PathBuf> {
    listing
        .segments
        .iter()
        .filter(|&&b| b > base)
        .map(|&b| dir.join(segment::file_name(b, LOG_EXT)))
        .collect()
}

fn segment_len(storage: &dyn Storage, path: &Path) -> Result<u64, LogError> {
    let file = storage
        .open(path, false)
        .map_err(LogError::io("open", path))?;
    file.len().map_err(LogError::io("stat", path))
}

/// Removes a segment's data and index files, and makes it durable.
fn remove_segment(storage: &dyn Storage, dir: &Path, base: Offset) -> Result<(), LogError> {
    remove_if_exists(storage, &dir.join(segment::file_name(base, INDEX_EXT)))?;
    remove_if_exists(storage, &dir.join(segment::file_name(base, LOG_EXT)))?;
    sync_dir(storage, dir)
}

/// Removes the producer snapshots taken at offsets `drop` accepts.
fn remove_snapshots(
    storage: &dyn Storage,
    dir: &Path,
    listing: &Listing,
    drop: impl Fn(Offset) -> bool,
) -> Result<(), LogError> {
    for at in listing.snapshots.iter().filter(|&&at| drop(at)) {
        remove_if_exists(storage, &dir.join(segment::file_name(*at, PRODUCERS_EXT)))?;
    }
    Ok(())
}

fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))
}

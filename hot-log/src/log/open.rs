//! Opening a log: recovery from whatever a crash left.
//!
//! Only the active (last) segment is scanned; its torn tail is truncated, but damage that a
//! valid batch of the log follows is rot and refuses the open with the file and byte
//! position, truncating nothing ([`scan`] has the rule). Every other segment was synced
//! before its successor existed, so it is trusted, and checked only through its index file;
//! a missing or wrong index is rebuilt by scanning, and corruption found while doing so
//! refuses the open with the file and byte position.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::Instant;

use floe_wire::Offset;
use tokio::sync::watch;

use crate::epoch_history::{EPOCH_FILE, EPOCH_MAGIC, EpochHistory};
use crate::group_commit::Pending;
use crate::producer_state::{PRODUCERS_EXT, PRODUCERS_MAGIC, ProducerState};
use crate::segment::{self, INDEX_EXT, LOG_EXT, Segment, SegmentIndex, scan};
use crate::state_file::{self, TEMP_SUFFIX};
use crate::storage::{Storage, StorageFile};
use crate::{LogConfig, LogError};

use super::{
    HIGH_WATERMARK_FILE, HIGH_WATERMARK_MAGIC, Log, LogStats, SegmentLimits, Shared, SyncState,
    SyncStatus, Writer,
};

/// Files found in a log directory.
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub segments: Vec<Offset>,
    pub indexes: Vec<Offset>,
    pub snapshots: Vec<Offset>,
}

/// Lists the log's files. Changes nothing: a temp file may be a state file being written
/// beside the caller (a chore, a high watermark, a healed segment) — only opening removes
/// leftovers ([`remove_temp_files`]).
pub(super) fn list(storage: &dyn Storage, dir: &Path) -> Result<Listing, LogError> {
    let mut listing = Listing::default();
    for name in storage.list_dir(dir).map_err(LogError::io("list", dir))? {
        match segment::parse_file_name(&name) {
            Some((base, LOG_EXT)) => listing.segments.push(base),
            Some((base, INDEX_EXT)) => listing.indexes.push(base),
            Some((base, PRODUCERS_EXT)) => listing.snapshots.push(base),
            _ => {}
        }
    }
    listing.segments.sort_unstable();
    listing.snapshots.sort_unstable();
    Ok(listing)
}

/// Removes the temp files a crash left (state files never renamed into place, a healed
/// segment never swapped in). Only for a log nothing has open.
fn remove_temp_files(storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
    for name in storage.list_dir(dir).map_err(LogError::io("list", dir))? {
        if name.ends_with(TEMP_SUFFIX) {
            let path = dir.join(&name);
            storage
                .remove_file(&path)
                .map_err(LogError::io("remove", &path))?;
        }
    }
    Ok(())
}

/// Opens the log in `dir`; a directory without segments gets an empty first segment at
/// `empty_start`.
pub(super) fn open(
    storage: Arc<dyn Storage>,
    dir: &Path,
    config: LogConfig,
    empty_start: Offset,
) -> Result<Log, LogError> {
    let created = storage
        .create_dir_all(dir)
        .map_err(LogError::io("create directory", dir))?;
    super::reset::recover(storage.as_ref(), dir)?;
    remove_temp_files(storage.as_ref(), dir)?;
    let listing = list(storage.as_ref(), dir)?;
    let mut bases = listing.segments.clone();
    if bases.is_empty() {
        make_directories_durable(storage.as_ref(), dir, &created)?;
        create_first_segment(storage.as_ref(), dir, empty_start)?;
        bases.push(empty_start);
    }
    let (segments, active) = open_segments(storage.as_ref(), dir, &bases, &listing, &config)?;
    let log_end = active.state().next_offset;

    let epochs = recover_epochs(storage.as_ref(), dir, log_end)?;
    let producers = recover_producers(storage.as_ref(), dir, &listing, &segments, &config)?;
    let high_watermark = recover_high_watermark(storage.as_ref(), dir, log_end)?;

    let writer = Writer {
        active,
        active_since: Instant::now(),
        segment_limits: SegmentLimits::of(&config),
        producers,
        epochs,
        closed: false,
        scratch: Vec::new(),
    };
    let shared = new_shared(storage, dir, config, segments, writer, high_watermark);
    tracing::info!(dir = %dir.display(), segments = bases.len(), %log_end, "opened log");
    Log::from_shared(Arc::new(shared))
}

/// Makes the entries of a new log's directory and of the directories `create_dir_all` made
/// for it durable, by syncing their parents. Before the first segment exists: a log with a
/// segment has its directory durable, so only a log without one (new, or made by a process
/// that died before this sync) needs it, and its directory's parent is synced even when this
/// open did not create it.
fn make_directories_durable(
    storage: &dyn Storage,
    dir: &Path,
    created: &[PathBuf],
) -> Result<(), LogError> {
    let mut parents: Vec<&Path> = created
        .iter()
        .map(PathBuf::as_path)
        .chain([dir])
        .filter_map(Path::parent)
        .filter(|parent| !parent.as_os_str().is_empty())
        .collect();
    parents.dedup();
    for parent in parents {
        storage
            .sync_dir(parent)
            .map_err(LogError::io("fsync directory", parent))?;
    }
    Ok(())
}

/// Creates the empty data file of a log's first segment, durably.
fn create_first_segment(storage: &dyn Storage, dir: &Path, base: Offset) -> Result<(), LogError> {
    let path = dir.join(segment::file_name(base, LOG_EXT));
    storage
        .open(&path, true)
        .map_err(LogError::io("create", &path))?;
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))
}

/// Opens the segments at `bases`, in order: every one but the last as sealed, the last as
/// active. Returns them all (the active one last) and the active one.
fn open_segments(
    storage: &dyn Storage,
    dir: &Path,
    bases: &[Offset],
    listing: &Listing,
    config: &LogConfig,
) -> Result<(Vec<Arc<Segment>>, Arc<Segment>), LogError> {
    let mut segments = Vec::with_capacity(bases.len());
    for pair in bases.windows(2) {
        let has_index = listing.indexes.contains(&pair[0]);
        segments.push(Arc::new(open_sealed(
            storage, dir, pair[0], pair[1], has_index, config,
        )?));
    }
    let active_base = *bases.last().unwrap_or(&Offset::ZERO);
    let active = Arc::new(open_active(storage, dir, active_base, listing, config)?);
    segments.push(active.clone());
    Ok((segments, active))
}

/// The persisted high watermark, capped at the recovered log end; zero when none was
/// persisted.
fn recover_high_watermark(
    storage: &dyn Storage,
    dir: &Path,
    log_end: Offset,
) -> Result<Offset, LogError> {
    match state_file::read_framed(storage, dir, HIGH_WATERMARK_FILE, HIGH_WATERMARK_MAGIC)? {
        Some(p) if p.len() == 8 => {
            Ok(Offset::new(u64::from_le_bytes(p.try_into().unwrap_or_default())).min(log_end))
        }
        Some(_) => Err(LogError::Corrupt {
            file: dir.join(HIGH_WATERMARK_FILE),
            position: 0,
            reason: "payload is not 8 bytes".into(),
        }),
        None => Ok(Offset::ZERO),
    }
}

/// The state shared by a log's handles and its syncer, for a recovered log whose whole
/// content is durable (everything written is synced).
fn new_shared(
    storage: Arc<dyn Storage>,
    dir: &Path,
    config: LogConfig,
    segments: Vec<Arc<Segment>>,
    writer: Writer,
    high_watermark: Offset,
) -> Shared {
    let log_end = writer.active.state().next_offset;
    let status = SyncStatus {
        synced: log_end,
        failed: false,
        closed: false,
        truncations: 0,
    };
    let sync = SyncState {
        written: log_end,
        pending: Pending::default(),
        synced: log_end,
        file: writer.active.file.clone(),
        written_bytes: writer.active.state().size,
        cached_from: 0,
        previous: None,
        shutdown: false,
        truncations: 0,
    };
    Shared {
        dir: dir.to_path_buf(),
        storage,
        writer: Mutex::new(writer),
        segments: RwLock::new(segments),
        sync: Mutex::new(sync),
        config,
        work: Condvar::new(),
        synced_cv: Condvar::new(),
        synced_tx: watch::Sender::new(status),
        end_tx: watch::Sender::new(log_end),
        failure: OnceLock::new(),
        stats: LogStats {
            syncs: AtomicU64::new(0),
            synced_bytes: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
            released_bytes: AtomicU64::new(0),
        },
        chores: Default::default(),
        high_watermark: Mutex::new(high_watermark),
    }
}

/// Opens the data file of the segment at `base`; returns its path, handle and length.
fn open_segment_file(
    storage: &dyn Storage,
    dir: &Path,
    base: Offset,
) -> Result<(PathBuf, Arc<dyn StorageFile>, u64), LogError> {
    let path = dir.join(segment::file_name(base, LOG_EXT));
    let file = storage
        .open(&path, false)
        .map_err(LogError::io("open", &path))?;
    let len = file.len().map_err(LogError::io("stat", &path))?;
    Ok((path, file, len))
}

/// Opens a sealed segment through its index, rebuilding the index when it is missing or
/// disagrees with the data.
fn open_sealed(
    storage: &dyn Storage,
    dir: &Path,
    base: Offset,
    next_base: Offset,
    has_index: bool,
    config: &LogConfig,
) -> Result<Segment, LogError> {
    let (path, file, len) = open_segment_file(storage, dir, base)?;
    let index_path = dir.join(segment::file_name(base, INDEX_EXT));
    let from_index = if has_index {
        let bytes = state_file::read_file(storage, &index_path)?.unwrap_or_default();
        match SegmentIndex::decode(&bytes, base, len) {
            Ok(index) if index.next_offset == next_base => Some(index),
            Ok(_) => {
                tracing::warn!(file = %index_path.display(), "index disagrees with the next segment; rebuilding");
                None
            }
            Err(reason) => {
                tracing::warn!(file = %index_path.display(), reason, "index unusable; rebuilding");
                None
            }
        }
    } else {
        tracing::warn!(file = %index_path.display(), "index missing; rebuilding");
        None
    };
    let state = match from_index {
        Some(index) => segment::SegmentState {
            size: len,
            next_offset: index.next_offset,
            max_timestamp: index.max_timestamp,
            index: index.index,
            sealed: true,
        },
        None => {
            let (mut state, stop) =
                Segment::scan_state(file.as_ref(), &path, base, len, config.index_interval_bytes)?;
            if let Some(scan::ScanStop { position, reason }) = stop {
                return Err(LogError::Corrupt {
                    file: path,
                    position,
                    reason,
                });
            }
            if state.next_offset != next_base {
                let reason = format!(
                    "sealed segment ends at offset {} but the next starts at {next_base}",
                    state.next_offset
                );
                return Err(LogError::Corrupt {
                    file: path,
                    position: len,
                    reason,
                });
            }
            state.sealed = true;
            let segment = Segment::new(base, path, file, state);
            segment.write_index(storage, dir)?;
            return Ok(segment);
        }
    };
    Ok(Segment::new(base, path, file, state))
}

/// Opens the active segment: scans it, truncates a torn tail (refusing rot) and makes the
/// rest durable.
fn open_active(
    storage: &dyn Storage,
    dir: &Path,
    base: Offset,
    listing: &Listing,
    config: &LogConfig,
) -> Result<Segment, LogError> {
    let (path, file, len) = open_segment_file(storage, dir, base)?;
    let (state, stop) =
        Segment::scan_state(file.as_ref(), &path, base, len, config.index_interval_bytes)?;
    if let Some(stop) = stop {
        refuse_rot(file.as_ref(), &path, len, &stop, state.next_offset)?;
        tracing::warn!(
            file = %path.display(), position = stop.position, reason = %stop.reason,
            dropped_bytes = len - stop.position, "truncating the torn tail of the active segment"
        );
        file.set_len(state.size)
            .map_err(LogError::io("truncate", &path))?;
    }
    // What the file shows may still be only in the page cache (after a process crash):
    // make it durable before anyone is told it is.
    file.sync_data().map_err(LogError::io("fdatasync", &path))?;
    if listing.indexes.contains(&base) {
        let index_path = dir.join(segment::file_name(base, INDEX_EXT));
        storage
            .remove_file(&index_path)
            .map_err(LogError::io("remove", &index_path))?;
        storage
            .sync_dir(dir)
            .map_err(LogError::io("fsync directory", dir))?;
    }
    Ok(Segment::new(base, path, file, state))
}

/// Refuses the open when the damage the scan of the active segment stopped at is followed by
/// a valid batch of the log: that is rot, not a torn tail, and cutting it would drop batches
/// that were synced and perhaps acknowledged (see [`scan`]'s documentation for the rule).
fn refuse_rot(
    file: &dyn StorageFile,
    path: &Path,
    len: u64,
    stop: &scan::ScanStop,
    expected: Offset,
) -> Result<(), LogError> {
    let after = scan::after_damage(file, len, stop.position, expected)
        .map_err(LogError::io("read", path))?;
    let reason = match after {
        scan::AfterDamage::Nothing => return Ok(()),
        scan::AfterDamage::ValidBatch {
            position,
            base_offset,
        } => format!(
            "{}; a valid batch continues the log at byte {position} (offset {base_offset}), so \
             the data is damaged rather than torn by a crash, and it is not truncated",
            stop.reason
        ),
        scan::AfterDamage::Unresolved { position } => format!(
            "{}; whether valid batches follow is unresolved (checking stopped at byte \
             {position}), so it is not truncated",
            stop.reason
        ),
    };
    Err(LogError::Corrupt {
        file: path.to_path_buf(),
        position: stop.position,
        reason,
    })
}

fn recover_epochs(
    storage: &dyn Storage,
    dir: &Path,
    log_end: Offset,
) -> Result<EpochHistory, LogError> {
    let Some(payload) = state_file::read_framed(storage, dir, EPOCH_FILE, EPOCH_MAGIC)? else {
        return Ok(EpochHistory::default());
    };
    let mut epochs = EpochHistory::decode(&payload).map_err(|reason| LogError::Corrupt {
        file: dir.join(EPOCH_FILE),
        position: 0,
        reason,
    })?;
    // Epochs whose first batch did not survive the crash never happened.
    if epochs.truncate_from(log_end) {
        state_file::write_framed(storage, dir, EPOCH_FILE, EPOCH_MAGIC, &epochs.encode())?;
    }
    Ok(epochs)
}

/// Loads the newest producer snapshot at or below the active segment's base and replays the
/// batches after it.
pub(super) fn recover_producers(
    storage: &dyn Storage,
    dir: &Path,
    listing: &Listing,
    segments: &[Arc<Segment>],
    config: &LogConfig,
) -> Result<ProducerState, LogError> {
    let active_base = segments.last().map_or(Offset::ZERO, |s| s.base);
    let mut from = segments.first().map_or(Offset::ZERO, |s| s.base);
    let mut state = ProducerState::default();
    for &at in listing
        .snapshots
        .iter()
        .rev()
        .filter(|&&at| at <= active_base)
    {
        let name = segment::file_name(at, PRODUCERS_EXT);
        match state_file::read_framed(storage, dir, &name, PRODUCERS_MAGIC)?
            .map(|payload| ProducerState::decode(&payload))
        {
            Some(Ok((offset, snapshot))) if offset == at => {
                state = snapshot;
                from = at;
                break;
            }
            _ => {
                tracing::warn!(file = %dir.join(&name).display(), "producer snapshot unusable; trying an older one")
            }
        }
    }
    replay_producers(&mut state, segments, from, Offset::MAX, config)?;
    Ok(state)
}

/// Feeds the headers of every batch in `[from, until)` to the producer state.
pub(super) fn replay_producers(
    state: &mut ProducerState,
    segments: &[Arc<Segment>],
    from: Offset,
    until: Offset,
    config: &LogConfig,
) -> Result<(), LogError> {
    for segment in segments {
        let (size, next) = {
            let st = segment.state();
            (st.size, st.next_offset)
        };
        if next <= from || segment.base >= until {
            continue;
        }
        let mut position = 0;
        while position < size {
            let mut head = [0u8; floe_wire::batch::HEADER_LEN];
            crate::storage::read_exact_at(segment.file.as_ref(), &mut head, position)
                .map_err(LogError::io("read", &segment.path))?;
            let header = floe_wire::BatchHeader::parse(&head).map_err(|e| LogError::Corrupt {
                file: segment.path.clone(),
                position,
                reason: e.to_string(),
            })?;
            if header.base_offset >= until {
                break;
            }
            if header.base_offset >= from {
                state.record(&header, config.producers_max);
            }
            position += u64::from(header.batch_length);
        }
    }
    Ok(())
}

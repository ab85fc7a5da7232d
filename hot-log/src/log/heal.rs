//! Healing a sealed segment: its file, damaged on disk, replaced by a good copy of the same
//! batches (from the tier or a replica). The copy is checked against the segment before
//! anything is written: every batch whole and valid, the offsets and byte positions the
//! segment and its index already hold. It is written aside, synced, and renamed over the
//! damaged file; nothing else of the log changes.

use std::sync::Arc;

use floe_wire::Offset;
use floe_wire::batch;

use crate::LogError;
use crate::segment::{self, LOG_EXT, Segment, SegmentState};
use crate::state_file::TEMP_SUFFIX;

use super::Log;
use super::truncation::remove_if_exists;

impl Log {
    /// Replaces the file of the sealed segment starting at `base_offset` with `data`, which
    /// must be that segment's batches byte for byte where it matters: as many bytes, every
    /// batch valid (structure and CRC), the same offsets, and a batch starting at every
    /// position the segment's index names. Durable when it returns. Reads already under way
    /// finish on the old file; later ones read the new one.
    ///
    /// Refuses ([`LogError::ReplacementMismatch`]) a copy that does not match, and a segment
    /// that is not sealed or not in the log (retention may have deleted it meanwhile). The
    /// copy is written and synced before the writer's lock is taken, so appends do not wait
    /// for it; callers replace a segment once at a time.
    pub fn replace_sealed(&self, base_offset: Offset, data: &[u8]) -> Result<(), LogError> {
        let shared = &self.shared;
        let mismatch = |reason: &str| LogError::ReplacementMismatch {
            base_offset,
            reason: reason.to_string(),
        };
        let old = shared
            .segments()
            .into_iter()
            .find(|s| s.base == base_offset)
            .ok_or_else(|| mismatch("no such segment in the log"))?;
        let state = old.state().clone();
        if !state.sealed {
            return Err(mismatch("the segment is not sealed"));
        }
        check_copy(&old, &state, data).map_err(|reason| mismatch(&reason))?;

        // Written and synced aside without the writer's lock: appends go on meanwhile.
        let storage = shared.storage.as_ref();
        let dir = &shared.dir;
        let name = segment::file_name(base_offset, LOG_EXT);
        let aside = dir.join(format!("{name}{TEMP_SUFFIX}"));
        remove_if_exists(storage, &aside)?;
        let file = storage
            .open(&aside, true)
            .map_err(LogError::io("create", &aside))?;
        let written = file
            .write_all_at(data, 0)
            .and_then(|()| file.sync_data())
            .map_err(LogError::undone_write("write", &aside));
        drop(file);
        if let Err(e) = written {
            let _ = remove_if_exists(storage, &aside);
            return Err(e);
        }

        // Retention, truncation and rolls change the segment list under the writer's lock.
        let w = shared.writer();
        let still_there = shared.segments().iter().any(|s| Arc::ptr_eq(s, &old));
        if let Err(e) = shared.check_writable(&w).and_then(|()| {
            still_there
                .then_some(())
                .ok_or_else(|| mismatch("the segment left the log meanwhile"))
        }) {
            drop(w);
            let _ = remove_if_exists(storage, &aside);
            return Err(e);
        }
        storage
            .rename(&aside, &old.path)
            .map_err(LogError::io("rename", &aside))?;
        storage
            .sync_dir(dir)
            .map_err(LogError::io("fsync directory", dir))?;
        let file = storage
            .open(&old.path, false)
            .map_err(LogError::io("open", &old.path))?;
        let healed = Arc::new(Segment::new(base_offset, old.path.clone(), file, state));
        let mut segments = shared.segments.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = segments.iter_mut().find(|s| Arc::ptr_eq(s, &old)) {
            *slot = healed;
        }
        drop(segments);
        drop(w);
        tracing::info!(file = %old.path.display(), bytes = data.len(), "replaced a damaged sealed segment with a good copy");
        Ok(())
    }
}

/// Whether `data` holds exactly the batches `segment` (in `state`) describes; why not.
fn check_copy(segment: &Segment, state: &SegmentState, data: &[u8]) -> Result<(), String> {
    if data.len() as u64 != state.size {
        return Err(format!(
            "{} bytes where the segment holds {}",
            data.len(),
            state.size
        ));
    }
    let mut starts = Vec::new();
    let mut position = 0usize;
    let mut expected = segment.base;
    while position < data.len() {
        let header = batch::validate(&data[position..])
            .map_err(|e| format!("batch at byte {position}: {e}"))?;
        if header.base_offset != expected {
            return Err(format!(
                "batch at byte {position} starts at offset {} where {expected} was expected",
                header.base_offset
            ));
        }
        starts.push((position as u64, header.base_offset));
        expected = header.next_offset();
        position += header.batch_length as usize;
    }
    if expected != state.next_offset {
        return Err(format!(
            "the batches end at offset {expected} where the segment ends at {}",
            state.next_offset
        ));
    }
    for entry in &state.index.entries {
        let wanted = (
            u64::from(entry.position),
            Offset::new(segment.base.get() + u64::from(entry.relative_offset)),
        );
        if starts.binary_search(&wanted).is_err() {
            return Err(format!(
                "no batch at offset {} starts at byte {} as the index says",
                wanted.1, wanted.0
            ));
        }
    }
    Ok(())
}

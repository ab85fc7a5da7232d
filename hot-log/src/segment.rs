//! One segment: a file of concatenated batches named by its base offset, plus its sparse
//! index. The active segment grows; a sealed one never changes again.

mod index;
pub(crate) mod scan;

pub use index::IndexEntry;
pub(crate) use index::SegmentIndex;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::{Bytes, BytesMut};
use floe_wire::Offset;
use floe_wire::batch::{self, BatchHeader, HEADER_LEN};

use crate::LogError;
use crate::state_file;
use crate::storage::{
    DIRECT_ALIGN, Storage, StorageFile, aligned_buffer, read_exact_at, read_exact_uncached_at,
};

/// File name extensions (stable: part of the on-disk layout).
pub(crate) const LOG_EXT: &str = "log";
pub(crate) const INDEX_EXT: &str = "index";

/// `{base:020}.{ext}`: zero-padded so names sort like offsets.
pub(crate) fn file_name(base: Offset, ext: &str) -> String {
    format!("{:020}.{ext}", base.get())
}

/// The base offset and extension of a file named by [`file_name`].
pub(crate) fn parse_file_name(name: &str) -> Option<(Offset, &str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((Offset::new(stem.parse().ok()?), ext))
}

/// A segment and its in-memory state.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base: Offset,
    pub path: PathBuf,
    pub file: Arc<dyn StorageFile>,
    state: RwLock<SegmentState>,
}

#[derive(Debug, Clone)]
pub(crate) struct SegmentState {
    /// Bytes of complete batches; readers never look past it.
    pub size: u64,
    pub next_offset: Offset,
    /// Largest batch timestamp; `i64::MIN` while empty.
    pub max_timestamp: i64,
    pub index: SegmentIndex,
    pub sealed: bool,
}

/// Whole batches read from a segment.
#[derive(Debug, Clone)]
pub(crate) struct SegmentRead {
    pub bytes: Bytes,
    /// Offset after the last batch in `bytes`.
    pub next_offset: Offset,
}

impl Segment {
    pub fn new(
        base: Offset,
        path: PathBuf,
        file: Arc<dyn StorageFile>,
        state: SegmentState,
    ) -> Segment {
        Segment {
            base,
            path,
            file,
            state: RwLock::new(state),
        }
    }

    pub fn empty_state() -> SegmentState {
        SegmentState {
            size: 0,
            next_offset: Offset::ZERO,
            max_timestamp: i64::MIN,
            index: SegmentIndex::default(),
            sealed: false,
        }
    }

    pub fn state(&self) -> RwLockReadGuard<'_, SegmentState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn state_mut(&self) -> RwLockWriteGuard<'_, SegmentState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn corrupt(&self, position: u64, reason: impl ToString) -> LogError {
        LogError::Corrupt {
            file: self.path.clone(),
            position,
            reason: reason.to_string(),
        }
    }

    fn read_header(&self, position: u64) -> Result<BatchHeader, LogError> {
        let mut head = [0u8; HEADER_LEN];
        read_exact_at(self.file.as_ref(), &mut head, position)
            .map_err(LogError::io("read", &self.path))?;
        BatchHeader::parse(&head).map_err(|e| self.corrupt(position, e))
    }

    /// Position of the batch holding `offset`, scanning headers forward from the index floor.
    /// `None` when `offset` is at or past the segment's end.
    pub fn position_of(&self, offset: Offset) -> Result<Option<(u64, BatchHeader)>, LogError> {
        let (size, floor) = {
            let st = self.state();
            if offset >= st.next_offset || offset < self.base {
                return Ok(None);
            }
            let rel = offset.distance_from(self.base).min(u64::from(u32::MAX)) as u32;
            (st.size, st.index.floor_for_offset(rel))
        };
        let mut position = floor.map_or(0, |e| u64::from(e.position));
        while position < size {
            let header = self.read_header(position)?;
            if header.next_offset() > offset {
                return Ok(Some((position, header)));
            }
            position += u64::from(header.batch_length);
        }
        Ok(None)
    }

    /// Base offset of the first batch whose max timestamp is ≥ `timestamp`.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<Offset>, LogError> {
        let (size, floor) = {
            let st = self.state();
            if st.max_timestamp < timestamp {
                return Ok(None);
            }
            (st.size, st.index.floor_for_timestamp(timestamp))
        };
        let mut position = floor.map_or(0, |e| u64::from(e.position));
        while position < size {
            let header = self.read_header(position)?;
            if header.max_timestamp >= timestamp {
                return Ok(Some(header.base_offset));
            }
            position += u64::from(header.batch_length);
        }
        Ok(None)
    }

    /// Reads whole, validated batches starting with the one holding `from`, up to `max_bytes`
    /// (at least one batch), none reaching `until` or beyond.
    ///
    /// `uncached`: the range is known to be out of the page cache (released, see
    /// [`crate::LogConfig::page_cache_bytes`]), so it is read around it where the storage
    /// allows: a buffered read would fill a new cache page for every 4 KiB only to copy it
    /// out once.
    pub fn read(
        &self,
        from: Offset,
        max_bytes: usize,
        until: Offset,
        uncached: bool,
    ) -> Result<Option<SegmentRead>, LogError> {
        let Some((position, first)) = self.position_of(from)? else {
            return Ok(None);
        };
        if first.next_offset() > until {
            return Ok(None);
        }
        let size = self.state().size;
        let want = (max_bytes as u64)
            .max(u64::from(first.batch_length))
            .min(size - position) as usize;
        let buf = if uncached {
            // From the block holding `position`, into a buffer aligned like it.
            let lead = (position % DIRECT_ALIGN as u64) as usize;
            let (mut backing, at) = aligned_buffer(lead + want);
            read_exact_uncached_at(
                self.file.as_ref(),
                &mut backing[at..at + lead + want],
                position - lead as u64,
            )
            .map_err(LogError::io("read", &self.path))?;
            Bytes::from(backing).slice(at + lead..at + lead + want)
        } else {
            let mut buf = BytesMut::zeroed(want);
            read_exact_at(self.file.as_ref(), &mut buf, position)
                .map_err(LogError::io("read", &self.path))?;
            buf.freeze()
        };
        let mut end = 0usize;
        let mut next_offset = first.base_offset;
        while end < buf.len() {
            let Some(len) = batch::peek_batch_length(&buf[end..]) else {
                break;
            };
            let len = len as usize;
            if end + len > buf.len() {
                break;
            }
            let header = batch::validate(&buf[end..end + len])
                .map_err(|e| self.corrupt(position + end as u64, e))?;
            if header.base_offset != next_offset {
                let reason = format!(
                    "batch at offset {} where {next_offset} was expected",
                    header.base_offset
                );
                return Err(self.corrupt(position + end as u64, reason));
            }
            if header.next_offset() > until {
                break;
            }
            next_offset = header.next_offset();
            end += len;
        }
        if end == 0 {
            return Ok(None);
        }
        Ok(Some(SegmentRead {
            bytes: buf.slice(..end),
            next_offset,
        }))
    }

    /// Writes the index file of a sealed segment (atomically; a lost index is rebuilt).
    pub fn write_index(&self, storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
        let bytes = {
            let st = self.state();
            st.index
                .encode(self.base, st.next_offset, st.size, st.max_timestamp)
        };
        state_file::write_atomically(storage, dir, &file_name(self.base, INDEX_EXT), &bytes)
    }

    /// Rebuilds a segment's state from its data, validating every batch. Returns where the
    /// data stopped being valid, if before `len`.
    pub fn scan_state(
        file: &dyn StorageFile,
        path: &Path,
        base: Offset,
        len: u64,
        index_interval_bytes: u32,
    ) -> Result<(SegmentState, Option<scan::ScanStop>), LogError> {
        let mut state = Segment::empty_state();
        state.next_offset = base;
        let outcome = scan::scan_batches(file, len, base, |header, position| {
            let rel = header.base_offset.distance_from(base) as u32;
            state.index.on_append(
                rel,
                position as u32,
                header.batch_length,
                header.max_timestamp,
                index_interval_bytes,
            );
            state.max_timestamp = state.max_timestamp.max(header.max_timestamp);
        })
        .map_err(LogError::io("read", path))?;
        state.size = outcome.valid_bytes;
        state.next_offset = outcome.next_offset;
        Ok((state, outcome.stop))
    }
}

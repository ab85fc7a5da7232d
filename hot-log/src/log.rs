//! The partition log: append with group commit, reads, truncation, retention.
//!
//! # Driving contract
//!
//! - [`Log::append`] (leader) validates a batch, stamps its base offset and leader epoch into
//!   the header and writes it to the page cache; it returns the assigned offsets at once.
//!   The batch is durable only once [`Log::wait_synced`] (or
//!   [`Log::wait_synced_blocking`]) for its `next_offset` returns: acknowledge a producer
//!   with ack mode `leader` only then.
//! - [`Log::append_replicated`] (follower) appends a batch already stamped by its leader; it
//!   must continue the log exactly.
//! - A background syncer thread runs `fdatasync` as the [`GroupCommitPolicy`] decides; every
//!   append written while a sync runs is covered by the next one.
//! - After any failed write or sync the log refuses every further write with
//!   [`LogError::Failed`] and waiters get the same error; it must be reopened, which recovers
//!   from what is durable. A failed `fdatasync` is never retried.
//! - Except a full disk while appending or sealing: the write is undone (the bytes that
//!   reached the segment cut off, a state file's temp file left to be rewritten) and the
//!   append or roll fails with [`LogError::DiskFull`], leaving the log as it was and
//!   writable. Retry once space is freed.
//! - A log that refuses to open as corrupt is repaired, closed, by [`Log::plan_repair`] then
//!   [`Log::apply_repair`], which cut it at the damage once an operator acknowledged the cut.
//! - [`Log::maintain`] should be called periodically: it seals the active segment once it is
//!   older than the configured age.

mod append;
mod chores;
mod heal;
mod open;
mod repair;
mod reset;
mod retention;
mod syncer;
mod truncation;

pub use repair::Repair;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_wire::Offset;
use tokio::sync::watch;

use crate::epoch_history::{EPOCH_FILE, EPOCH_MAGIC, EpochHistory};
use crate::group_commit::Pending;
use crate::producer_state::{PRODUCERS_EXT, ProducerState};
use crate::segment::{self, IndexEntry, LOG_EXT, Segment};
use crate::state_file;
use crate::storage::{Storage, StorageFile};
use crate::{GroupCommitPolicy, LogConfig, LogError};

pub(crate) const HIGH_WATERMARK_FILE: &str = "high-watermark";
pub(crate) const HIGH_WATERMARK_MAGIC: [u8; 4] = *b"FLHW";

/// Where an appended batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: Offset,
    pub last_offset: Offset,
    /// The batch was a retry of one already in the log; nothing was written and the offsets
    /// are the original ones. It is durable once `wait_synced(last_offset + 1)` returns.
    pub duplicate: bool,
}

impl Appended {
    /// The offset after the batch: wait for the log to be synced up to here.
    pub fn next_offset(&self) -> Offset {
        Offset::new(self.last_offset.get() + 1)
    }
}

/// Whole batches read from the log.
#[derive(Debug, Clone)]
pub struct ReadBatches {
    /// Concatenated batches exactly as stored; the first may start before the offset asked
    /// for (the reader skips its earlier records). Empty when nothing is available yet.
    pub bytes: Bytes,
    /// Where the next read should start.
    pub next_offset: Offset,
}

/// Progress of durability, as published to waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncStatus {
    /// Every offset below this is durable.
    pub synced: Offset,
    /// A write or sync failed; nothing more will become durable until reopened.
    pub failed: bool,
    /// The log was closed.
    pub closed: bool,
    /// Count of truncations so far: a waiter whose offset was truncated away must not be
    /// satisfied by later data at the same offsets.
    pub truncations: u64,
}

/// Counters of the syncer.
#[derive(Debug, Default)]
pub struct LogStats {
    pub syncs: AtomicU64,
    pub synced_bytes: AtomicU64,
    pub sync_nanos: AtomicU64,
    /// Synced bytes released from the page cache (see [`crate::LogConfig::page_cache_bytes`]).
    pub released_bytes: AtomicU64,
}

/// A sealed segment, for readers such as tiering: immutable once sealed.
#[derive(Debug, Clone)]
pub struct SealedSegment {
    pub base_offset: Offset,
    pub next_offset: Offset,
    pub size_bytes: u64,
    pub max_timestamp: i64,
    pub path: PathBuf,
    /// The sparse index: offset → position, with the running max timestamp.
    pub index: Vec<IndexEntry>,
    file: Arc<dyn StorageFile>,
}

impl SealedSegment {
    /// Reads bytes of the segment file at `position`.
    pub fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        crate::storage::read_exact_at(self.file.as_ref(), buf, position)
    }

    /// Reads bytes of the segment file at `position` around the page cache where the file
    /// system allows it ([`crate::storage::read_exact_uncached_at`]): for a reader that
    /// reads the segment once, such as its upload to object storage. Align `buf` and
    /// `position` to [`crate::storage::DIRECT_ALIGN`] for it to apply.
    pub fn read_uncached_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        crate::storage::read_exact_uncached_at(self.file.as_ref(), buf, position)
    }
}

/// One partition's durable log. See the module documentation for the driving contract.
#[derive(Debug)]
pub struct Log {
    shared: Arc<Shared>,
    syncer: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub dir: PathBuf,
    pub storage: Arc<dyn Storage>,
    pub config: LogConfig,
    pub writer: Mutex<Writer>,
    /// Ordered by base offset; the last one is active. Never empty.
    pub segments: RwLock<Vec<Arc<Segment>>>,
    pub sync: Mutex<SyncState>,
    /// Wakes the syncer.
    pub work: Condvar,
    /// Wakes blocking waiters.
    pub synced_cv: Condvar,
    pub synced_tx: watch::Sender<SyncStatus>,
    pub end_tx: watch::Sender<Offset>,
    /// Set once by the first failed write or sync.
    pub failure: OnceLock<io::ErrorKind>,
    pub stats: LogStats,
    /// What the log owes but nothing waits for: see [`chores`].
    pub chores: Arc<chores::Chores>,
    /// The last high watermark stored. Its own lock, not the writer's: storing one every so
    /// often must not hold appends up for its syncs. Truncation and reset take it under the
    /// writer's lock (in that order), so a stored one never outlives a cut below it.
    pub high_watermark: Mutex<Offset>,
}

/// When the active segment is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentLimits {
    pub bytes_max: u64,
    pub age_max: Duration,
}

impl SegmentLimits {
    pub(crate) fn of(config: &LogConfig) -> SegmentLimits {
        SegmentLimits {
            bytes_max: config.segment_bytes_max,
            age_max: config.segment_age_max,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Writer {
    pub active: Arc<Segment>,
    pub active_since: Instant,
    /// When the active segment is sealed: the configured limits at first, then whatever
    /// [`Log::set_segment_limits`] last set (a stream's settings can change while it runs).
    pub segment_limits: SegmentLimits,
    pub producers: ProducerState,
    pub epochs: EpochHistory,
    pub closed: bool,
    scratch: Vec<u8>,
}

#[derive(Debug)]
pub(crate) struct SyncState {
    /// End of the log in the page cache.
    pub written: Offset,
    pub pending: Pending,
    pub synced: Offset,
    /// The active segment's file, and the end of what is written to it.
    pub file: Arc<dyn StorageFile>,
    pub written_bytes: u64,
    /// Below this position of `file` the page cache was released (see
    /// [`crate::LogConfig::page_cache_bytes`]).
    pub cached_from: u64,
    /// What is still cached of the last sealed segment: released once the active file holds
    /// a window's worth of synced data.
    pub previous: Option<CacheRelease>,
    pub shutdown: bool,
    pub truncations: u64,
}

/// A range of a synced file to drop from the page cache: the file, a position, a length.
pub(crate) type CacheRelease = (Arc<dyn StorageFile>, u64, u64);

impl SyncState {
    /// The active segment is now `file`, holding `written_bytes`: what was cached of another
    /// file is no longer tracked.
    pub fn switch_file(&mut self, file: Arc<dyn StorageFile>, written_bytes: u64) {
        self.file = file;
        self.written_bytes = written_bytes;
        self.cached_from = 0;
        self.previous = None;
    }
}

impl Shared {
    pub fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn sync_state(&self) -> MutexGuard<'_, SyncState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn check_writable(&self, w: &Writer) -> Result<(), LogError> {
        if let Some(cause) = self.failure.get() {
            return Err(LogError::Failed { cause: *cause });
        }
        if w.closed {
            return Err(LogError::Closed);
        }
        Ok(())
    }

    /// Records the first failure: from now on the log refuses writes and waiters fail.
    pub fn fail(&self, error: &LogError) {
        let kind = match error {
            LogError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        };
        if self.failure.set(kind).is_ok() {
            tracing::error!(dir = %self.dir.display(), %error, "log write failed; refusing writes until reopened");
        }
        let s = self.sync_state();
        self.publish(&s);
    }

    /// Publishes the sync state to async and blocking waiters. Called with the sync lock held.
    pub fn publish(&self, s: &SyncState) {
        debug_assert!(
            s.synced <= *self.end_tx.borrow(),
            "synced end {} past the log end {}",
            s.synced,
            *self.end_tx.borrow()
        );
        let status = SyncStatus {
            synced: s.synced,
            failed: self.failure.get().is_some(),
            closed: s.shutdown,
            truncations: s.truncations,
        };
        self.synced_tx.send_replace(status);
        self.synced_cv.notify_all();
    }

    fn producer_snapshot_name(base: Offset) -> String {
        segment::file_name(base, PRODUCERS_EXT)
    }

    pub fn write_epochs(&self, epochs: &EpochHistory) -> Result<(), LogError> {
        let storage = self.storage.as_ref();
        state_file::write_framed(
            storage,
            &self.dir,
            EPOCH_FILE,
            EPOCH_MAGIC,
            &epochs.encode(),
        )
    }

    /// Stores the high watermark (atomic state file) and remembers it. Call with `stored`
    /// from [`Shared::high_watermark`].
    pub fn write_high_watermark(
        &self,
        stored: &mut MutexGuard<'_, Offset>,
        offset: Offset,
    ) -> Result<(), LogError> {
        state_file::write_framed(
            self.storage.as_ref(),
            &self.dir,
            HIGH_WATERMARK_FILE,
            HIGH_WATERMARK_MAGIC,
            &offset.get().to_le_bytes(),
        )?;
        **stored = offset;
        Ok(())
    }

    pub fn high_watermark(&self) -> MutexGuard<'_, Offset> {
        self.high_watermark
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Seals the active segment and starts a new one at the log end.
    ///
    /// Order matters for recovery, which trusts every segment but the last: the old segment
    /// is synced before the new file exists, and the new file's name is durable (directory
    /// sync) before anything is appended to it. The old segment's index and the producers'
    /// snapshot at its end are written afterwards by the chores thread, off the writer's
    /// path: recovery does without either.
    ///
    /// A full disk while creating the new file is [`LogError::DiskFull`] and changes nothing
    /// the log relies on: the old segment is still active, so the roll can be tried again.
    pub fn roll(&self, w: &mut Writer) -> Result<(), LogError> {
        let old = w.active.clone();
        let next = old.state().next_offset;
        old.file
            .sync_data()
            .map_err(LogError::io("fdatasync", &old.path))?;
        let path = self.dir.join(segment::file_name(next, LOG_EXT));
        let file = self
            .storage
            .open(&path, true)
            .map_err(LogError::undone_write("create", &path))?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(LogError::io("fsync directory", &self.dir))?;
        old.state_mut().sealed = true;
        let mut state = Segment::empty_state();
        state.next_offset = next;
        let segment = Arc::new(Segment::new(next, path, file.clone(), state));
        self.segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(segment.clone());
        w.active = segment;
        w.active_since = Instant::now();
        self.add_chore(chores::Chore::Sealed {
            segment: old.clone(),
            next,
            snapshot: w.producers.encode(next),
        });
        let mut s = self.sync_state();
        // Everything written so far was in the old segment, which is now synced.
        s.synced = s.synced.max(next);
        s.pending = Pending::default();
        if let Some(older) = s.previous.take() {
            self.add_chore(chores::Chore::Release(older));
        }
        let size = old.state().size;
        let previous = (
            old.file.clone(),
            s.cached_from,
            size.saturating_sub(s.cached_from),
        );
        s.switch_file(file, 0);
        if self.config.page_cache_bytes.is_some() {
            s.previous = Some(previous);
        }
        self.publish(&s);
        tracing::debug!(dir = %self.dir.display(), base = %next, "sealed a segment");
        Ok(())
    }

    /// Drops a synced range from the page cache, and counts it.
    pub(crate) fn release_cache(&self, (file, position, len): CacheRelease) {
        file.release_cache(position, len);
        add_stat(&self.stats.released_bytes, len);
    }
}

impl Log {
    /// Changes when segments are sealed, from the active one on: at `bytes_max` bytes or
    /// `age_max` of age. Refused, changing nothing, when `bytes_max` is out of the range
    /// [`LogConfig::validate`] allows.
    pub fn set_segment_limits(&self, bytes_max: u64, age_max: Duration) -> Result<(), LogError> {
        if bytes_max == 0 || bytes_max > LogConfig::SEGMENT_BYTES_LIMIT {
            return Err(LogError::InvalidConfig(format!(
                "segment_bytes_max {bytes_max} must be in 1..={}",
                LogConfig::SEGMENT_BYTES_LIMIT
            )));
        }
        self.shared.writer().segment_limits = SegmentLimits { bytes_max, age_max };
        Ok(())
    }

    /// Opens (and recovers) the log in `dir`, creating it if needed.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path, config: LogConfig) -> Result<Log, LogError> {
        open::open(storage, dir, config, Offset::ZERO)
    }

    /// Like [`Log::open`], but a new log (a directory without segments) starts at `start`
    /// rather than 0: a partition whose older records live elsewhere (object storage)
    /// continues their offsets. An existing log is opened as it is.
    pub fn open_at(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: LogConfig,
        start: Offset,
    ) -> Result<Log, LogError> {
        open::open(storage, dir, config, start)
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Result<Log, LogError> {
        shared.chores.attach(&shared);
        let for_thread = shared.clone();
        let handle = std::thread::Builder::new()
            .name("floe-log-sync".into())
            .spawn(move || syncer::run(&for_thread))
            .map_err(LogError::io("spawn syncer for", &shared.dir))?;
        Ok(Log {
            shared,
            syncer: Mutex::new(Some(handle)),
        })
    }

    /// The directory holding this log.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Waits until every offset below `offset` is durable.
    pub async fn wait_synced(&self, offset: Offset) -> Result<(), LogError> {
        let mut rx = self.shared.synced_tx.subscribe();
        let start = *rx.borrow();
        let status = rx
            .wait_for(|s| {
                s.synced >= offset || s.failed || s.closed || s.truncations != start.truncations
            })
            .await
            .map_err(|_| LogError::Closed)?;
        self.sync_outcome(*status, offset, start.truncations)
    }

    /// Blocks until every offset below `offset` is durable.
    pub fn wait_synced_blocking(&self, offset: Offset) -> Result<(), LogError> {
        let mut s = self.shared.sync_state();
        let truncations = s.truncations;
        loop {
            let status = *self.shared.synced_tx.borrow();
            if status.synced >= offset
                || status.failed
                || status.closed
                || status.truncations != truncations
            {
                return self.sync_outcome(status, offset, truncations);
            }
            s = self
                .shared
                .synced_cv
                .wait(s)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    fn sync_outcome(
        &self,
        status: SyncStatus,
        offset: Offset,
        truncations: u64,
    ) -> Result<(), LogError> {
        if status.synced >= offset && status.truncations == truncations {
            return Ok(());
        }
        if let Some(cause) = self.shared.failure.get() {
            return Err(LogError::Failed { cause: *cause });
        }
        if status.truncations != truncations {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                log_start: self.log_start(),
                log_end: self.log_end(),
            });
        }
        Err(LogError::Closed)
    }

    /// A receiver of durability progress (for callers that multiplex many logs).
    pub fn sync_status(&self) -> watch::Receiver<SyncStatus> {
        self.shared.synced_tx.subscribe()
    }

    /// A receiver of the log end, for readers waiting on the tail.
    pub fn end_watch(&self) -> watch::Receiver<Offset> {
        self.shared.end_tx.subscribe()
    }

    /// First offset in the log.
    pub fn log_start(&self) -> Offset {
        let segments = self
            .shared
            .segments
            .read()
            .unwrap_or_else(|e| e.into_inner());
        segments.first().map_or(Offset::ZERO, |s| s.base)
    }

    /// The offset the next appended record will get.
    pub fn log_end(&self) -> Offset {
        *self.shared.end_tx.borrow()
    }

    /// Every offset below this is durable.
    pub fn synced_end(&self) -> Offset {
        self.shared.synced_tx.borrow().synced
    }

    /// Reads whole batches from `from`, up to `max_bytes` (at least one batch when one is
    /// available), none reaching `until` (e.g. the synced end or the high watermark).
    pub fn read(
        &self,
        from: Offset,
        max_bytes: usize,
        until: Offset,
    ) -> Result<ReadBatches, LogError> {
        let segments = self.shared.segments();
        let start = segments.first().map_or(Offset::ZERO, |s| s.base);
        let end = self.log_end();
        if from < start || from > end {
            return Err(LogError::OffsetOutOfRange {
                requested: from,
                log_start: start,
                log_end: end,
            });
        }
        let first = segments
            .partition_point(|s| s.base <= from)
            .saturating_sub(1);
        let released_below = self.released_below(segments.len());
        for (index, segment) in segments.iter().enumerate().skip(first) {
            let uncached = index < released_below;
            if let Some(read) = segment.read(from.max(segment.base), max_bytes, until, uncached)? {
                return Ok(ReadBatches {
                    bytes: read.bytes,
                    next_offset: read.next_offset,
                });
            }
            if from < segment.state().next_offset {
                break; // the data is there but beyond `until`
            }
        }
        Ok(ReadBatches {
            bytes: Bytes::new(),
            next_offset: from,
        })
    }

    /// Whether a [`Log::read`] from `from` reads from the disk around the page cache: the
    /// segment holding it was released from the cache. Such a read waits for the device,
    /// so an async caller runs it on a blocking thread.
    pub fn read_is_uncached(&self, from: Offset) -> bool {
        // Asked before every fetch of the log: under the lock, without copying the list.
        let segments = self
            .shared
            .segments
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let index = segments
            .partition_point(|s| s.base <= from)
            .saturating_sub(1);
        index < self.released_below(segments.len())
    }

    /// How many of a log's `segments`, oldest first, are out of the page cache. A roll
    /// releases the whole of the segment sealed before the one it seals: what is older than
    /// the newest sealed segment is out of the cache (or, in a log opened since, was at least
    /// not read through it by this process).
    fn released_below(&self, segments: usize) -> usize {
        match self.shared.config.page_cache_bytes {
            Some(_) => segments.saturating_sub(2),
            None => 0,
        }
    }

    /// The base offset of the first batch holding a record with timestamp ≥ `timestamp`, or
    /// `None` when every record is older.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<Offset>, LogError> {
        for segment in self.shared.segments() {
            if let Some(offset) = segment.offset_for_timestamp(timestamp)? {
                return Ok(Some(offset));
            }
        }
        Ok(None)
    }

    /// The offset after the newest sealed segment (the log start when none is sealed). Cheap:
    /// tells whether [`Log::sealed_segments`] holds anything new.
    pub fn sealed_end(&self) -> Offset {
        let segments = self.shared.segments();
        segments
            .iter()
            .rev()
            .map(|s| s.state())
            .find(|st| st.sealed)
            .map_or_else(|| self.log_start(), |st| st.next_offset)
    }

    /// The end offset and size in bytes of each sealed segment, oldest first: what
    /// [`Log::sealed_segments`] tells without copying indexes and handles.
    pub fn sealed_sizes(&self) -> Vec<(Offset, u64)> {
        let segments = self.shared.segments();
        segments
            .iter()
            .map(|s| s.state())
            .filter(|st| st.sealed)
            .map(|st| (st.next_offset, st.size))
            .collect()
    }

    /// The sealed segments, oldest first.
    pub fn sealed_segments(&self) -> Vec<SealedSegment> {
        let segments = self.shared.segments();
        segments
            .iter()
            .filter_map(|s| {
                let st = s.state();
                st.sealed.then(|| SealedSegment {
                    base_offset: s.base,
                    next_offset: st.next_offset,
                    size_bytes: st.size,
                    max_timestamp: st.max_timestamp,
                    path: s.path.clone(),
                    index: st.index.entries.clone(),
                    file: s.file.clone(),
                })
            })
            .collect()
    }

    /// The leader-epoch history.
    pub fn epoch_history(&self) -> EpochHistory {
        self.shared.writer().epochs.clone()
    }

    /// The last high watermark stored with [`Log::store_high_watermark`].
    pub fn high_watermark(&self) -> Offset {
        *self.shared.high_watermark()
    }

    /// Stores the high watermark durably (atomic state file).
    pub fn store_high_watermark(&self, offset: Offset) -> Result<(), LogError> {
        // Not under the writer's lock: appends go on while it syncs. A truncation waits for
        // it (and then lowers it) before it moves the log end down.
        let mut stored = self.shared.high_watermark();
        let offset = offset.min(*self.shared.end_tx.borrow());
        self.shared.write_high_watermark(&mut stored, offset)
    }

    /// Seals the active segment if it is older than the configured age and not empty.
    /// Returns whether it did.
    pub fn maintain(&self, now: Instant) -> Result<bool, LogError> {
        let shared = &self.shared;
        let mut w = shared.writer();
        shared.check_writable(&w)?;
        let aged = now.saturating_duration_since(w.active_since) >= w.segment_limits.age_max;
        if !aged || w.active.state().size == 0 {
            return Ok(false);
        }
        let result = shared.roll(&mut w);
        if let Err(e) = &result
            && !matches!(e, LogError::DiskFull { .. })
        {
            shared.fail(e);
        }
        result.map(|()| true)
    }

    /// Seals the active segment now, if it holds anything.
    pub fn roll(&self) -> Result<(), LogError> {
        let shared = &self.shared;
        let mut w = shared.writer();
        shared.check_writable(&w)?;
        if w.active.state().size == 0 {
            return Ok(());
        }
        let result = shared.roll(&mut w);
        if let Err(e) = &result
            && !matches!(e, LogError::DiskFull { .. })
        {
            shared.fail(e);
        }
        result
    }

    /// Bytes of every segment file's data, the active segment's unsynced tail included.
    pub fn size_bytes(&self) -> u64 {
        self.shared.segments().iter().map(|s| s.state().size).sum()
    }

    /// The syncer's counters.
    pub fn stats(&self) -> &LogStats {
        &self.shared.stats
    }

    /// The group-commit policy in force.
    pub fn group_commit(&self) -> GroupCommitPolicy {
        self.shared.config.group_commit
    }

    /// Syncs everything written, stops the syncer and refuses further writes.
    pub fn close(&self) -> Result<(), LogError> {
        self.shared.writer().closed = true;
        {
            let mut s = self.shared.sync_state();
            s.shutdown = true;
        }
        self.shared.work.notify_all();
        let handle = self.syncer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        self.shared.close_chores();
        let s = self.shared.sync_state();
        self.shared.publish(&s);
        match self.shared.failure.get() {
            Some(cause) => Err(LogError::Failed { cause: *cause }),
            None => Ok(()),
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Adds to one of the syncer's counters.
pub(crate) fn add_stat(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

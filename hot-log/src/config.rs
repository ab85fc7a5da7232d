//! How a log is shaped: segment size and age, index density, batch limit, group commit.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{GroupCommitPolicy, SyncActivity};

/// The page-cache window of a log by default: consumers up to this far behind the end, and
/// followers catching up as far, read from memory.
pub const DEFAULT_PAGE_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Settings of one partition's log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A segment is sealed once the next batch would take it past this size.
    pub segment_bytes_max: u64,
    /// A non-empty segment is sealed once it has been active this long (see
    /// [`crate::Log::maintain`]), so tiering and read replicas never lag more than this.
    pub segment_age_max: Duration,
    /// Bytes of batches between two entries of a segment's sparse index.
    pub index_interval_bytes: u32,
    /// Largest batch the log accepts.
    pub batch_bytes_max: u32,
    /// When the syncer starts an `fdatasync`.
    pub group_commit: GroupCommitPolicy,
    /// Idempotent producers remembered; the least recently written is forgotten beyond it.
    pub producers_max: usize,
    /// Told the duration of every `fdatasync` the syncer runs (for latency histograms).
    pub sync_observer: Option<SyncObserver>,
    /// Shared by the logs of one disk: each `fdatasync` is marked running in it, so that
    /// background I/O on the disk can wait for a pause ([`SyncActivity`]).
    pub sync_activity: Option<Arc<SyncActivity>>,
    /// Bytes of the newest synced data the page cache keeps; older synced data is released
    /// from it ([`crate::StorageFile::release_cache`]) and read from the disk when asked.
    /// `None` keeps everything (the operating system decides).
    ///
    /// Filling new page-cache pages is the log's largest cost where the memory a process
    /// frees goes back to the hypervisor (a VM with free-page reporting): every byte written
    /// lands on a page that must first be faulted in from the host. Pages released here are
    /// reused for the next writes while they are still the guest's (`docs/benchmarks-history.md`).
    pub page_cache_bytes: Option<u64>,
}

/// A callback for the duration of each `fdatasync`; it runs on the syncer thread and must be
/// quick.
#[derive(Clone)]
pub struct SyncObserver(pub Arc<dyn Fn(Duration) + Send + Sync>);

impl fmt::Debug for SyncObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SyncObserver")
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 64 * 1024 * 1024,
            segment_age_max: Duration::from_secs(600),
            index_interval_bytes: 4096,
            batch_bytes_max: 8 * 1024 * 1024,
            group_commit: GroupCommitPolicy::default(),
            producers_max: 100_000,
            sync_observer: None,
            sync_activity: None,
            page_cache_bytes: Some(DEFAULT_PAGE_CACHE_BYTES),
        }
    }
}

impl LogConfig {
    /// Largest segment the index can address (positions are 32-bit).
    pub const SEGMENT_BYTES_LIMIT: u64 = floe_wire::admin::MAX_SEGMENT_BYTES;

    /// Checks the settings; the log refuses to open with invalid ones.
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes_max == 0 || self.segment_bytes_max > Self::SEGMENT_BYTES_LIMIT {
            return Err(format!(
                "segment_bytes_max {} must be in 1..={}",
                self.segment_bytes_max,
                Self::SEGMENT_BYTES_LIMIT
            ));
        }
        if self.batch_bytes_max == 0 || self.batch_bytes_max > floe_wire::batch::MAX_BATCH_BYTES {
            return Err(format!(
                "batch_bytes_max {} must be in 1..={}",
                self.batch_bytes_max,
                floe_wire::batch::MAX_BATCH_BYTES
            ));
        }
        if self.producers_max == 0 {
            return Err("producers_max must be at least 1".into());
        }
        Ok(())
    }
}

/// What retention may delete: sealed segments beyond these bounds, oldest first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at most this many bytes of segments (the active one included in the count).
    pub bytes_max: Option<u64>,
    /// Delete sealed segments whose newest record is older than this (milliseconds).
    pub age_max_ms: Option<u64>,
}

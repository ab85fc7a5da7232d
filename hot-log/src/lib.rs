//! `floe-hot-log`: the durable local segment log that keeps the recent part of a partition.
//!
//! A [`Log`] is one directory of segments named by base offset. Appends are validated,
//! stamped with their offsets and written to the page cache; a syncer thread group-commits
//! them with `fdatasync` ([`GroupCommitPolicy`]). Reads return whole stored batches. Recovery
//! scans only the active segment. Storage sits behind [`Storage`] so tests can crash it at any
//! point ([`CrashStorage`]).
//!
//! This crate knows nothing of streams, sockets or object storage; tiering decides what
//! retention may delete through [`Log::apply_retention`]'s callback.

mod activity;
mod config;
mod epoch_history;
mod error;
mod group_commit;
mod log;
mod producer_state;
mod segment;
mod state_file;
pub mod storage;

pub use activity::{BUSY_WINDOW, SyncActivity, Syncing};
pub use config::{LogConfig, RetentionPolicy, SyncObserver};
pub use epoch_history::{EpochHistory, EpochStart};
pub use error::LogError;
pub use group_commit::{GroupCommitPolicy, Pending, SyncDecision};
pub use log::{Appended, Log, LogStats, ReadBatches, Repair, SealedSegment, SyncStatus};
pub use producer_state::PRODUCER_BATCHES_REMEMBERED;
pub use segment::IndexEntry;
pub use storage::{CrashStorage, FsStorage, Storage, StorageFile};

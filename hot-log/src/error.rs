//! The log's errors, grouped by what the caller can do about them.

use std::io;
use std::path::PathBuf;

use floe_wire::{BatchError, LeaderEpoch, Offset};

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The batch is malformed; the producer must not resend it as is.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// A producer sent a control batch; only a partition's leader writes those.
    #[error("a control batch from a producer: only a partition's leader writes control batches")]
    ControlBatch,
    #[error("batch of {size} bytes exceeds the log's limit of {max}")]
    BatchTooLarge { size: usize, max: u32 },
    /// The offset is not in the log; the caller may retry from `log_start` or `log_end`.
    #[error("offset {requested} is outside the log [{log_start}, {log_end})")]
    OffsetOutOfRange {
        requested: Offset,
        log_start: Offset,
        log_end: Offset,
    },
    /// Truncation must land on a batch boundary.
    #[error("offset {offset} is inside the batch starting at {batch_base}")]
    NotBatchBoundary { offset: Offset, batch_base: Offset },
    /// A replicated batch does not continue the log.
    #[error("replicated batch starts at {found}, the log ends at {expected}")]
    NonContiguous { expected: Offset, found: Offset },
    /// A write from a leader epoch older than one this log has already seen.
    #[error("leader epoch {epoch} is older than the log's latest epoch {latest}")]
    StaleEpoch {
        epoch: LeaderEpoch,
        latest: LeaderEpoch,
    },
    /// The producer was replaced by a newer epoch of the same producer id.
    #[error("producer {producer_id} epoch {epoch} is fenced by epoch {current}")]
    ProducerFenced {
        producer_id: i64,
        epoch: u16,
        current: u16,
    },
    /// A sequence gap: the producer must resend from `expected`.
    #[error("producer {producer_id}: sequence {found}, expected {expected}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        found: i32,
    },
    /// Stored data failed validation: the file and byte position say where.
    #[error("corrupt data in {} at byte {position}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        position: u64,
        reason: String,
    },
    /// A copy offered to replace a damaged sealed segment is not that segment's batches
    /// ([`crate::Log::replace_sealed`]); nothing was changed.
    #[error("the copy for the sealed segment at {base_offset} does not match it: {reason}")]
    ReplacementMismatch { base_offset: Offset, reason: String },
    /// The disk is full (or the quota spent): the write was undone and the log stays
    /// writable. Retry once space is freed; nothing of it was written.
    #[error("no space left for {}: nothing was written; retry once space is freed", path.display())]
    DiskFull { path: PathBuf },
    /// An earlier write or sync failed; the log refuses writes until it is reopened.
    #[error("log refuses writes after an earlier I/O failure ({cause}); reopen it to recover")]
    Failed { cause: io::ErrorKind },
    /// The configuration is unusable.
    #[error("invalid log configuration: {0}")]
    InvalidConfig(String),
    /// The log was closed.
    #[error("log is closed")]
    Closed,
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl LogError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { op, path, source }
    }

    /// The error of a write whose effects are undone (or never were): a full disk is
    /// [`LogError::DiskFull`], which leaves the log writable; any other failure stays an
    /// I/O failure. Never for a sync of the log's data: a failed sync is never retried.
    pub(crate) fn undone_write(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> LogError {
        let path = path.into();
        move |source| match source.kind() {
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
                LogError::DiskFull { path }
            }
            _ => LogError::Io { op, path, source },
        }
    }

    /// Whether the log must be reopened before it accepts writes again.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            LogError::Failed { .. } | LogError::Io { .. } | LogError::Corrupt { .. }
        )
    }
}

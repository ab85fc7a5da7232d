//! A partition whose log refused to open as corrupt: damaged data that recovery must not cut
//! (rot in the active segment, a damaged sealed segment without its index). The broker holds
//! it in the `corrupt` state: it refuses the partition's publishes and fetches, naming the
//! file and byte, while its other partitions serve. Nothing here changes the files; leaving
//! the state takes an operator's repair (or the data healed from elsewhere) and a reopen.

use std::path::PathBuf;

use floe_hot_log::LogError;

/// Where a partition's log is damaged, as its open reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CorruptPartition {
    pub stream: String,
    pub partition: u32,
    /// The damaged file.
    pub file: PathBuf,
    /// The first damaged byte in it (the start of the damaged batch).
    pub position: u64,
    /// What the open found there.
    pub reason: String,
}

impl CorruptPartition {
    /// The corrupt state of `stream`'s `partition` when its open failed with `error`; `None`
    /// when the error is not corruption (an I/O failure, a bad configuration).
    pub(crate) fn from_open(stream: &str, partition: u32, error: &LogError) -> Option<Self> {
        let LogError::Corrupt {
            file,
            position,
            reason,
        } = error
        else {
            return None;
        };
        Some(CorruptPartition {
            stream: stream.to_string(),
            partition,
            file: file.clone(),
            position: *position,
            reason: reason.clone(),
        })
    }
}

impl std::fmt::Display for CorruptPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream {} partition {} is corrupt: {} is damaged at byte {} ({}); it refuses \
             publishes and fetches until an operator repairs it",
            self.stream,
            self.partition,
            self.file.display(),
            self.position,
            self.reason
        )
    }
}

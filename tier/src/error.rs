//! The tier's errors, grouped by what the caller can do: retry, give up (fenced, conflict),
//! look elsewhere (not found, out of range) or alarm (corrupt, invalid configuration).

use std::sync::Arc;

use floe_wire::{LeaderEpoch, Offset};

/// What went wrong in the tier. Cloneable so that one failed chunk fetch can be reported to
/// every reader that waited for it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TierError {
    /// The object store failed or was unreachable; retrying may succeed.
    #[error("object store unavailable during {operation} of {key}")]
    Unavailable {
        operation: &'static str,
        key: String,
        #[source]
        source: Arc<object_store::Error>,
    },
    /// The object does not exist.
    #[error("object {key} not found")]
    NotFound { key: String },
    /// An object's bytes are not what its format promises; never served.
    #[error("object {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: CorruptReason },
    /// A local sealed segment does not hold the batches its metadata promises: a batch
    /// fails its checksum (rot), or the data does not follow on. Nothing of it is uploaded;
    /// a [`CorruptReason::Batch`] position is a byte position in `file`.
    #[error("local segment at {base_offset} ({}) cannot be tiered: {reason}", file.display())]
    LocalSegment {
        base_offset: Offset,
        file: std::path::PathBuf,
        reason: CorruptReason,
    },
    /// The local log lacks data between the tier's end and its first sealed segment.
    #[error("the local log continues at {local_start}, beyond the tier's end {tier_end}")]
    LocalGap {
        tier_end: Offset,
        local_start: Offset,
    },
    /// Reading a local segment failed.
    #[error("reading local segment at {base_offset}")]
    LocalRead {
        base_offset: Offset,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The manifest has a commit from a newer leader epoch; this writer must stop.
    #[error("fenced: manifest epoch {committed} is newer than writer epoch {writer}")]
    Fenced {
        writer: LeaderEpoch,
        committed: LeaderEpoch,
    },
    /// The change no longer applies to the manifest as it now is.
    #[error("manifest change rejected: {0}")]
    Rejected(#[from] crate::manifest::ChangeError),
    /// Uploaded objects waited for their commit beyond the uploader's commit window: none of
    /// them was committed, since the collector may delete them from now on. A later run
    /// uploads their segments again; nothing local was deleted for them.
    #[error(
        "objects from offset {base_offset} waited {waited_ms} ms for their commit, beyond the \
         commit window of {window_ms} ms; they are left to the collector"
    )]
    CommitWindowPassed {
        base_offset: Offset,
        waited_ms: i64,
        window_ms: i64,
    },
    /// Too many writers kept winning the race for the next manifest version.
    #[error("lost the race for manifest version {version} {attempts} times")]
    Contended { version: u64, attempts: u32 },
    /// A manifest or checkpoint found in the bucket does not decode or does not follow the
    /// previous state.
    #[error("manifest {key} is invalid: {reason}")]
    InvalidManifest { key: String, reason: String },
    /// The offset is not in the tier.
    #[error("offset {requested} is outside the tier [{tier_start}, {tier_end})")]
    OffsetOutOfRange {
        requested: Offset,
        tier_start: Offset,
        tier_end: Offset,
    },
    /// A setting or URL cannot be used.
    #[error("invalid tier configuration: {0}")]
    Config(String),
    /// The chunk cache failed (its disk directory, most likely).
    #[error("chunk cache: {0}")]
    Cache(String),
    /// A write or delete on a store opened read-only ([`crate::TierStore::read_only`]): a
    /// bug in the caller, never sent to the store.
    #[error("{operation} of {key} refused: the store is read-only")]
    ReadOnly {
        operation: &'static str,
        key: String,
    },
}

/// Why bytes were judged corrupt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorruptReason {
    #[error("object of {size} bytes is too short for a trailer")]
    TooShort { size: u64 },
    #[error("trailer magic is wrong")]
    Magic,
    #[error("unsupported footer version {0}")]
    Version(u8),
    #[error("footer length {footer_len} does not fit the object of {size} bytes")]
    FooterLength { footer_len: u32, size: u64 },
    #[error("footer checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    FooterChecksum { stored: u32, computed: u32 },
    #[error("footer field {0} is inconsistent")]
    Field(&'static str),
    #[error("data checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    DataChecksum { stored: u32, computed: u32 },
    /// Damaged data: a batch that does not parse, fails its checksum or does not follow
    /// on, starting at byte `position`.
    #[error("batch at position {position}: {detail}")]
    Batch { position: u64, detail: String },
}

impl TierError {
    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TierError::Unavailable { .. } | TierError::Contended { .. } | TierError::Cache(_)
        )
    }

    /// A local-directory store's own file I/O failed (a full disk, most likely): retryable,
    /// like any store that is unavailable.
    pub(crate) fn local_io(operation: &'static str, key: &str, source: std::io::Error) -> Self {
        TierError::Unavailable {
            operation,
            key: key.to_string(),
            source: Arc::new(object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(source),
            }),
        }
    }

    pub(crate) fn store(operation: &'static str, key: &str, source: object_store::Error) -> Self {
        match source {
            object_store::Error::NotFound { .. } => TierError::NotFound {
                key: key.to_string(),
            },
            source => TierError::Unavailable {
                operation,
                key: key.to_string(),
                source: Arc::new(source),
            },
        }
    }
}

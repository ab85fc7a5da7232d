//! The tier manifest: a log of versions in the bucket saying which segment objects hold a
//! partition's tiered data. [`ManifestState`] is the pure core (what a change does, and
//! whether it may); [`ManifestLog`] reads and writes the versions and checkpoints.

mod file;
mod log;
mod state;

pub use log::{CHECKPOINT_INTERVAL_DEFAULT, ManifestLog};

/// Why a manifest document read from the bucket was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid manifest document: {0}")]
pub struct DocumentError(String);

/// Decodes a manifest version document (`{version:020}.json`): its number and change.
pub fn decode_version(bytes: &[u8]) -> Result<(u64, Change), DocumentError> {
    file::decode_version(bytes)
        .map(|doc| (doc.version, doc.change))
        .map_err(DocumentError)
}

/// Decodes a checkpoint document (`{version:020}.checkpoint.json`) into the state it holds.
pub fn decode_checkpoint(bytes: &[u8]) -> Result<ManifestState, DocumentError> {
    file::decode_checkpoint(bytes)
        .map(|doc| doc.state)
        .map_err(DocumentError)
}

/// Encodes a version document, as [`ManifestLog::commit`] writes it.
pub fn encode_version(version: u64, change: &Change) -> bytes::Bytes {
    file::encode(&file::new_version(version, change))
}
pub use state::{
    Change, ChangeError, MANIFEST_FORMAT, ManifestState, PENDING_DELETION_KEEP_MS, PendingDeletion,
    TieredSegment,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Format 1 documents as written in docs/tiering.md (stable: never edit, only add).
    const VERSION_V1: &[u8] = include_bytes!("../../fuzz/seeds/manifest_decode/version-1.json");
    const CHECKPOINT_V1: &[u8] =
        include_bytes!("../../fuzz/seeds/manifest_decode/checkpoint-1.json");

    #[test]
    fn format_1_documents_decode_and_apply() {
        let state = decode_checkpoint(CHECKPOINT_V1).expect("checkpoint");
        assert_eq!((state.version, state.tier_end().get()), (6, 1000));
        let (version, change) = decode_version(VERSION_V1).expect("version");
        assert_eq!(version, 7);
        let next = state.apply(&change).expect("applies");
        assert_eq!(next.version, 7);
        assert_eq!(next.start_offset().get(), 1000);
        assert_eq!(next.tier_end().get(), 2000);
        assert_eq!(next.pending_deletion.len(), 1);
        assert_eq!(decode_version(&encode_version(7, &change)), Ok((7, change)));
    }

    #[test]
    fn documents_with_unknown_fields_or_formats_are_refused() {
        let unknown =
            String::from_utf8_lossy(VERSION_V1).replace("\"epoch\": 3,", "\"epoch\": 3, \"x\": 1,");
        assert!(decode_version(unknown.as_bytes()).is_err());
        let future = String::from_utf8_lossy(VERSION_V1).replace("\"format\": 1", "\"format\": 2");
        assert!(decode_version(future.as_bytes()).is_err());
        assert!(decode_checkpoint(b"{").is_err());
    }
}

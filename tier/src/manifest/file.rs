//! The JSON documents of the manifest log: a version (one change) and a checkpoint (a whole
//! state). Decoding is bounded and checks the format number.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state::{Change, MANIFEST_FORMAT, ManifestState};

/// Largest manifest document a reader accepts.
pub(crate) const DOCUMENT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// `{version:020}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VersionFile {
    pub format: u32,
    pub version: u64,
    pub change: Change,
}

/// `{version:020}.checkpoint.json`: the state after `state.version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointFile {
    pub format: u32,
    pub state: ManifestState,
}

pub(crate) fn encode<T: Serialize>(doc: &T) -> Bytes {
    // Serialising these plain structs into memory cannot fail.
    Bytes::from(serde_json::to_vec_pretty(doc).unwrap_or_default())
}

pub(crate) fn decode_version(bytes: &[u8]) -> Result<VersionFile, String> {
    let doc: VersionFile = decode(bytes)?;
    check_format(doc.format)?;
    Ok(doc)
}

pub(crate) fn decode_checkpoint(bytes: &[u8]) -> Result<CheckpointFile, String> {
    let doc: CheckpointFile = decode(bytes)?;
    check_format(doc.format)?;
    doc.state.validate()?;
    Ok(doc)
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    if bytes.len() > DOCUMENT_BYTES_MAX {
        return Err(format!("{} bytes is too large", bytes.len()));
    }
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

fn check_format(format: u32) -> Result<(), String> {
    if format == MANIFEST_FORMAT {
        Ok(())
    } else {
        Err(format!("unsupported manifest format {format}"))
    }
}

pub(crate) fn new_version(version: u64, change: &Change) -> VersionFile {
    VersionFile {
        format: MANIFEST_FORMAT,
        version,
        change: change.clone(),
    }
}

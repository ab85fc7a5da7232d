//! The local catalog of streams, kept in the data directory until a controlplane assigns
//! partitions: `catalog.json`, replaced atomically on every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use floe_wire::AckMode;
use serde::{Deserialize, Serialize};

use crate::state_file::{StateFileError, write_atomically};

/// Why the catalog could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a catalog")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: unsupported catalog version {version}")]
    Version { path: PathBuf, version: u32 },
    #[error("cannot encode the catalog")]
    Encode(#[source] serde_json::Error),
    #[error(transparent)]
    Write(#[from] StateFileError),
}

type Result<T, E = CatalogError> = std::result::Result<T, E>;

/// A stream's persisted definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamEntry {
    pub partitions: u32,
    /// Stored as its lowercase name: `none`, `leader` or `quorum`.
    pub ack_mode: AckMode,
    pub segment_bytes: Option<u64>,
    pub segment_age_ms: Option<u64>,
    /// Sealed segments beyond these leave the local disk once they are tiered.
    pub local_retention_bytes: Option<u64>,
    pub local_retention_ms: Option<u64>,
    /// Retention of the whole partition, tier included.
    pub retention_bytes: Option<u64>,
    pub retention_ms: Option<u64>,
    /// When the controlplane created the stream (its incarnation); absent for streams
    /// created on a broker without a controlplane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
    /// Replicas per partition, as the controlplane assigns them; absent or 1: the partition
    /// lives on this broker alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    /// The partitions this broker serves; absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Vec<u32>>,
    /// Deleted: its logs are gone and its objects are being deleted from the tier. The name
    /// stays taken until they are.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
}

impl StreamEntry {
    /// The ids of the partitions this broker serves, in order.
    pub fn held_ids(&self) -> impl Iterator<Item = u32> + '_ {
        let all = self.held.is_none().then_some(0..self.partitions);
        all.into_iter()
            .flatten()
            .chain(self.held.iter().flatten().copied())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    version: u32,
    streams: BTreeMap<String, StreamEntry>,
}

const CATALOG_VERSION: u32 = 1;

/// The streams this broker serves, persisted in `catalog.json`.
#[derive(Debug)]
pub struct Catalog {
    path: PathBuf,
    streams: BTreeMap<String, StreamEntry>,
}

impl Catalog {
    /// Loads the catalog in `data_dir`, or an empty one when there is none yet.
    pub fn load(data_dir: &Path) -> Result<Catalog> {
        let path = data_dir.join("catalog.json");
        let streams = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: CatalogFile =
                    serde_json::from_slice(&bytes).map_err(|source| CatalogError::Parse {
                        path: path.clone(),
                        source,
                    })?;
                if file.version != CATALOG_VERSION {
                    return Err(CatalogError::Version {
                        path,
                        version: file.version,
                    });
                }
                file.streams
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(CatalogError::Read { path, source }),
        };
        Ok(Catalog { path, streams })
    }

    pub fn streams(&self) -> &BTreeMap<String, StreamEntry> {
        &self.streams
    }

    pub fn get(&self, name: &str) -> Option<&StreamEntry> {
        self.streams.get(name)
    }

    /// Adds or removes a stream and persists the catalog before returning.
    pub fn update(&mut self, name: &str, entry: Option<StreamEntry>) -> Result<()> {
        let mut next = self.streams.clone();
        match entry {
            Some(e) => next.insert(name.to_string(), e),
            None => next.remove(name),
        };
        self.persist(&next)?;
        self.streams = next;
        Ok(())
    }

    fn persist(&self, streams: &BTreeMap<String, StreamEntry>) -> Result<()> {
        let file = CatalogFile {
            version: CATALOG_VERSION,
            streams: streams.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(CatalogError::Encode)?;
        Ok(write_atomically(&self.path, &bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_survive_a_reload_and_unknown_fields_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut catalog = Catalog::load(dir.path()).expect("load");
        let entry = StreamEntry {
            partitions: 3,
            ack_mode: floe_wire::AckMode::Leader,
            segment_bytes: Some(1 << 20),
            segment_age_ms: None,
            local_retention_bytes: Some(1 << 30),
            local_retention_ms: None,
            retention_bytes: None,
            retention_ms: Some(60_000),
            created_at_ms: Some(1_700_000_000_000),
            replication_factor: None,
            held: Some(vec![0, 2]),
            deleting: false,
        };
        catalog
            .update("orders", Some(entry.clone()))
            .expect("update");
        let reloaded = Catalog::load(dir.path()).expect("reload");
        assert_eq!(reloaded.get("orders"), Some(&entry));
        std::fs::write(
            dir.path().join("catalog.json"),
            br#"{"version":1,"streams":{},"extra":1}"#,
        )
        .expect("write");
        let err = Catalog::load(dir.path()).expect_err("unknown field accepted");
        let CatalogError::Parse { source, .. } = &err else {
            panic!("{err}");
        };
        assert!(source.to_string().contains("extra"), "{source}");
    }
}

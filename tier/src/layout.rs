//! Where the tier keeps things in the bucket: key names for segments, manifest versions and
//! checkpoints. The names are persisted: stable, and parsed back by collectors and readers.
//!
//! ```text
//! {prefix}/{stream}/{partition}/segments/{base_offset:020}-{epoch}-{uuid}.seg
//! {prefix}/{stream}/{partition}/manifest/{version:020}.json
//! {prefix}/{stream}/{partition}/manifest/{version:020}.checkpoint.json
//! ```

use std::fmt;

use floe_wire::{LeaderEpoch, Offset};
use object_store::path::Path;

use crate::TierError;

/// Stable key suffixes.
pub(crate) const SEGMENT_EXT: &str = ".seg";
pub(crate) const VERSION_EXT: &str = ".json";
pub(crate) const CHECKPOINT_EXT: &str = ".checkpoint.json";

/// One partition's place in the bucket, below the store's prefix. The tier knows the stream
/// only as the string it is given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionPath {
    stream: String,
    partition: u32,
}

impl PartitionPath {
    /// `stream` must be one path segment: non-empty, without `/`, and not `.` or `..`.
    pub fn new(stream: &str, partition: u32) -> Result<PartitionPath, TierError> {
        if !is_path_segment(stream) {
            return Err(TierError::Config(format!(
                "stream {stream:?} is not a single path segment"
            )));
        }
        Ok(PartitionPath {
            stream: stream.to_string(),
            partition,
        })
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// `{stream}/{partition}`, relative to the store's prefix.
    pub(crate) fn relative(&self) -> String {
        format!("{}/{}", self.stream, self.partition)
    }

    pub(crate) fn segments_dir(&self) -> String {
        format!("{}/segments", self.relative())
    }

    pub(crate) fn manifest_dir(&self) -> String {
        format!("{}/manifest", self.relative())
    }

    pub(crate) fn segment_key(&self, name: &SegmentName) -> String {
        format!("{}/{name}", self.segments_dir())
    }

    pub(crate) fn version_key(&self, version: u64) -> String {
        format!("{}/{version:020}{VERSION_EXT}", self.manifest_dir())
    }

    pub(crate) fn checkpoint_key(&self, version: u64) -> String {
        format!("{}/{version:020}{CHECKPOINT_EXT}", self.manifest_dir())
    }
}

impl fmt::Display for PartitionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.stream, self.partition)
    }
}

pub(crate) fn is_path_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && Path::parse(s).is_ok()
}

/// The file name of a segment object: `{base_offset:020}-{epoch}-{uuid}.seg`. The uuid makes
/// every upload's key unique, so a retried or racing upload never overwrites another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentName(String);

impl SegmentName {
    pub(crate) fn generate(base_offset: Offset, epoch: LeaderEpoch) -> SegmentName {
        SegmentName(format!(
            "{:020}-{epoch}-{}{SEGMENT_EXT}",
            base_offset.get(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// Parses a name made by [`SegmentName::generate`]; returns its base offset and epoch.
    pub fn parse(name: &str) -> Option<(SegmentName, Offset, LeaderEpoch)> {
        let stem = name.strip_suffix(SEGMENT_EXT)?;
        let mut parts = stem.splitn(3, '-');
        let base = parts.next()?;
        let epoch = parts.next()?;
        let id = parts.next()?;
        if base.len() != 20 || !base.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let base = Offset::new(base.parse().ok()?);
        let epoch = LeaderEpoch::new(epoch.parse().ok()?);
        Some((SegmentName(name.to_string()), base, epoch))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for SegmentName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SegmentName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SegmentName::parse(&s)
            .map(|(name, _, _)| name)
            .ok_or_else(|| serde::de::Error::custom(format!("not a segment name: {s:?}")))
    }
}

/// Parses `{version:020}{ext}`.
pub(crate) fn parse_version(name: &str, ext: &str) -> Option<u64> {
    let stem = name.strip_suffix(ext)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_sort_by_offset() {
        let a = SegmentName::generate(Offset::new(9), LeaderEpoch::new(3));
        let b = SegmentName::generate(Offset::new(10), LeaderEpoch::new(1));
        assert!(a < b);
        let (parsed, base, epoch) = SegmentName::parse(a.as_str()).expect("parses");
        assert_eq!(
            (parsed, base, epoch),
            (a, Offset::new(9), LeaderEpoch::new(3))
        );
        assert!(SegmentName::parse("00000000000000000009-3-zz.seg").is_none());
    }

    #[test]
    fn version_names_exclude_checkpoints() {
        let p = PartitionPath::new("orders", 2).expect("valid");
        let key = p.version_key(7);
        assert_eq!(key, "orders/2/manifest/00000000000000000007.json");
        let name = key.rsplit('/').next().expect("has a name");
        assert_eq!(parse_version(name, VERSION_EXT), Some(7));
        let checkpoint = p.checkpoint_key(7);
        let name = checkpoint.rsplit('/').next().expect("has a name");
        assert_eq!(parse_version(name, VERSION_EXT), None);
        assert_eq!(parse_version(name, CHECKPOINT_EXT), Some(7));
        assert!(PartitionPath::new("a/b", 0).is_err());
        assert!(PartitionPath::new("..", 0).is_err());
    }
}

//! The number of a partition within its stream.

use std::fmt;

/// A partition of a stream, numbered from 0 to the stream's partition count minus one.
///
/// Sent as a little-endian `u32`; a plain number in JSON.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct PartitionId(u32);

impl PartitionId {
    /// A partition id from its raw value.
    pub const fn new(value: u32) -> PartitionId {
        PartitionId(value)
    }

    /// The raw value.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<PartitionId> for u32 {
    fn from(partition: PartitionId) -> u32 {
        partition.0
    }
}

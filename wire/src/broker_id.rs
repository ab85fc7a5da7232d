//! The identity of a broker in its cluster.

use std::fmt;

/// A broker's id, assigned by the controlplane and stable across restarts.
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
pub struct BrokerId(u32);

impl BrokerId {
    /// A broker id from its raw value.
    pub const fn new(value: u32) -> BrokerId {
        BrokerId(value)
    }

    /// The raw value.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

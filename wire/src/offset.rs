//! The position of a record in a partition: dense, increasing, 64-bit.

use std::fmt;

/// A record's position in its partition. Offsets start at 0 and increase by one per record.
///
/// Persisted and sent as a little-endian `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(u64);

impl Offset {
    /// The first offset of every partition.
    pub const ZERO: Offset = Offset(0);
    /// The largest offset a record may have; the next offset after it cannot be represented.
    pub const MAX: Offset = Offset(i64::MAX as u64);

    /// An offset from its raw value.
    pub const fn new(value: u64) -> Offset {
        Offset(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The offset `count` records later, or `None` past [`Offset::MAX`].
    pub fn checked_add(self, count: u64) -> Option<Offset> {
        self.0
            .checked_add(count)
            .filter(|v| *v <= Offset::MAX.0)
            .map(Offset)
    }

    /// How many records lie between `earlier` and `self` (zero when `earlier` is not earlier).
    pub fn distance_from(self, earlier: Offset) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Offset> for u64 {
    fn from(offset: Offset) -> u64 {
        offset.0
    }
}

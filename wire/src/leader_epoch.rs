//! The leader epoch: a partition's leadership term, as one type across every crate. No I/O
//! here.

use std::fmt;

/// A leadership term of one partition: assigned by the controlplane, increasing with every
/// new leader, stamped into every batch the leader of that term writes, and carried by every
/// replication message so that a replica can refuse an older term ("fencing").
///
/// [`LeaderEpoch::ZERO`] comes before any leader: the epoch of an empty log, of an entry not
/// known, and of a partition without replicas (which has one leader for its life).
///
/// Persisted and sent as a little-endian `u32` (4 bytes: the batch header, the epoch history
/// file, peer and metadata frames); in the REST API's JSON a plain number. Those formats are
/// stable: the type adds no byte.
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
pub struct LeaderEpoch(u32);

impl LeaderEpoch {
    /// Before any leader (see the type's doc).
    pub const ZERO: LeaderEpoch = LeaderEpoch(0);
    /// The last epoch: it has no [`LeaderEpoch::next`].
    pub const MAX: LeaderEpoch = LeaderEpoch(u32::MAX);

    /// An epoch from its raw value (as read from a frame, a file or a database row).
    pub const fn new(value: u32) -> LeaderEpoch {
        LeaderEpoch(value)
    }

    /// The raw value, as written to a frame, a file or a database row.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The epoch after this one, or `None` after [`LeaderEpoch::MAX`]: an epoch never wraps
    /// (a wrapped epoch would look older than every epoch before it, and be refused by every
    /// replica).
    pub const fn next(self) -> Option<LeaderEpoch> {
        match self.0.checked_add(1) {
            Some(value) => Some(LeaderEpoch(value)),
            None => None,
        }
    }
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<LeaderEpoch> for u32 {
    fn from(epoch: LeaderEpoch) -> u32 {
        epoch.0
    }
}

impl From<LeaderEpoch> for u64 {
    fn from(epoch: LeaderEpoch) -> u64 {
        u64::from(epoch.0)
    }
}

impl TryFrom<u64> for LeaderEpoch {
    type Error = EpochOutOfRange;

    /// An epoch from a wider integer (a database column), refused above [`LeaderEpoch::MAX`].
    fn try_from(value: u64) -> Result<LeaderEpoch, EpochOutOfRange> {
        u32::try_from(value)
            .map(LeaderEpoch)
            .map_err(|_| EpochOutOfRange { value })
    }
}

/// An integer too large to be a leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{value} is not a leader epoch (at most {})", LeaderEpoch::MAX)]
pub struct EpochOutOfRange {
    pub value: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_counts_up_and_refuses_to_wrap() {
        assert_eq!(LeaderEpoch::ZERO.next(), Some(LeaderEpoch::new(1)));
        assert_eq!(
            LeaderEpoch::new(u32::MAX - 1).next(),
            Some(LeaderEpoch::MAX)
        );
        assert_eq!(LeaderEpoch::MAX.next(), None);
    }

    #[test]
    fn json_is_a_plain_number() {
        let epoch = LeaderEpoch::new(7);
        assert_eq!(serde_json::to_string(&epoch).expect("serializes"), "7");
        assert_eq!(
            serde_json::from_str::<LeaderEpoch>("4294967295").expect("fits"),
            LeaderEpoch::MAX
        );
        assert!(serde_json::from_str::<LeaderEpoch>("4294967296").is_err());
        assert!(serde_json::from_str::<LeaderEpoch>("-1").is_err());
    }

    #[test]
    fn wider_integers_convert_only_when_they_fit() {
        assert_eq!(LeaderEpoch::try_from(9u64), Ok(LeaderEpoch::new(9)));
        assert_eq!(
            LeaderEpoch::try_from(1u64 << 32),
            Err(EpochOutOfRange { value: 1 << 32 })
        );
        assert_eq!(u64::from(LeaderEpoch::MAX), u64::from(u32::MAX));
    }
}

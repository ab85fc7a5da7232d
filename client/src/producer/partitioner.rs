//! Which partition a record goes to. Pure: no clock, no randomness beyond the starting
//! partition the caller picks.

use floe_wire::PartitionId;

/// The partition a key maps to: FNV-1a (64-bit) of the key bytes, modulo the partition
/// count. Stable across processes, versions and languages, so every client sends one key to
/// one partition. `partition_count` must be at least 1.
pub fn partition_for_key(key: &[u8], partition_count: u32) -> PartitionId {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = key.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    });
    PartitionId::new((hash % u64::from(partition_count.max(1))) as u32)
}

/// Chooses partitions for records without an explicit one.
///
/// Keyed records follow [`partition_for_key`]. Keyless records are sticky: they all go to
/// one partition while its open batch can take them; once that batch is closed (full, or
/// sent after lingering) the next partition takes over, round-robin. That fills whole
/// batches instead of spreading tiny ones over every partition, and still spreads the
/// records evenly over time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Partitioner {
    partition_count: u32,
    sticky: u32,
}

impl Partitioner {
    /// `start` spreads several producers' keyless records over different partitions.
    pub fn new(partition_count: u32, start: u32) -> Partitioner {
        let partition_count = partition_count.max(1);
        Partitioner {
            partition_count,
            sticky: start % partition_count,
        }
    }

    /// Output: the partition for a record with this key.
    pub fn choose(&self, key: Option<&[u8]>) -> PartitionId {
        match key {
            Some(key) => partition_for_key(key, self.partition_count),
            None => PartitionId::new(self.sticky),
        }
    }

    /// Output: the partition for a keyless record. `open_batch_takes(p)` says whether
    /// partition `p` has an open batch with room for the record; when the sticky partition
    /// has none, keyless records move on to the next partition.
    pub fn choose_keyless(
        &mut self,
        open_batch_takes: impl Fn(PartitionId) -> bool,
    ) -> PartitionId {
        if !open_batch_takes(PartitionId::new(self.sticky)) {
            self.advance();
        }
        PartitionId::new(self.sticky)
    }

    /// Output: whether a record with this explicit partition (if any) and key goes to
    /// `partition`, where the record before it went, given that the batch being filled there
    /// has room for it (the caller checks that): the choice [`Partitioner::choose_keyless`]
    /// would make without moving on.
    pub fn goes_to(
        &self,
        own: Option<PartitionId>,
        key: Option<&[u8]>,
        partition: PartitionId,
    ) -> bool {
        match own {
            Some(own) => own == partition,
            None => self.choose(key) == partition,
        }
    }

    fn advance(&mut self) {
        self.sticky = (self.sticky + 1) % self.partition_count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_maps_to_the_same_partition() {
        let first = partition_for_key(b"user-42", 12);
        for _ in 0..10 {
            assert_eq!(partition_for_key(b"user-42", 12), first);
        }
        assert!(first.get() < 12);
    }

    #[test]
    fn the_key_hash_is_fnv1a_64() {
        // Published FNV-1a 64 test vectors; other clients must reproduce these.
        assert_eq!(
            partition_for_key(b"", u32::MAX).get() as u64,
            0xcbf2_9ce4_8422_2325 % u64::from(u32::MAX)
        );
        assert_eq!(
            partition_for_key(b"a", u32::MAX).get() as u64,
            0xaf63_dc4c_8601_ec8c % u64::from(u32::MAX)
        );
        assert_eq!(
            partition_for_key(b"foobar", u32::MAX).get() as u64,
            0x8594_4171_f739_67e8 % u64::from(u32::MAX)
        );
    }

    #[test]
    fn keys_spread_over_every_partition() {
        let mut seen = [0u32; 8];
        for i in 0..8_000 {
            seen[partition_for_key(format!("key-{i}").as_bytes(), 8).get() as usize] += 1;
        }
        for count in seen {
            assert!((800..1200).contains(&count), "uneven spread: {seen:?}");
        }
    }

    #[test]
    fn keyless_records_stick_to_a_partition_while_its_batch_takes_them() {
        let mut partitioner = Partitioner::new(3, 4);
        assert_eq!(partitioner.choose(None), PartitionId::new(1));
        let open = |p: PartitionId| p == PartitionId::new(1);
        assert_eq!(partitioner.choose_keyless(open), PartitionId::new(1));
        assert_eq!(partitioner.choose_keyless(open), PartitionId::new(1));
        // Partition 1's batch closed (full or sent): move on, round-robin.
        let none_open = |_: PartitionId| false;
        assert_eq!(partitioner.choose_keyless(none_open), PartitionId::new(2));
        let open = |p: PartitionId| p == PartitionId::new(2);
        assert_eq!(partitioner.choose_keyless(open), PartitionId::new(2));
        assert_eq!(partitioner.choose_keyless(none_open), PartitionId::new(0));
        assert_eq!(
            partitioner.choose(Some(b"k")),
            partition_for_key(b"k", 3),
            "a key ignores the sticky partition"
        );
    }

    #[test]
    fn a_record_goes_where_the_one_before_it_went_only_by_the_same_choice() {
        let partitioner = Partitioner::new(3, 1);
        let sticky = PartitionId::new(1);
        assert!(
            partitioner.goes_to(None, None, sticky),
            "keyless: the sticky one"
        );
        assert!(!partitioner.goes_to(None, None, PartitionId::new(2)));
        assert!(partitioner.goes_to(Some(PartitionId::new(2)), None, PartitionId::new(2)));
        assert!(
            !partitioner.goes_to(Some(PartitionId::new(2)), Some(b"k"), sticky),
            "an explicit partition wins over the key"
        );
        let keyed = partition_for_key(b"k", 3);
        assert!(partitioner.goes_to(None, Some(b"k"), keyed));
        assert_eq!(
            partitioner.goes_to(None, Some(b"k"), sticky),
            keyed == sticky
        );
    }

    #[test]
    fn a_single_partition_stream_takes_everything() {
        let mut partitioner = Partitioner::new(1, 9);
        assert_eq!(partitioner.choose_keyless(|_| false), PartitionId::new(0));
        assert_eq!(partitioner.choose(Some(b"x")), PartitionId::new(0));
    }
}

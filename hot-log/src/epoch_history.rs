//! The leader-epoch history: for every leader epoch, the first offset written in it.
//! Replication uses it to find where a follower's log diverges from a new leader's.
//!
//! Persisted as the framed state file `leader-epoch` (magic `FLEP`), payload:
//! `u32 count, count × (u32 epoch, u64 start_offset)`, epochs and offsets strictly increasing.

use floe_wire::{LeaderEpoch, Offset};

use crate::state_file::PayloadReader;

pub(crate) const EPOCH_FILE: &str = "leader-epoch";
pub(crate) const EPOCH_MAGIC: [u8; 4] = *b"FLEP";

/// One leader epoch and the offset of its first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

/// Epochs in increasing order, each with its first offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    entries: Vec<EpochStart>,
}

impl EpochHistory {
    pub fn entries(&self) -> &[EpochStart] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochStart> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset`; ignored unless `epoch` is newer.
    pub(crate) fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if self.latest().is_some_and(|l| l.epoch >= epoch) {
            return false;
        }
        self.entries.push(EpochStart {
            epoch,
            start_offset,
        });
        true
    }

    /// Forgets epochs that start at or after `offset` (their records were truncated).
    pub(crate) fn truncate_from(&mut self, offset: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < offset);
        self.entries.len() != before
    }

    /// The largest epoch ≤ `epoch` and the offset where it ended (the next epoch's start, or
    /// `log_end`). `None` when every known epoch is newer than `epoch`.
    pub fn end_offset_for(
        &self,
        epoch: LeaderEpoch,
        log_end: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        let i = self.entries.partition_point(|e| e.epoch <= epoch);
        let found = self.entries.get(i.checked_sub(1)?)?;
        let end = self
            .entries
            .get(i)
            .map_or(log_end, |next| next.start_offset);
        Some((found.epoch, end))
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.entries.len() * 12);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.epoch.get().to_le_bytes());
            out.extend_from_slice(&e.start_offset.get().to_le_bytes());
        }
        out
    }

    pub(crate) fn decode(payload: &[u8]) -> Result<EpochHistory, String> {
        let mut r = PayloadReader::new(payload);
        let n = r.count(12)?;
        let mut history = EpochHistory::default();
        for _ in 0..n {
            let epoch = LeaderEpoch::new(r.u32()?);
            let start = Offset::new(r.u64()?);
            let ordered = history
                .latest()
                .is_none_or(|l| l.epoch < epoch && l.start_offset <= start);
            if !ordered {
                return Err(format!("epoch {epoch} at {start} is out of order"));
            }
            history.entries.push(EpochStart {
                epoch,
                start_offset: start,
            });
        }
        r.finish()?;
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(pairs: &[(u32, u64)]) -> EpochHistory {
        let mut h = EpochHistory::default();
        for &(e, s) in pairs {
            assert!(h.assign(epoch(e), Offset::new(s)));
        }
        h
    }

    fn epoch(value: u32) -> LeaderEpoch {
        LeaderEpoch::new(value)
    }

    #[test]
    fn end_offset_is_the_next_epochs_start_or_the_log_end() {
        let h = history(&[(1, 0), (3, 100), (4, 250)]);
        let end = Offset::new(300);
        assert_eq!(
            h.end_offset_for(epoch(1), end),
            Some((epoch(1), Offset::new(100)))
        );
        assert_eq!(
            h.end_offset_for(epoch(2), end),
            Some((epoch(1), Offset::new(100)))
        );
        assert_eq!(
            h.end_offset_for(epoch(3), end),
            Some((epoch(3), Offset::new(250)))
        );
        assert_eq!(h.end_offset_for(epoch(9), end), Some((epoch(4), end)));
        assert_eq!(h.end_offset_for(LeaderEpoch::ZERO, end), None);
    }

    #[test]
    fn older_epochs_are_not_assigned_and_truncation_drops_later_ones() {
        let mut h = history(&[(2, 0), (5, 10)]);
        assert!(!h.assign(epoch(4), Offset::new(20)));
        assert!(h.truncate_from(Offset::new(10)));
        assert_eq!(
            h.latest(),
            Some(EpochStart {
                epoch: epoch(2),
                start_offset: Offset::ZERO
            })
        );
    }

    #[test]
    fn encoding_round_trips_and_rejects_disorder() {
        let h = history(&[(1, 0), (7, 42)]);
        assert_eq!(EpochHistory::decode(&h.encode()), Ok(h));
        let mut bad = history(&[(7, 0)]).encode();
        bad.extend_from_slice(&1u32.to_le_bytes());
        bad.extend_from_slice(&5u64.to_le_bytes());
        bad[0] = 2;
        assert!(EpochHistory::decode(&bad).is_err());
    }
}

//! A replica's view of its own log: where it starts and ends, how much of it is durable,
//! and which leader epoch wrote each range (the epoch history).
//!
//! Log matching: one epoch has one leader, which assigns each offset once, so two logs that
//! hold an entry of the same epoch at the same offset hold the same entry *and* the same
//! prefix before it. Where two logs agree is therefore a prefix, found from the two epoch
//! histories alone ([`LogView::common_prefix`]).

use floe_wire::LeaderEpoch;

/// One leader epoch and the offset of its first entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: LeaderEpoch,
    pub start: u64,
}

/// Offsets `[start, end)` of the local log; `synced` is the durable end (`≤ end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogView {
    pub start: u64,
    pub end: u64,
    pub synced: u64,
    /// Increasing epochs and starts; every start in `[start, end)`, the first at `start`
    /// unless the log is empty.
    pub epochs: Vec<EpochStart>,
    /// The epoch of the entry just below `start` (gone from the local log: committed, and
    /// in object storage), 0 when `start` is 0 or it is not known. It keeps an emptied log
    /// comparable in an election: without it, a log reset to start at 124 would report
    /// itself as older than a stale log ending at 121.
    pub base_epoch: LeaderEpoch,
}

impl LogView {
    /// An empty log whose next offset is `start`.
    pub fn empty(start: u64) -> LogView {
        LogView::empty_after(start, LeaderEpoch::ZERO)
    }

    /// An empty log whose next offset is `start`, the entry before it being of `base_epoch`.
    pub fn empty_after(start: u64, base_epoch: LeaderEpoch) -> LogView {
        LogView {
            start,
            end: start,
            synced: start,
            epochs: Vec::new(),
            base_epoch,
        }
    }

    /// The epoch of the last entry, the one below the start for an empty log (0 if none).
    pub fn last_epoch(&self) -> LeaderEpoch {
        self.epochs.last().map_or(self.base_epoch, |e| e.epoch)
    }

    /// The epoch of the entry before `offset`: in the log, or just below its start; `None`
    /// when not known.
    pub fn epoch_before(&self, offset: u64) -> Option<LeaderEpoch> {
        if offset == self.start {
            return (self.base_epoch > LeaderEpoch::ZERO).then_some(self.base_epoch);
        }
        self.epoch_at(offset.checked_sub(1)?)
    }

    /// The epoch of the entry at `offset`, `None` outside `[start, end)`.
    pub fn epoch_at(&self, offset: u64) -> Option<LeaderEpoch> {
        if offset < self.start || offset >= self.end {
            return None;
        }
        let i = self.epochs.partition_point(|e| e.start <= offset);
        Some(self.epochs[i.checked_sub(1)?].epoch)
    }

    /// The epoch of the last durable entry (below the start, for an empty log), 0 when
    /// there is none.
    pub fn synced_epoch(&self) -> LeaderEpoch {
        if self.synced <= self.start {
            return self.base_epoch;
        }
        self.epoch_at(self.synced - 1).unwrap_or(LeaderEpoch::ZERO)
    }

    /// Records entries `[self.end, end)` written in `epoch`.
    pub fn append(&mut self, epoch: LeaderEpoch, end: u64) {
        debug_assert!(epoch >= self.last_epoch() && end >= self.end);
        if end > self.end && self.epochs.last().is_none_or(|last| epoch > last.epoch) {
            self.epochs.push(EpochStart {
                epoch,
                start: self.end,
            });
        }
        self.end = end;
    }

    /// Drops entries at and above `offset`.
    pub fn truncate(&mut self, offset: u64) {
        let offset = offset.max(self.start);
        if offset >= self.end {
            return;
        }
        self.end = offset;
        self.synced = self.synced.min(offset);
        self.epochs.retain(|e| e.start < offset);
    }

    /// Forgets entries below `start` (they left the local disk); the epoch in force at
    /// `start` is kept, starting there.
    pub fn advance_start(&mut self, start: u64) {
        if start <= self.start {
            return;
        }
        let start = start.min(self.end);
        if let Some(epoch) = self.epoch_at(start - 1) {
            self.base_epoch = epoch;
        }
        let keep = self
            .epochs
            .partition_point(|e| e.start <= start)
            .saturating_sub(1);
        self.epochs.drain(..keep);
        if let Some(first) = self.epochs.first_mut() {
            first.start = first.start.max(start);
        }
        if start == self.end {
            self.epochs.clear();
        }
        self.start = start;
        self.synced = self.synced.max(start);
    }

    /// Drops every entry; the next offset is `start`, the entry before it of `base_epoch`.
    pub fn reset(&mut self, start: u64, base_epoch: LeaderEpoch) {
        *self = LogView::empty_after(start, base_epoch);
    }

    /// The first offset that `epoch` did not write: the start of the next epoch, or the log
    /// end. `None` unless some entry of an epoch `≤ epoch` is present; otherwise the largest
    /// such epoch is returned with its end.
    pub fn end_of_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
        let i = self.epochs.partition_point(|e| e.epoch <= epoch);
        let found = self.epochs.get(i.checked_sub(1)?)?;
        let end = self.epochs.get(i).map_or(self.end, |next| next.start);
        Some((found.epoch, end))
    }

    /// The end of the longest prefix on which this log and `other` (given by its start, end
    /// and epoch history) agree. Below both logs' starts nothing is known: the answer is
    /// then the larger start, and the caller must not treat it as agreement of data.
    pub fn common_prefix(&self, other_epochs: &[EpochStart], other_end: u64) -> u64 {
        // Walk the other log's epochs from the newest; the first one this log also has
        // bounds the agreement.
        for (i, theirs) in other_epochs.iter().enumerate().rev() {
            let their_end = other_epochs.get(i + 1).map_or(other_end, |next| next.start);
            if let Some((epoch, our_end)) = self.end_of_epoch(theirs.epoch)
                && epoch == theirs.epoch
            {
                return our_end.min(their_end);
            }
        }
        // No epoch in common: agreement only on what precedes both histories.
        let ours = self.epochs.first().map_or(self.end, |e| e.start);
        let theirs = other_epochs.first().map_or(other_end, |e| e.start);
        ours.min(theirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(value: u32) -> LeaderEpoch {
        LeaderEpoch::new(value)
    }

    fn view(start: u64, end: u64, epochs: &[(u32, u64)]) -> LogView {
        LogView {
            start,
            end,
            synced: end,
            epochs: epochs
                .iter()
                .map(|&(value, start)| EpochStart {
                    epoch: epoch(value),
                    start,
                })
                .collect(),
            base_epoch: LeaderEpoch::ZERO,
        }
    }

    #[test]
    fn epoch_at_and_end_of_epoch() {
        let log = view(0, 30, &[(1, 0), (3, 10), (4, 25)]);
        assert_eq!(log.epoch_at(0), Some(epoch(1)));
        assert_eq!(log.epoch_at(9), Some(epoch(1)));
        assert_eq!(log.epoch_at(10), Some(epoch(3)));
        assert_eq!(log.epoch_at(29), Some(epoch(4)));
        assert_eq!(log.epoch_at(30), None);
        assert_eq!(log.end_of_epoch(epoch(1)), Some((epoch(1), 10)));
        assert_eq!(log.end_of_epoch(epoch(2)), Some((epoch(1), 10)));
        assert_eq!(log.end_of_epoch(epoch(3)), Some((epoch(3), 25)));
        assert_eq!(log.end_of_epoch(epoch(9)), Some((epoch(4), 30)));
        assert_eq!(log.end_of_epoch(LeaderEpoch::ZERO), None);
    }

    #[test]
    fn common_prefix_finds_the_divergence() {
        let leader = view(0, 30, &[(1, 0), (3, 10), (4, 25)]);
        // Same history, shorter.
        assert_eq!(
            leader.common_prefix(
                &[EpochStart {
                    epoch: epoch(1),
                    start: 0
                }],
                7
            ),
            7
        );
        // Diverged in epoch 2, which the leader never saw: agrees up to epoch 1's end.
        let follower = [
            EpochStart {
                epoch: epoch(1),
                start: 0,
            },
            EpochStart {
                epoch: epoch(2),
                start: 8,
            },
        ];
        assert_eq!(leader.common_prefix(&follower, 20), 8);
        // Has more of epoch 3 than the leader kept: agrees to where epoch 3 ended here.
        let follower = [
            EpochStart {
                epoch: epoch(1),
                start: 0,
            },
            EpochStart {
                epoch: epoch(3),
                start: 10,
            },
        ];
        assert_eq!(leader.common_prefix(&follower, 40), 25);
        // Empty follower.
        assert_eq!(leader.common_prefix(&[], 0), 0);
    }

    #[test]
    fn truncate_and_append_keep_the_history_consistent() {
        let mut log = view(0, 30, &[(1, 0), (3, 10), (4, 25)]);
        log.truncate(10);
        assert_eq!(
            log.epochs,
            vec![EpochStart {
                epoch: epoch(1),
                start: 0
            }]
        );
        assert_eq!((log.end, log.synced), (10, 10));
        log.append(epoch(5), 12);
        assert_eq!(log.epoch_at(11), Some(epoch(5)));
        assert_eq!(log.synced_epoch(), epoch(1));
        log.append(epoch(5), 14);
        assert_eq!(log.epochs.len(), 2);
    }

    #[test]
    fn an_emptied_log_keeps_the_epoch_below_its_start() {
        let mut log = view(0, 30, &[(1, 0), (3, 10), (4, 25)]);
        log.advance_start(30);
        assert_eq!((log.start, log.end), (30, 30));
        assert_eq!((log.last_epoch(), log.synced_epoch()), (epoch(4), epoch(4)));
        assert_eq!(log.epoch_before(30), Some(epoch(4)));
        let mut log = view(0, 30, &[(1, 0), (3, 10), (4, 25)]);
        log.advance_start(12);
        assert_eq!(
            (log.base_epoch, log.epoch_before(12)),
            (epoch(3), Some(epoch(3)))
        );
        log.truncate(12);
        assert_eq!(log.last_epoch(), epoch(3));
        log.reset(40, epoch(6));
        assert_eq!(
            (log.last_epoch(), log.synced_epoch(), log.end),
            (epoch(6), epoch(6), 40)
        );
        log.append(epoch(6), 45);
        assert_eq!(log.epoch_at(40), Some(epoch(6)));
        assert_eq!(LogView::empty(40).epoch_before(40), None);
    }
}

//! A leader's most recent appends, kept in memory as the stamped batches the log holds, so
//! that shipping them to followers reads neither the disk nor the page cache. Followers
//! normally ask for what was appended a moment ago; only a follower further behind than the
//! cache holds is served from the log.
//!
//! What must hold: every batch here is byte for byte the batch the log holds at its offsets.
//! So the cache only ever grows at the log end, and the driver clears it whenever the log is
//! truncated or reset, or the replica stops leading.

use std::collections::VecDeque;

use floe_hot_log::Log;
use floe_replication::{Batch, ReadLog, WireBatch};
use floe_wire::{BufferPool, LeaderEpoch, Offset};

use crate::budget::ByteBudget;

/// Record bytes a leader keeps per partition: one follower window (8 appends of 1 MiB).
pub(crate) const RECENT_BYTES_MAX: usize = 8 << 20;
/// Record bytes the broker keeps for all the partitions it leads. A follower that stops
/// acknowledging pins its partitions' copies; without this bound a broker leading many
/// partitions would hold 8 MiB for each of them exactly when a peer dies.
const BROKER_RECENT_BYTES_MAX: usize = 64 << 20;

/// Buffers for the copies, shared by every partition this broker leads.
static BUFFERS: BufferPool = BufferPool::new(16, 2 << 20);

/// The bytes of copies held across the partitions of this process.
static BROKER_BUDGET: ByteBudget = ByteBudget::new(BROKER_RECENT_BYTES_MAX, 0);

/// The newest batches of a leader's log, contiguous, ending at the newest append.
#[derive(Debug)]
pub(crate) struct RecentAppends {
    batches: VecDeque<WireBatch>,
    bytes: usize,
    bytes_max: usize,
    budget: &'static ByteBudget,
}

impl RecentAppends {
    /// Copies of at most `bytes_max` bytes, within the broker's budget.
    pub(crate) fn new(bytes_max: usize) -> RecentAppends {
        RecentAppends::within(bytes_max, &BROKER_BUDGET)
    }

    fn within(bytes_max: usize, budget: &'static ByteBudget) -> RecentAppends {
        RecentAppends {
            batches: VecDeque::new(),
            bytes: 0,
            bytes_max,
            budget,
        }
    }

    /// Input: `batch` as the producer sent it, just appended at `base_offset` in `epoch`.
    /// Keeps a stamped copy (the log stamps its own); the oldest batches go past the bound.
    pub(crate) fn push_appended(&mut self, batch: &[u8], base_offset: Offset, epoch: LeaderEpoch) {
        if batch.len() > self.bytes_max {
            self.clear();
            return;
        }
        let mut copy = BUFFERS.take(batch.len());
        copy.extend_from_slice(batch);
        let stamped = floe_wire::batch::stamp(&mut copy, base_offset, epoch)
            .ok()
            .and_then(|()| WireBatch::parse(copy.freeze()).ok());
        match stamped {
            Some(stamped) => self.push(stamped),
            // Not a batch: the log would have refused it. Nothing kept can be trusted to
            // continue the log.
            None => self.clear(),
        }
    }

    fn push(&mut self, batch: WireBatch) {
        if self
            .batches
            .back()
            .is_some_and(|last| last.end() != batch.base())
        {
            self.clear();
        }
        if self.budget.try_take(batch.size()).is_err() {
            // The broker holds all it may: this partition ships from its log until
            // followers release copies elsewhere. What it kept would no longer reach the
            // log end, so it goes too.
            self.clear();
            return;
        }
        self.bytes += batch.size();
        self.batches.push_back(batch);
        while self.bytes > self.bytes_max {
            self.drop_oldest();
        }
    }

    /// Forgets the batches wholly below `offset` (every follower holds them).
    pub(crate) fn release_below(&mut self, offset: u64) {
        while self.batches.front().is_some_and(|b| b.end() <= offset) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(batch) = self.batches.pop_front() {
            self.bytes -= batch.size();
            self.budget.release(batch.size());
        }
    }

    pub(crate) fn clear(&mut self) {
        self.batches.clear();
        self.budget.release(self.bytes);
        self.bytes = 0;
    }

    /// Whole batches from `from` on, about `max_bytes` together and at least one, when the
    /// cache holds the batch that starts at `from`.
    fn read(&self, from: u64, max_bytes: usize) -> Option<Vec<WireBatch>> {
        let first = self.batches.binary_search_by_key(&from, Batch::base).ok()?;
        let mut total = 0;
        let mut out = Vec::new();
        for batch in self.batches.range(first..) {
            if !out.is_empty() && total + batch.size() > max_bytes {
                break;
            }
            total += batch.size();
            out.push(batch.clone());
        }
        Some(out)
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for RecentAppends {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The log as the state machine reads it to ship batches: recent appends from memory, older
/// ones from the log.
pub(crate) struct ShippingLog<'a> {
    pub log: &'a Log,
    pub recent: &'a RecentAppends,
}

impl ReadLog<WireBatch> for ShippingLog<'_> {
    fn read(&self, from: u64, max_bytes: usize) -> Vec<WireBatch> {
        self.recent
            .read(from, max_bytes)
            .unwrap_or_else(|| ReadLog::read(self.log, from, max_bytes))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use floe_wire::BatchBuilder;

    use super::*;

    /// The bytes of batches, to compare what memory and the log return.
    fn batch_bytes(batches: &[WireBatch]) -> Vec<Bytes> {
        batches.iter().map(|b| b.bytes().clone()).collect()
    }

    /// A producer's batch of `records` records of 100 bytes (offsets and epoch unstamped).
    fn batch(records: u32) -> Bytes {
        let mut builder = BatchBuilder::new(1 << 20);
        for _ in 0..records {
            builder.push(1, None, &[7; 100], &[]).expect("fits");
        }
        builder.finish().expect("a batch")
    }

    #[test]
    fn recent_appends_are_read_back_stamped_as_the_log_holds_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = std::sync::Arc::new(floe_hot_log::FsStorage);
        let log = Log::open(storage, dir.path(), floe_hot_log::LogConfig::default()).expect("log");
        let mut recent = RecentAppends::new(1 << 20);
        for records in [3, 5, 2] {
            let sent = batch(records);
            let appended = log.append(&sent, LeaderEpoch::new(4)).expect("appended");
            recent.push_appended(&sent, appended.base_offset, LeaderEpoch::new(4));
        }
        let from_log = ReadLog::read(&log, 3, 1 << 20);
        let from_memory = recent.read(3, 1 << 20).expect("cached");
        assert_eq!(batch_bytes(&from_memory), batch_bytes(&from_log));
        assert_eq!(from_memory.len(), 2);
        assert_eq!(from_memory[0].epoch(), LeaderEpoch::new(4));
        // Not a batch start, or below what is kept: the log answers.
        assert!(recent.read(4, 1 << 20).is_none());
        recent.release_below(8);
        assert!(recent.read(3, 1 << 20).is_none());
        let shipping = ShippingLog {
            log: &log,
            recent: &recent,
        };
        assert_eq!(
            batch_bytes(&ReadLog::read(&shipping, 3, 1 << 20)),
            batch_bytes(&from_log)
        );
    }

    #[test]
    fn reads_stop_near_the_byte_budget_but_return_at_least_one_batch() {
        let mut recent = RecentAppends::new(1 << 20);
        let mut base = 0;
        for _ in 0..4 {
            recent.push_appended(&batch(10), Offset::new(base), LeaderEpoch::new(1));
            base += 10;
        }
        let one = recent.read(0, 1).expect("cached");
        assert_eq!(one.len(), 1);
        let size = one[0].size();
        assert_eq!(recent.read(0, 2 * size).expect("cached").len(), 2);
        assert_eq!(recent.read(10, 100 * size).expect("cached").len(), 3);
    }

    #[test]
    fn the_cache_is_bounded_and_restarts_where_the_log_does_not_continue() {
        let one = batch(10).len();
        let mut recent = RecentAppends::new(3 * one);
        for i in 0..5 {
            recent.push_appended(&batch(10), Offset::new(i * 10), LeaderEpoch::new(1));
        }
        assert_eq!(recent.bytes(), 3 * one);
        assert!(
            recent.read(10, 1 << 20).is_none(),
            "the oldest were dropped"
        );
        assert_eq!(recent.read(20, 1 << 20).expect("cached").len(), 3);
        // A batch that does not continue the newest one starts the cache over.
        recent.push_appended(&batch(10), Offset::new(100), LeaderEpoch::new(2));
        assert!(recent.read(40, 1 << 20).is_none());
        assert_eq!(recent.read(100, 1 << 20).expect("cached").len(), 1);
        // So does a batch larger than the whole cache, which is not kept.
        recent.push_appended(&batch(50), Offset::new(110), LeaderEpoch::new(2));
        assert_eq!(recent.bytes(), 0);
    }

    #[test]
    fn partitions_share_the_brokers_budget() {
        let one = batch(10).len();
        let budget: &'static ByteBudget = Box::leak(Box::new(ByteBudget::new(3 * one, 0)));
        let mut first = RecentAppends::within(1 << 20, budget);
        let mut second = RecentAppends::within(1 << 20, budget);
        for i in 0..2 {
            first.push_appended(&batch(10), Offset::new(i * 10), LeaderEpoch::new(1));
        }
        second.push_appended(&batch(10), Offset::new(0), LeaderEpoch::new(1));
        assert_eq!(budget.held(), 3 * one);
        // The budget is spent: the next copy is refused, and what the partition kept no
        // longer reaches its log end, so it goes too.
        second.push_appended(&batch(10), Offset::new(10), LeaderEpoch::new(1));
        assert_eq!(second.bytes(), 0);
        assert!(second.read(0, 1 << 20).is_none());
        assert_eq!(budget.held(), 2 * one);
        first.release_below(10);
        second.push_appended(&batch(10), Offset::new(20), LeaderEpoch::new(1));
        assert_eq!(second.read(20, 1 << 20).expect("cached").len(), 1);
        drop(first);
        drop(second);
        assert_eq!(budget.held(), 0);
    }
}

//! A read replica's bounded in-memory window of one partition's tail: whole batches, as the
//! leader stored them, contiguous from `start` to `end`. The replica's follower appends what
//! it fetched from the leader; consumers read from it; the oldest batches leave when the
//! window would exceed its byte budget.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use floe_wire::Offset;
use floe_wire::batch::{BatchError, BatchHeader};

/// One stored batch.
#[derive(Debug, Clone)]
struct Entry {
    base: Offset,
    next: Offset,
    bytes: Bytes,
}

/// Why fetched bytes could not join the window.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    #[error("a fetched batch is malformed: {0}")]
    Malformed(#[from] BatchError),
    #[error("fetched batches start at {found}, the window ends at {end}")]
    NotContiguous { found: Offset, end: Offset },
}

/// What a read of the window found.
#[derive(Debug, PartialEq, Eq)]
pub enum WindowRead {
    /// Whole batches from the one holding the offset asked for; `next` follows the last.
    Batches { bytes: Bytes, next: Offset },
    /// The offset is the window's end: nothing yet.
    AtEnd,
    /// The offset is below the window (history, or evicted).
    Below,
    /// The offset is beyond the window's end.
    Beyond,
}

#[derive(Debug)]
pub struct Window {
    entries: VecDeque<Entry>,
    /// The first offset held (equal to `end` when empty).
    start: Offset,
    /// The offset the next appended batch must start at.
    end: Offset,
    bytes: usize,
    max_bytes: usize,
}

impl Window {
    /// An empty window that starts at `start`.
    pub fn new(start: Offset, max_bytes: usize) -> Window {
        Window {
            entries: VecDeque::new(),
            start,
            end: start,
            bytes: 0,
            max_bytes: max_bytes.max(1),
        }
    }

    #[cfg(test)]
    pub fn start(&self) -> Offset {
        self.start
    }

    pub fn end(&self) -> Offset {
        self.end
    }

    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends the whole batches in `fetched` (a fetch response's records), which must
    /// continue at the window's end; then evicts the oldest batches beyond the budget (the
    /// newest batch always stays). A malformed or misplaced answer changes nothing.
    pub fn append(&mut self, fetched: &Bytes) -> Result<(), WindowError> {
        let mut parsed = Vec::new();
        let mut at = 0;
        let mut expected = self.end;
        while at < fetched.len() {
            let header = BatchHeader::parse(&fetched[at..])?;
            let len = header.batch_length as usize;
            if at + len > fetched.len() {
                return Err(BatchError::Truncated {
                    needed: at + len,
                    available: fetched.len(),
                }
                .into());
            }
            // A batch that starts below the end overlaps what is held: the leader's fetch
            // returns the batch holding the offset asked for. Skip what is already here.
            if header.next_offset() <= expected {
                at += len;
                continue;
            }
            if header.base_offset != expected {
                return Err(WindowError::NotContiguous {
                    found: header.base_offset,
                    end: expected,
                });
            }
            parsed.push(Entry {
                base: header.base_offset,
                next: header.next_offset(),
                bytes: fetched.slice(at..at + len),
            });
            expected = header.next_offset();
            at += len;
        }
        for entry in parsed {
            self.bytes += entry.bytes.len();
            self.end = entry.next;
            self.entries.push_back(entry);
        }
        while self.bytes > self.max_bytes && self.entries.len() > 1 {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.bytes.len();
            }
        }
        self.start = self.entries.front().map_or(self.end, |e| e.base);
        Ok(())
    }

    /// Restarts the window, empty, at `start` (the leader's log moved under it).
    pub fn reset(&mut self, start: Offset) {
        self.entries.clear();
        self.bytes = 0;
        self.start = start;
        self.end = start;
    }

    /// Whole batches from the one holding `from`, up to `max_bytes` (at least one batch).
    pub fn read(&self, from: Offset, max_bytes: usize) -> WindowRead {
        if from < self.start {
            return WindowRead::Below;
        }
        if from == self.end {
            return WindowRead::AtEnd;
        }
        if from > self.end {
            return WindowRead::Beyond;
        }
        let first = self.entries.partition_point(|e| e.next <= from);
        let mut out = BytesMut::new();
        let mut next = from;
        for entry in self.entries.iter().skip(first) {
            if !out.is_empty() && out.len() + entry.bytes.len() > max_bytes {
                break;
            }
            out.extend_from_slice(&entry.bytes);
            next = entry.next;
        }
        WindowRead::Batches {
            bytes: out.freeze(),
            next,
        }
    }
}

#[cfg(test)]
mod tests {
    use floe_wire::batch::BatchBuilder;

    use super::*;

    /// A batch of `count` records at `base`.
    fn batch(base: u64, count: usize) -> Bytes {
        let mut builder = BatchBuilder::new(1 << 20);
        for i in 0..count {
            builder
                .push(1, None, format!("v{i}").as_bytes(), &[])
                .expect("fits");
        }
        let mut bytes = BytesMut::from(&builder.finish().expect("a batch")[..]);
        floe_wire::batch::stamp(
            &mut bytes,
            Offset::new(base),
            floe_wire::LeaderEpoch::new(1),
        )
        .expect("stamped");
        bytes.freeze()
    }

    fn joined(batches: &[Bytes]) -> Bytes {
        let mut out = BytesMut::new();
        for b in batches {
            out.extend_from_slice(b);
        }
        out.freeze()
    }

    #[test]
    fn reads_from_the_batch_holding_the_offset() {
        let mut window = Window::new(Offset::new(10), 1 << 20);
        let (a, b) = (batch(10, 3), batch(13, 2));
        window
            .append(&joined(&[a.clone(), b.clone()]))
            .expect("appended");
        assert_eq!(
            (window.start(), window.end()),
            (Offset::new(10), Offset::new(15))
        );
        assert_eq!(
            window.read(Offset::new(14), 1 << 20),
            WindowRead::Batches {
                bytes: b.clone(),
                next: Offset::new(15)
            }
        );
        assert_eq!(
            window.read(Offset::new(11), 1),
            WindowRead::Batches {
                bytes: a,
                next: Offset::new(13)
            }
        );
        assert_eq!(window.read(Offset::new(15), 100), WindowRead::AtEnd);
        assert_eq!(window.read(Offset::new(16), 100), WindowRead::Beyond);
        assert_eq!(window.read(Offset::new(9), 100), WindowRead::Below);
    }

    #[test]
    fn evicts_the_oldest_beyond_the_budget_but_keeps_the_newest() {
        let (a, b, c) = (batch(0, 1), batch(1, 1), batch(2, 1));
        let mut window = Window::new(Offset::ZERO, a.len() * 2);
        window
            .append(&joined(&[a, b.clone(), c.clone()]))
            .expect("appended");
        assert_eq!(window.start(), Offset::new(1));
        assert_eq!(window.bytes(), b.len() + c.len());
        let mut tiny = Window::new(Offset::ZERO, 1);
        tiny.append(&batch(0, 5)).expect("appended");
        assert_eq!((tiny.start(), tiny.end()), (Offset::ZERO, Offset::new(5)));
    }

    #[test]
    fn overlap_is_skipped_and_gaps_or_garbage_change_nothing() {
        let mut window = Window::new(Offset::new(5), 1 << 20);
        window.append(&batch(5, 2)).expect("appended");
        // The leader answers from the batch holding the offset asked for.
        window
            .append(&joined(&[batch(5, 2), batch(7, 1)]))
            .expect("appended");
        assert_eq!(window.end(), Offset::new(8));
        assert_eq!(
            window.append(&batch(9, 1)),
            Err(WindowError::NotContiguous {
                found: Offset::new(9),
                end: Offset::new(8)
            })
        );
        let good = batch(8, 1);
        let cut = good.slice(..good.len() - 1);
        assert!(window.append(&cut).is_err());
        assert!(window.append(&Bytes::from_static(b"garbage")).is_err());
        assert_eq!(
            (window.start(), window.end()),
            (Offset::new(5), Offset::new(8))
        );
    }
}

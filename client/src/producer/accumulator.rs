//! Batching and linger decisions for one partition. Pure: the time is an argument, and the
//! shell attaches whatever it needs to each batch (`T`).
//!
//! Driving contract: [`Accumulator::push`] each record, or [`Accumulator::push_run`] the first
//! of several in a row and [`Run::push`] the others until one is not taken, then
//! [`Run::finish`]; [`Accumulator::pop_ready`] batches when there is room to send them; sleep
//! until [`Accumulator::next_deadline`] otherwise. [`Accumulator::seal_all`] makes every
//! buffered batch ready at once (flush).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_wire::batch::{BuildError, HEADER_LEN, Header, RecordFields};
use floe_wire::{BatchBuilder, BufferPool};

/// Smallest record: every fixed field, no key, empty value, no headers.
const MIN_RECORD_LEN: usize = 26;

/// A batch being filled or waiting for room in the send window.
#[derive(Debug)]
pub(crate) struct OpenBatch<T> {
    builder: BatchBuilder,
    opened_at: Instant,
    /// No record may join: the batch is full or being flushed.
    sealed: bool,
    pub attachment: T,
}

impl<T> OpenBatch<T> {
    pub fn record_count(&self) -> u32 {
        self.builder.record_count()
    }

    /// Bytes of the batch if finished now.
    pub fn len(&self) -> usize {
        self.builder.len()
    }

    /// Numbers the batch for an idempotent producer and encodes it.
    pub fn finish(
        mut self,
        producer_id: i64,
        producer_epoch: u16,
        base_sequence: i32,
    ) -> (Result<Bytes, BuildError>, T) {
        self.builder
            .producer(producer_id, producer_epoch, base_sequence);
        (self.builder.finish(), self.attachment)
    }
}

/// The batch a run of records is going into: the first record placed it (opening the batch
/// when needed), and the records after it join it with [`Run::push`] for as long as they fit,
/// without looking for the batch again. [`Run::finish`] says where the run went.
#[derive(Debug)]
pub(crate) struct Run<'a, T> {
    batch: &'a mut OpenBatch<T>,
    max_batch_bytes: usize,
    /// Position of the run's first record in its batch.
    first: u32,
    count: u32,
    opened: bool,
}

impl<'a, T> Run<'a, T> {
    /// Input: appends the next record of the run when the batch has room for it; `Ok(false)`
    /// when it has not (nothing changes, and the record goes through
    /// [`Accumulator::push_run`], which seals this batch). On error the batch is unchanged.
    #[inline]
    pub fn push<H: Header>(&mut self, record: &RecordFields<'_, H>) -> Result<bool, BuildError> {
        if self.batch.builder.len() + record.len() > self.max_batch_bytes {
            return Ok(false);
        }
        self.batch.builder.push_fields(record)?;
        self.count += 1;
        Ok(true)
    }

    /// Output: where the run went. The batch is sealed here, once, when not even the
    /// smallest record fits any more: it need not linger.
    pub fn finish(self) -> Pushed<'a, T> {
        let batch = self.batch;
        batch.sealed = batch.builder.len() + MIN_RECORD_LEN > self.max_batch_bytes;
        Pushed {
            index: self.first,
            count: self.count,
            ready: batch.sealed,
            attachment: &mut batch.attachment,
            opened: self.opened,
        }
    }
}

/// Where a run of pushed records went.
#[derive(Debug)]
pub(crate) struct Pushed<'a, T> {
    /// Position of the run's first record in its batch; the others follow it.
    pub index: u32,
    /// Records in the run, at least one.
    pub count: u32,
    pub attachment: &'a mut T,
    /// The first record opened a new batch (the shell arms a linger timer).
    pub opened: bool,
    /// The batch is already full, so it is ready to send now.
    pub ready: bool,
}

/// The batches of one partition not yet handed to the send window, oldest first. Only the
/// newest may be open for records.
#[derive(Debug)]
pub(crate) struct Accumulator<T> {
    batches: VecDeque<OpenBatch<T>>,
    max_batch_bytes: usize,
    linger: Duration,
    /// Bytes the last batch reached when the next one opened, or when it left with none
    /// behind it: the room a new batch starts with. Under load batches fill, and growing one
    /// by doubling would copy it about once more; at a low rate they stay small, and so does
    /// what they reserve.
    expected_len: usize,
    /// Where batches get their buffers: the allocations of acknowledged batches are reused.
    buffers: Arc<BufferPool>,
}

impl<T> Accumulator<T> {
    pub fn new(
        max_batch_bytes: usize,
        linger: Duration,
        buffers: Arc<BufferPool>,
    ) -> Accumulator<T> {
        Accumulator {
            batches: VecDeque::new(),
            max_batch_bytes,
            linger,
            expected_len: 0,
            buffers,
        }
    }

    /// Whether a record of `record_len` bytes still fits the batch being filled.
    pub fn fits(&self, record_len: usize) -> bool {
        self.batches
            .back()
            .is_some_and(|b| !b.sealed && b.builder.len() + record_len <= self.max_batch_bytes)
    }

    /// Input: appends a record, sealing the current batch and opening a new one when it does
    /// not fit. `open` makes the attachment of a new batch, and `now` tells when it opened:
    /// both are called only then (most records join an open batch, and need no clock read).
    /// A record too large for an empty batch is refused and nothing changes.
    pub fn push<H: Header>(
        &mut self,
        record: RecordFields<'_, H>,
        now: impl FnOnce() -> Instant,
        open: impl FnOnce() -> T,
    ) -> Result<Pushed<'_, T>, BuildError> {
        self.push_run(record, now, open).map(Run::finish)
    }

    /// Input: like [`Accumulator::push`], and the records that follow it into the same batch
    /// go through the returned [`Run`], which must be finished.
    pub fn push_run<H: Header>(
        &mut self,
        record: RecordFields<'_, H>,
        now: impl FnOnce() -> Instant,
        open: impl FnOnce() -> T,
    ) -> Result<Run<'_, T>, BuildError> {
        let record_len = record.len();
        if HEADER_LEN + record_len > self.max_batch_bytes {
            return Err(BuildError::TooLarge {
                would_be: HEADER_LEN + record_len,
                limit: self.max_batch_bytes,
            });
        }
        let opened = !self.fits(record_len);
        if opened {
            if let Some(current) = self.batches.back_mut() {
                current.sealed = true;
                self.expected_len = current.builder.len();
            }
            self.batches.push_back(OpenBatch {
                builder: BatchBuilder::with_buffer(
                    self.max_batch_bytes,
                    self.buffers.take(
                        self.expected_len
                            .max(HEADER_LEN + record_len)
                            .min(self.max_batch_bytes),
                    ),
                ),
                opened_at: now(),
                sealed: false,
                attachment: open(),
            });
        }
        // Never `None`: a batch was opened above if none was open.
        let pushed = match self.batches.back_mut() {
            Some(batch) => {
                let index = batch.builder.record_count();
                batch.builder.push_fields(&record).map(|()| index)
            }
            None => Err(BuildError::Empty),
        };
        let first = match pushed {
            Ok(index) => index,
            Err(e) => {
                if opened {
                    self.batches.pop_back();
                }
                return Err(e);
            }
        };
        let max_batch_bytes = self.max_batch_bytes;
        let Some(batch) = self.batches.back_mut() else {
            return Err(BuildError::Empty);
        };
        Ok(Run {
            batch,
            max_batch_bytes,
            first,
            count: 1,
            opened,
        })
    }

    /// Whether the oldest batch may be sent: it is sealed or has lingered long enough.
    pub fn has_ready(&self, now: Instant) -> bool {
        self.batches
            .front()
            .is_some_and(|b| b.sealed || now >= b.opened_at + self.linger)
    }

    /// The oldest batch, when it is ready.
    pub fn peek_ready(&self, now: Instant) -> Option<&OpenBatch<T>> {
        self.batches.front().filter(|_| self.has_ready(now))
    }

    /// Output: the oldest batch, when it is ready.
    pub fn pop_ready(&mut self, now: Instant) -> Option<OpenBatch<T>> {
        if self.has_ready(now) {
            let batch = self.batches.pop_front();
            if self.batches.is_empty()
                && let Some(batch) = &batch
            {
                // Sent before it filled (lingered, or flushed): the next one starts as small.
                self.expected_len = batch.builder.len();
            }
            batch
        } else {
            None
        }
    }

    /// Makes every buffered batch ready; later records open new batches.
    pub fn seal_all(&mut self) {
        for batch in &mut self.batches {
            batch.sealed = true;
        }
    }

    /// When the oldest batch becomes ready by lingering (in the past if it already is).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.batches.front().map(|b| {
            if b.sealed {
                b.opened_at
            } else {
                b.opened_at + self.linger
            }
        })
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The attachments of every buffered batch, oldest first.
    pub fn attachments(&self) -> impl Iterator<Item = &T> {
        self.batches.iter().map(|b| &b.attachment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(value: &[u8]) -> RecordFields<'_> {
        RecordFields::new(1_700_000_000_000, None, value, &[]).expect("no headers")
    }

    const LINGER: Duration = Duration::from_millis(5);

    fn pool() -> Arc<BufferPool> {
        Arc::new(BufferPool::new(4, 1 << 20))
    }

    #[test]
    fn a_batch_waits_for_its_linger_time_then_is_ready() {
        let start = Instant::now();
        let mut acc = Accumulator::new(1024, LINGER, pool());
        let pushed = acc
            .push(record(b"a"), || start, || "batch-1")
            .expect("accepted");
        assert!(pushed.opened && !pushed.ready);
        assert_eq!(pushed.index, 0);
        let pushed = acc
            .push(record(b"b"), || start, || "unused")
            .expect("accepted");
        assert!(!pushed.opened);
        assert_eq!(pushed.index, 1);
        assert!(!acc.has_ready(start + Duration::from_millis(4)));
        assert_eq!(acc.next_deadline(), Some(start + LINGER));
        let batch = acc.pop_ready(start + LINGER).expect("accepted");
        assert_eq!(batch.record_count(), 2);
        assert_eq!(batch.attachment, "batch-1");
        assert!(acc.is_empty());
    }

    #[test]
    fn a_record_that_does_not_fit_seals_the_batch_and_opens_another() {
        let now = Instant::now();
        // Room for the header and two 100-byte records, not three.
        let max = HEADER_LEN + 2 * record(&[0; 100]).len() + 10;
        let mut acc = Accumulator::new(max, LINGER, pool());
        acc.push(record(&[1; 100]), || now, || 1).expect("accepted");
        acc.push(record(&[2; 100]), || now, || 2).expect("accepted");
        assert!(!acc.fits(record(&[3; 100]).len()));
        let third = acc.push(record(&[3; 100]), || now, || 3).expect("accepted");
        assert!(third.opened);
        assert_eq!(third.index, 0);
        assert!(acc.has_ready(now), "the sealed batch need not linger");
        let first = acc.pop_ready(now).expect("accepted");
        assert_eq!((first.attachment, first.record_count()), (1, 2));
        assert!(!acc.has_ready(now), "the new batch lingers");
    }

    fn reserved<T>(acc: &Accumulator<T>) -> usize {
        acc.batches
            .back()
            .expect("an open batch")
            .builder
            .capacity()
    }

    #[test]
    fn a_run_fills_the_open_batch_then_leaves_the_rest_for_the_next_one() {
        let now = Instant::now();
        // Room for the header and three 100-byte records, not four, and for a smaller one.
        let max = HEADER_LEN + 3 * record(&[0; 100]).len() + MIN_RECORD_LEN + 10;
        let mut acc = Accumulator::new(max, LINGER, pool());
        acc.push(record(&[1; 100]), || now, || 1).expect("accepted");
        let mut run = acc
            .push_run(record(&[2; 100]), || now, || 2)
            .expect("accepted");
        assert!(run.push(&record(&[3; 100])).expect("accepted"));
        assert!(
            !run.push(&record(&[4; 100])).expect("accepted"),
            "no room left: the record is not taken"
        );
        let pushed = run.finish();
        assert_eq!((pushed.index, pushed.count, *pushed.attachment), (1, 2, 1));
        assert!(!pushed.opened);
        assert!(!pushed.ready, "room for smaller records remains");
        assert!(!acc.fits(record(&[4; 100]).len()));
        let next = acc
            .push_run(record(&[4; 100]), || now, || 2)
            .expect("accepted")
            .finish();
        assert_eq!((next.index, next.count, *next.attachment), (0, 1, 2));
        assert!(next.opened);
        let first = acc.pop_ready(now).expect("the full batch is sealed");
        assert_eq!((first.attachment, first.record_count()), (1, 3));
    }

    #[test]
    fn a_run_that_fills_its_batch_makes_it_ready() {
        let now = Instant::now();
        let max = HEADER_LEN + 2 * record(&[0; 100]).len() + MIN_RECORD_LEN - 1;
        let mut acc = Accumulator::new(max, LINGER, pool());
        let mut run = acc
            .push_run(record(&[0; 100]), || now, || ())
            .expect("accepted");
        assert!(run.push(&record(&[1; 100])).expect("accepted"));
        let pushed = run.finish();
        assert!(pushed.opened && pushed.ready);
        assert!(acc.has_ready(now));
    }

    #[test]
    fn a_batch_starts_with_the_room_the_last_one_needed() {
        let now = Instant::now();
        let max = 1 << 20;
        let mut acc = Accumulator::new(max, LINGER, pool());
        acc.push(record(&[0; 100]), || now, || ())
            .expect("accepted");
        let first = reserved(&acc);
        assert!(first < max / 4, "a first batch starts small: {first}");
        // Under load: the batch fills, and the next one reserves what it reached.
        while acc
            .push(record(&[1; 1000]), || now, || ())
            .expect("accepted")
            .index
            > 0
        {}
        let full = acc.batches.front().expect("the sealed batch").len();
        assert!(full > max - 2000, "the first batch filled: {full}");
        assert!(reserved(&acc) >= full, "{} < {full}", reserved(&acc));
        // A batch that leaves before it fills (linger) makes the next one small again.
        while acc.pop_ready(now + LINGER).is_some() {}
        acc.push(record(&[2; 100]), || now, || ())
            .expect("accepted");
        assert!(reserved(&acc) < max / 4, "{}", reserved(&acc));
    }

    #[test]
    fn a_batch_too_full_for_the_smallest_record_is_ready_at_once() {
        let now = Instant::now();
        let max = HEADER_LEN + record(&[0; 100]).len() + MIN_RECORD_LEN - 1;
        let mut acc = Accumulator::new(max, LINGER, pool());
        let pushed = acc
            .push(record(&[0; 100]), || now, || ())
            .expect("accepted");
        assert!(pushed.ready);
        assert!(acc.has_ready(now));
    }

    #[test]
    fn a_record_larger_than_a_batch_is_refused_without_side_effects() {
        let now = Instant::now();
        let mut acc = Accumulator::new(256, LINGER, pool());
        let refused = acc.push(record(&[0; 300]), || now, || ());
        assert!(matches!(refused, Err(BuildError::TooLarge { .. })));
        assert!(acc.is_empty());
        assert_eq!(acc.next_deadline(), None);
    }

    #[test]
    fn sealing_all_makes_every_batch_ready_and_later_records_open_a_new_one() {
        let now = Instant::now();
        let mut acc = Accumulator::new(1024, Duration::from_secs(60), pool());
        acc.push(record(b"a"), || now, || 1).expect("accepted");
        assert!(!acc.has_ready(now));
        acc.seal_all();
        assert!(acc.has_ready(now));
        let pushed = acc.push(record(b"b"), || now, || 2).expect("accepted");
        assert!(pushed.opened);
        assert_eq!(acc.attachments().copied().collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_finished_batch_carries_the_producer_fields() {
        let now = Instant::now();
        let mut acc = Accumulator::new(1024, Duration::ZERO, pool());
        acc.push(record(b"a"), || now, || ()).expect("accepted");
        acc.push(record(b"b"), || now, || ()).expect("accepted");
        let (bytes, ()) = acc.pop_ready(now).expect("accepted").finish(42, 3, 10);
        let batch = floe_wire::RecordBatch::decode(bytes.expect("accepted")).expect("accepted");
        let header = batch.header();
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (42, 3, 10)
        );
        assert_eq!(header.record_count, 2);
    }
}

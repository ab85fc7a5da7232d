//! The send window of an idempotent producer on one partition: sequence numbers, the
//! batches in flight, and recovery after a failure. Pure: time is an argument; the shell
//! sends the requests and feeds their outcomes back.
//!
//! Driving contract:
//!
//! 1. New batches: while [`SequenceWindow::sequence_for`] gives a sequence, encode a batch
//!    with it and register it with [`SequenceWindow::sent`]; after the batches of one
//!    request, call [`SequenceWindow::request_started`].
//! 2. Feed every request's outcome to [`SequenceWindow::on_results`]; it returns the
//!    batches that are done — acknowledged, or failed for good — for the shell to complete.
//! 3. After a retryable failure the window closes to new batches. Once every request in
//!    flight has come back and the backoff ([`SequenceWindow::next_deadline`]) has passed,
//!    [`SequenceWindow::resend`] returns the unacknowledged batches, oldest first, with the
//!    same bytes, one request at a time, until all are acknowledged.
//!
//! What must hold: the batches sent span at most `max_in_flight` entries from the first
//! unacknowledged one, and the broker remembers at least that many of each producer's latest
//! batches (it announces how many; the producer's window never exceeds it). So a
//! resent batch is either recognised (and answered with its original offsets) or is the next
//! in sequence, and the partition's order is the send order.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_wire::frame::{BatchAck, ErrorCode};
use floe_wire::{Backoff, Jitter};

use crate::error::{Error, ProtocolViolation};

/// How long and how often a batch is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    pub backoff: Backoff,
    /// Sends of one batch beyond the first.
    pub max_retries: u32,
    /// A batch not acknowledged this long after its first send fails.
    pub delivery_timeout: Duration,
}

/// What to do about a failed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Resend it (after at least `after`, if the broker said).
    Retry { after: Option<Duration> },
    /// Report the error.
    Fail,
}

/// Whether a failed batch is worth resending. `OutOfOrderSequence` is retryable for a batch
/// sent while an earlier one was still unacknowledged: the broker saw it before its
/// predecessor, and the ordered resend fixes that. For the head of the window it means the
/// broker lost the producer's state, and no resend can help.
pub(crate) fn classify(error: &Error, sent_as_head: bool) -> Verdict {
    if error.code() == Some(ErrorCode::OutOfOrderSequence) {
        return if sent_as_head {
            Verdict::Fail
        } else {
            Verdict::Retry { after: None }
        };
    }
    if error.is_retryable() {
        Verdict::Retry {
            after: error.retry_after(),
        }
    } else {
        Verdict::Fail
    }
}

/// A batch that is done, with its attachment: acknowledged offsets or the error.
pub(crate) type Completion<A> = (A, Result<BatchAck, Error>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryState {
    /// In a request not yet answered. `sent_as_head`: no earlier batch was unacknowledged
    /// when it was sent.
    InFlight {
        sent_as_head: bool,
    },
    Acked,
    AwaitingResend,
}

#[derive(Debug)]
struct Entry<A> {
    first_sequence: i32,
    record_count: u32,
    bytes: Bytes,
    state: EntryState,
    first_sent_at: Instant,
    sends: u32,
    /// Taken when the batch completes.
    attachment: Option<A>,
}

/// See the module documentation for the driving contract.
#[derive(Debug)]
pub(crate) struct SequenceWindow<A> {
    epoch: u16,
    /// The sequence of the next new batch; i64 so that the end of the i32 range is visible.
    next_sequence: i64,
    max_in_flight: usize,
    policy: RetryPolicy,
    /// The random numbers of the backoff's jitter; seeded, so tests pin the waits.
    jitter: Jitter,
    /// Sent batches in sequence order from the first unacknowledged one.
    entries: VecDeque<Entry<A>>,
    requests_in_flight: usize,
    /// While recovering from a failure: the earliest time to resend.
    recovery: Option<Instant>,
    /// A batch failed for good, leaving a gap in the sequence: once the window drains,
    /// numbering restarts at 0 under the next epoch.
    renumber: bool,
    /// The broker has acknowledged a batch of this epoch, so it knows the producer. Until
    /// then one batch goes at a time: a broker appends the first batch of a producer it does
    /// not know whatever its sequence, so a second batch overtaking the first would be
    /// stored before it.
    acknowledged: bool,
}

impl<A> SequenceWindow<A> {
    /// A window of at most `max_in_flight` batches; `jitter` draws the backoff's waits.
    pub fn new(max_in_flight: usize, policy: RetryPolicy, jitter: Jitter) -> SequenceWindow<A> {
        SequenceWindow {
            epoch: 0,
            next_sequence: 0,
            max_in_flight: max_in_flight.max(1),
            policy,
            jitter,
            entries: VecDeque::new(),
            requests_in_flight: 0,
            recovery: None,
            renumber: false,
            acknowledged: false,
        }
    }

    /// How many new batches may be sent now.
    pub fn room(&self) -> usize {
        if self.recovery.is_some() || self.renumber {
            0
        } else if !self.acknowledged {
            1usize.saturating_sub(self.entries.len())
        } else {
            self.max_in_flight.saturating_sub(self.entries.len())
        }
    }

    /// Output: the producer epoch and base sequence for a new batch of `record_count`
    /// records, or `None` while the window has no room. Numbering restarts at 0 under the
    /// next epoch once it would pass `i32::MAX` (after the window drains).
    pub fn sequence_for(&mut self, record_count: u32) -> Option<(u16, i32)> {
        if self.room() == 0 {
            return None;
        }
        let last = self.next_sequence + i64::from(record_count) - 1;
        if last <= i64::from(i32::MAX) {
            return Some((self.epoch, self.next_sequence as i32));
        }
        if self.is_idle() {
            self.start_epoch();
            return Some((self.epoch, 0));
        }
        None
    }

    /// Numbering restarts at 0 under the next epoch, which the broker has not seen yet.
    fn start_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.next_sequence = 0;
        self.acknowledged = false;
    }

    /// Input: a new batch numbered by [`SequenceWindow::sequence_for`] is in a request.
    pub fn sent(
        &mut self,
        first_sequence: i32,
        record_count: u32,
        bytes: Bytes,
        attachment: A,
        now: Instant,
    ) {
        let sent_as_head = self.entries.iter().all(|e| e.state == EntryState::Acked);
        self.entries.push_back(Entry {
            first_sequence,
            record_count,
            bytes,
            state: EntryState::InFlight { sent_as_head },
            first_sent_at: now,
            sends: 1,
            attachment: Some(attachment),
        });
        self.next_sequence = i64::from(first_sequence) + i64::from(record_count);
    }

    /// Input: the batches registered since the last call went out in one request.
    pub fn request_started(&mut self) {
        self.requests_in_flight += 1;
    }

    /// Output: while recovering, once nothing is in flight and the backoff has passed, the
    /// unacknowledged batches to resend, oldest first, as `(base sequence, bytes)`, at most
    /// `budget_bytes` (but at least one). The request counts as started.
    pub fn resend(&mut self, now: Instant, budget_bytes: usize) -> Option<Vec<(i32, Bytes)>> {
        let not_before = self.recovery?;
        if self.requests_in_flight > 0 || now < not_before {
            return None;
        }
        let mut out: Vec<(i32, Bytes)> = Vec::new();
        let mut size = 0;
        for entry in &mut self.entries {
            if entry.state != EntryState::AwaitingResend {
                continue;
            }
            if !out.is_empty() && size + entry.bytes.len() > budget_bytes {
                break;
            }
            entry.state = EntryState::InFlight {
                sent_as_head: out.is_empty(),
            };
            entry.sends += 1;
            size += entry.bytes.len();
            out.push((entry.first_sequence, entry.bytes.clone()));
        }
        if out.is_empty() {
            return None;
        }
        self.requests_in_flight += 1;
        Some(out)
    }

    /// Input: the outcome of a request that carried the batches `sequences`, in order: one
    /// result per batch, or one error for the whole request. Output: the batches now done.
    #[must_use = "completed batches must be reported to their senders"]
    pub fn on_results(
        &mut self,
        sequences: &[i32],
        outcome: Result<Vec<Result<BatchAck, ErrorCode>>, Error>,
        now: Instant,
    ) -> Vec<Completion<A>> {
        self.requests_in_flight = self.requests_in_flight.saturating_sub(1);
        let results: Vec<Result<BatchAck, Error>> = match outcome {
            Ok(results) if results.len() == sequences.len() => results
                .into_iter()
                .map(|r| r.map_err(|code| Error::from_code(code, "batch refused".into())))
                .collect(),
            Ok(results) => {
                let error: Error = ProtocolViolation::ResultCount {
                    expected: results.len(),
                    sent: sequences.len(),
                }
                .into();
                vec![Err(error); sequences.len()]
            }
            Err(error) => vec![Err(error); sequences.len()],
        };
        let mut done = Vec::new();
        for (sequence, result) in sequences.iter().zip(results) {
            // A batch already failed for good is no longer here; its late answer is moot.
            let Some(index) = self.entries.iter().position(|e| {
                e.first_sequence == *sequence && matches!(e.state, EntryState::InFlight { .. })
            }) else {
                continue;
            };
            let entry = &mut self.entries[index];
            match result.and_then(|ack| check_ack(ack, entry.record_count)) {
                Ok(ack) => {
                    entry.state = EntryState::Acked;
                    if let Some(attachment) = entry.attachment.take() {
                        done.push((attachment, Ok(ack)));
                    }
                    self.acknowledged = true;
                }
                Err(error) => self.fail(index, error, now, &mut done),
            }
        }
        self.settle();
        done
    }

    fn fail(&mut self, index: usize, error: Error, now: Instant, done: &mut Vec<Completion<A>>) {
        let entry = &mut self.entries[index];
        let sent_as_head = entry.state == EntryState::InFlight { sent_as_head: true };
        let exhausted = entry.sends > self.policy.max_retries
            || now.saturating_duration_since(entry.first_sent_at) >= self.policy.delivery_timeout;
        match classify(&error, sent_as_head) {
            Verdict::Retry { after } if !exhausted => {
                entry.state = EntryState::AwaitingResend;
                // A broker's `retry after` is a floor under the jittered wait.
                let wait = self
                    .policy
                    .backoff
                    .delay(entry.sends - 1, self.jitter.draw());
                let at = now + after.map_or(wait, |hint| wait.max(hint));
                self.recovery = Some(self.recovery.map_or(at, |r| r.max(at)));
            }
            Verdict::Retry { .. } | Verdict::Fail => {
                // Every later unacknowledged batch now follows a gap in the sequence: it
                // cannot be appended either.
                let mut i = index;
                while i < self.entries.len() {
                    if self.entries[i].state == EntryState::Acked {
                        i += 1;
                        continue;
                    }
                    if let Some(attachment) = self.entries.remove(i).and_then(|e| e.attachment) {
                        done.push((attachment, Err(error.clone())));
                    }
                }
                self.renumber = true;
            }
        }
    }

    /// Drops the acknowledged prefix, ends a finished recovery, and renumbers a drained
    /// window whose sequence was broken.
    fn settle(&mut self) {
        while self
            .entries
            .front()
            .is_some_and(|e| e.state == EntryState::Acked)
        {
            self.entries.pop_front();
        }
        let awaiting = self
            .entries
            .iter()
            .any(|e| e.state == EntryState::AwaitingResend);
        if self.recovery.is_some() && !awaiting && self.requests_in_flight == 0 {
            self.recovery = None;
        }
        if self.renumber && self.is_idle() {
            self.start_epoch();
            self.renumber = false;
        }
    }

    /// When a resend becomes due, if one is waiting only for time.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.recovery.filter(|_| self.requests_in_flight == 0)
    }

    /// Nothing sent is unresolved.
    pub fn is_idle(&self) -> bool {
        self.entries.is_empty() && self.requests_in_flight == 0
    }

    /// The attachments of every batch not yet done.
    pub fn attachments(&self) -> impl Iterator<Item = &A> {
        self.entries.iter().filter_map(|e| e.attachment.as_ref())
    }
}

/// An acknowledgement must cover exactly the batch's records.
fn check_ack(ack: BatchAck, record_count: u32) -> Result<BatchAck, Error> {
    let span = ack.last_offset.get().checked_sub(ack.base_offset.get());
    if span.map(|s| s + 1) == Some(u64::from(record_count)) {
        Ok(ack)
    } else {
        Err(ProtocolViolation::AckedRange {
            base: ack.base_offset.get(),
            last: ack.last_offset.get(),
            records: record_count,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use floe_wire::Offset;

    use super::*;

    /// Pins the jittered waits of every test.
    const SEED: u64 = 11;

    const POLICY: RetryPolicy = RetryPolicy {
        backoff: Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        },
        max_retries: 3,
        delivery_timeout: Duration::from_secs(60),
    };

    /// A window with batches of 10 records each, labelled by their index.
    struct Harness {
        window: SequenceWindow<u32>,
        now: Instant,
        sent: u32,
    }

    impl Harness {
        fn new(max_in_flight: usize) -> Harness {
            Harness {
                window: SequenceWindow::new(max_in_flight, POLICY, Jitter::new(SEED)),
                now: Instant::now(),
                sent: 0,
            }
        }

        /// Sends one new batch in its own request; returns its sequence.
        fn send(&mut self) -> Option<i32> {
            let (_, sequence) = self.window.sequence_for(10)?;
            let bytes = Bytes::from(format!("batch-{}", self.sent));
            self.window.sent(sequence, 10, bytes, self.sent, self.now);
            self.window.request_started();
            self.sent += 1;
            Some(sequence)
        }

        fn ack(&mut self, sequence: i32, base: u64) -> Vec<Completion<u32>> {
            let ack = BatchAck {
                base_offset: Offset::new(base),
                last_offset: Offset::new(base + 9),
            };
            self.window
                .on_results(&[sequence], Ok(vec![Ok(ack)]), self.now)
        }

        fn refuse(&mut self, sequence: i32, code: ErrorCode) -> Vec<Completion<u32>> {
            self.window
                .on_results(&[sequence], Ok(vec![Err(code)]), self.now)
        }
    }

    fn labels(done: &[Completion<u32>]) -> Vec<(u32, bool)> {
        done.iter().map(|(a, r)| (*a, r.is_ok())).collect()
    }

    impl Harness {
        /// A harness whose producer the broker already knows (it acknowledged a batch of
        /// this epoch), so that the whole window may be used from sequence 0.
        fn known(max_in_flight: usize) -> Harness {
            let mut h = Harness::new(max_in_flight);
            h.window.acknowledged = true;
            h
        }
    }

    #[test]
    fn sequences_number_records_from_zero() {
        let mut h = Harness::new(5);
        assert_eq!(h.send(), Some(0));
        let _ = h.ack(0, 0);
        assert_eq!(h.send(), Some(10));
        assert_eq!(h.send(), Some(20));
    }

    #[test]
    fn the_first_batch_goes_alone_until_the_broker_knows_the_producer() {
        let mut h = Harness::new(5);
        assert_eq!(h.send(), Some(0));
        assert_eq!(
            h.window.room(),
            0,
            "a second batch could overtake the first"
        );
        assert_eq!(h.send(), None);
        let _ = h.ack(0, 0);
        assert_eq!(h.window.room(), 5);
    }

    #[test]
    fn a_new_epoch_starts_with_one_batch_again() {
        let mut h = Harness::known(5);
        let s = h.send().expect("room");
        let _ = h.refuse(s, ErrorCode::InvalidBatch);
        assert_eq!(h.window.sequence_for(10), Some((1, 0)));
        assert_eq!(h.window.room(), 1);
    }

    #[test]
    fn the_window_holds_at_most_max_in_flight_batches() {
        let mut h = Harness::known(5);
        for _ in 0..5 {
            assert!(h.send().is_some());
        }
        assert_eq!(h.window.room(), 0);
        assert_eq!(h.send(), None);
        // An acknowledged batch behind an unacknowledged head frees nothing.
        assert_eq!(labels(&h.ack(10, 100)), [(1, true)]);
        assert_eq!(h.window.room(), 0);
        assert_eq!(labels(&h.ack(0, 90)), [(0, true)]);
        assert_eq!(h.window.room(), 2);
    }

    #[test]
    fn a_retryable_failure_waits_for_the_window_then_resends_from_the_first_unacked() {
        let mut h = Harness::known(5);
        let seqs: Vec<i32> = (0..3).map(|_| h.send().expect("room")).collect();
        assert!(h.refuse(seqs[0], ErrorCode::Throttled).is_empty());
        assert_eq!(h.window.room(), 0, "no new batches while recovering");
        // Batch 1 reached the broker before batch 0 and was refused for it.
        assert!(h.refuse(seqs[1], ErrorCode::OutOfOrderSequence).is_empty());
        // Batch 2 is still in flight: nothing is resent yet, whatever the time.
        h.now += Duration::from_secs(10);
        assert_eq!(h.window.resend(h.now, usize::MAX), None);
        assert!(h.refuse(seqs[2], ErrorCode::OutOfOrderSequence).is_empty());
        assert_eq!(
            h.window.resend(h.now, usize::MAX),
            None,
            "the backoff runs from the last failure"
        );
        h.now += Duration::from_secs(1);
        let resent = h.window.resend(h.now, usize::MAX).expect("a resend");
        assert_eq!(
            resent,
            [
                (0, Bytes::from("batch-0")),
                (10, Bytes::from("batch-1")),
                (20, Bytes::from("batch-2"))
            ],
            "the same bytes, in sequence order, in one request"
        );
        assert_eq!(
            h.window.resend(h.now, usize::MAX),
            None,
            "one request at a time"
        );
        let acks: Vec<Result<BatchAck, ErrorCode>> = (0..3)
            .map(|i| {
                Ok(BatchAck {
                    base_offset: Offset::new(i * 10),
                    last_offset: Offset::new(i * 10 + 9),
                })
            })
            .collect();
        let done = h.window.on_results(&[0, 10, 20], Ok(acks), h.now);
        assert_eq!(labels(&done), [(0, true), (1, true), (2, true)]);
        assert_eq!(h.window.room(), 5);
        assert_eq!(h.send(), Some(30), "numbering continues");
    }

    #[test]
    fn a_resend_honours_the_backoff_and_the_brokers_hint() {
        let mut h = Harness::new(5);
        let s = h.send().expect("room");
        let error = Error::from_response(
            ErrorCode::Throttled,
            String::new(),
            Some(floe_wire::frame::ErrorDetails::RetryAfter { delay_ms: 500 }),
        );
        assert!(h.window.on_results(&[s], Err(error), h.now).is_empty());
        assert_eq!(
            h.window.next_deadline(),
            Some(h.now + Duration::from_millis(500))
        );
        assert_eq!(
            h.window
                .resend(h.now + Duration::from_millis(499), usize::MAX),
            None
        );
        assert!(
            h.window
                .resend(h.now + Duration::from_millis(500), usize::MAX)
                .is_some()
        );
    }

    #[test]
    fn producers_that_failed_together_resend_at_different_times_under_the_ceiling() {
        let mut waits: Vec<Duration> = (0..8)
            .map(|seed| {
                let mut h = Harness::new(5);
                h.window = SequenceWindow::new(5, POLICY, Jitter::new(seed));
                let s = h.send().expect("room");
                let lost = Error::Timeout {
                    operation: "Produce",
                    after: Duration::from_secs(1),
                };
                assert!(h.window.on_results(&[s], Err(lost), h.now).is_empty());
                h.window.next_deadline().expect("a resend waits") - h.now
            })
            .collect();
        // The first resend waits at most the first ceiling, 100 ms, and not all alike.
        assert!(
            waits.iter().all(|w| *w <= Duration::from_millis(100)),
            "{waits:?}"
        );
        waits.sort();
        waits.dedup();
        assert!(waits.len() >= 6, "jitter spreads the resends: {waits:?}");
    }

    #[test]
    fn a_resend_is_split_to_fit_the_frame() {
        let mut h = Harness::known(5);
        let seqs: Vec<i32> = (0..3).map(|_| h.send().expect("room")).collect();
        for s in &seqs {
            let lost = Error::Timeout {
                operation: "Produce",
                after: Duration::from_secs(1),
            };
            let _ = h.window.on_results(&[*s], Err(lost), h.now);
        }
        h.now += Duration::from_secs(1);
        // Each batch is 7 bytes ("batch-N"); a budget of 15 fits two.
        let first = h.window.resend(h.now, 15).expect("a resend");
        assert_eq!(first.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [0, 10]);
        let acks = (0..2)
            .map(|i| {
                Ok(BatchAck {
                    base_offset: Offset::new(i * 10),
                    last_offset: Offset::new(i * 10 + 9),
                })
            })
            .collect();
        let done = h.window.on_results(&[0, 10], Ok(acks), h.now);
        assert_eq!(labels(&done), [(0, true), (1, true)]);
        let second = h.window.resend(h.now, 15).expect("the rest");
        assert_eq!(second.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [20]);
    }

    #[test]
    fn out_of_order_on_the_head_fails_and_numbering_restarts_under_a_new_epoch() {
        let mut h = Harness::known(5);
        let a = h.send().expect("room");
        let b = h.send().expect("room");
        let done = h.refuse(a, ErrorCode::OutOfOrderSequence);
        assert_eq!(
            labels(&done),
            [(0, false), (1, false)],
            "the later batch fails too"
        );
        assert_eq!(h.window.room(), 0, "b's request is still in flight");
        assert!(
            h.refuse(b, ErrorCode::OutOfOrderSequence).is_empty(),
            "a late answer is moot"
        );
        assert_eq!(h.window.sequence_for(10), Some((1, 0)));
    }

    #[test]
    fn a_fatal_error_fails_the_batch_but_not_the_ones_before_it() {
        let mut h = Harness::known(5);
        let a = h.send().expect("room");
        let b = h.send().expect("room");
        let done = h.refuse(b, ErrorCode::InvalidBatch);
        assert_eq!(labels(&done), [(1, false)]);
        assert_eq!(
            done[0].1.as_ref().err().and_then(Error::code),
            Some(ErrorCode::InvalidBatch)
        );
        assert_eq!(labels(&h.ack(a, 0)), [(0, true)]);
        assert_eq!(h.window.sequence_for(10), Some((1, 0)));
    }

    #[test]
    fn retries_are_bounded() {
        let mut h = Harness::new(5);
        let s = h.send().expect("room");
        for _ in 0..POLICY.max_retries {
            assert!(h.refuse(s, ErrorCode::NotEnoughReplicas).is_empty());
            h.now += Duration::from_secs(5);
            assert!(h.window.resend(h.now, usize::MAX).is_some());
        }
        let done = h.refuse(s, ErrorCode::NotEnoughReplicas);
        assert_eq!(labels(&done), [(0, false)]);
    }

    #[test]
    fn the_delivery_timeout_bounds_retries_too() {
        let mut h = Harness::new(5);
        let s = h.send().expect("room");
        h.now += POLICY.delivery_timeout;
        assert_eq!(labels(&h.refuse(s, ErrorCode::Throttled)), [(0, false)]);
    }

    #[test]
    fn an_ack_that_does_not_cover_the_batch_is_a_protocol_violation() {
        let mut h = Harness::new(5);
        let s = h.send().expect("room");
        let short = BatchAck {
            base_offset: Offset::new(5),
            last_offset: Offset::new(6),
        };
        let done = h.window.on_results(&[s], Ok(vec![Ok(short)]), h.now);
        assert!(matches!(
            done[0].1,
            Err(Error::Protocol(ProtocolViolation::AckedRange {
                records: 10,
                ..
            }))
        ));
    }

    #[test]
    fn a_result_count_mismatch_fails_the_request() {
        let mut h = Harness::new(5);
        let s = h.send().expect("room");
        let done = h.window.on_results(&[s], Ok(vec![]), h.now);
        assert!(matches!(
            done[0].1,
            Err(Error::Protocol(ProtocolViolation::ResultCount {
                expected: 0,
                sent: 1
            }))
        ));
    }

    #[test]
    fn numbering_rolls_over_to_a_new_epoch_before_passing_i32_max() {
        let mut window: SequenceWindow<()> = SequenceWindow::new(5, POLICY, Jitter::new(SEED));
        let now = Instant::now();
        window.next_sequence = i64::from(i32::MAX) - 5;
        assert_eq!(window.sequence_for(6), Some((0, i32::MAX - 5)));
        window.sent(i32::MAX - 5, 6, Bytes::new(), (), now);
        window.request_started();
        assert_eq!(window.sequence_for(1), None, "wait for the window to drain");
        let ack = BatchAck {
            base_offset: Offset::new(0),
            last_offset: Offset::new(5),
        };
        let done = window.on_results(&[i32::MAX - 5], Ok(vec![Ok(ack)]), now);
        assert_eq!(done.len(), 1);
        assert_eq!(window.sequence_for(1), Some((1, 0)));
    }
}

//! How a record learns its fate: one shared outcome per batch, and a small future per record
//! that reads its offset out of it. No allocation per record.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use floe_wire::Offset;
use floe_wire::frame::BatchAck;

use crate::error::Error;

/// The outcome of one batch, set once, read by every record in it. Once it is set, a record
/// reads it without taking the lock: only records that find it unset (the first of a batch
/// polled too early, typically) wait under the lock.
#[derive(Debug, Default)]
pub(crate) struct BatchOutcome {
    result: OnceLock<(Result<BatchAck, Error>, Instant)>,
    wakers: Mutex<Vec<Waker>>,
}

impl BatchOutcome {
    fn wakers(&self) -> std::sync::MutexGuard<'_, Vec<Waker>> {
        self.wakers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the outcome (the first one wins) and wakes every waiting record.
    pub fn complete(&self, result: Result<BatchAck, Error>, at: Instant) {
        if self.result.set((result, at)).is_err() {
            return;
        }
        // Taken after the result is set: a record that registers later finds the result when
        // it looks again under the lock.
        let wakers = std::mem::take(&mut *self.wakers());
        for waker in wakers {
            waker.wake();
        }
    }

    /// The outcome for the record at `index`, or registers the waker in `slot`.
    fn poll_record(
        &self,
        index: u32,
        slot: &mut Option<usize>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(Offset, Instant), Error>> {
        if let Some(outcome) = self.result.get() {
            return Poll::Ready(Self::for_record(outcome, index));
        }
        let mut wakers = self.wakers();
        if let Some(outcome) = self.result.get() {
            return Poll::Ready(Self::for_record(outcome, index));
        }
        match slot.and_then(|i| wakers.get_mut(i)) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                *slot = Some(wakers.len());
                wakers.push(cx.waker().clone());
            }
        }
        Poll::Pending
    }

    fn for_record(
        (result, at): &(Result<BatchAck, Error>, Instant),
        index: u32,
    ) -> Result<(Offset, Instant), Error> {
        match result {
            Ok(ack) => Ok((Offset::new(ack.base_offset.get() + u64::from(index)), *at)),
            Err(error) => Err(error.clone()),
        }
    }
}

/// The offset a sent record gets, once the broker has acknowledged its batch (or the error
/// that made the batch fail). Await it; dropping it does not cancel the record.
#[derive(Debug)]
#[must_use = "a delivery reports whether the record was stored"]
pub struct Delivery {
    outcome: Arc<BatchOutcome>,
    index: u32,
    slot: Option<usize>,
}

impl Delivery {
    pub(crate) fn new(outcome: Arc<BatchOutcome>, index: u32) -> Delivery {
        Delivery {
            outcome,
            index,
            slot: None,
        }
    }

    /// Resolves to the offset together with the moment the acknowledgement arrived, for
    /// latency measurements that must not depend on when the future is polled.
    pub fn timed(self) -> TimedDelivery {
        TimedDelivery(self)
    }
}

impl Future for Delivery {
    type Output = Result<Offset, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.outcome
            .poll_record(this.index, &mut this.slot, cx)
            .map(|r| r.map(|(offset, _)| offset))
    }
}

/// A [`Delivery`] that also reports when the acknowledgement arrived.
#[derive(Debug)]
#[must_use = "a delivery reports whether the record was stored"]
pub struct TimedDelivery(Delivery);

impl Future for TimedDelivery {
    type Output = Result<(Offset, Instant), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut self.get_mut().0;
        this.outcome.poll_record(this.index, &mut this.slot, cx)
    }
}

/// The offsets of many records sent in one [`crate::Producer::send_all`] call, in the order
/// they were given. Holds one entry per run of records that share a batch, not one per
/// record. Resolves once every record's batch is acknowledged, to every offset, or to the
/// first error in record order (later records may have been stored: a caller that must know
/// which uses [`crate::Producer::send`] for each).
#[derive(Debug, Default)]
#[must_use = "deliveries report whether the records were stored"]
pub struct Deliveries {
    runs: Vec<Run>,
    /// The run being awaited, and the offsets gathered so far.
    next: usize,
    slot: Option<usize>,
    offsets: Vec<Offset>,
    last_ack: Option<Instant>,
}

/// Consecutive records of one batch.
#[derive(Debug)]
struct Run {
    outcome: Arc<BatchOutcome>,
    first: u32,
    count: u32,
}

impl Deliveries {
    pub(crate) fn with_capacity(records: usize) -> Deliveries {
        Deliveries {
            offsets: Vec::with_capacity(records),
            ..Deliveries::default()
        }
    }

    /// Adds `count` records of the batch whose outcome is `outcome`, from `index` on.
    #[inline]
    pub(crate) fn push(&mut self, outcome: &Arc<BatchOutcome>, index: u32, count: u32) {
        if let Some(run) = self.runs.last_mut()
            && Arc::ptr_eq(&run.outcome, outcome)
            && run.first + run.count == index
        {
            run.count += count;
            return;
        }
        self.runs.push(Run {
            outcome: outcome.clone(),
            first: index,
            count,
        });
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.runs.iter().map(|run| run.count as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Resolves to the offsets together with the moment the last acknowledgement arrived.
    pub fn timed(self) -> TimedDeliveries {
        TimedDeliveries(self)
    }

    fn poll_all(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Vec<Offset>, Instant), Error>> {
        while let Some(run) = self.runs.get(self.next) {
            let (base, at) = match run.outcome.poll_record(run.first, &mut self.slot, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Ready(Ok(done)) => done,
            };
            self.offsets
                .extend((0..u64::from(run.count)).map(|i| Offset::new(base.get() + i)));
            self.last_ack = Some(self.last_ack.map_or(at, |last| last.max(at)));
            self.next += 1;
            self.slot = None;
        }
        let at = self.last_ack.unwrap_or_else(Instant::now);
        Poll::Ready(Ok((std::mem::take(&mut self.offsets), at)))
    }
}

impl Future for Deliveries {
    type Output = Result<Vec<Offset>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut()
            .poll_all(cx)
            .map(|r| r.map(|(offsets, _)| offsets))
    }
}

/// [`Deliveries`] that also report when the last acknowledgement arrived.
#[derive(Debug)]
#[must_use = "deliveries report whether the records were stored"]
pub struct TimedDeliveries(Deliveries);

impl TimedDeliveries {
    /// How many records.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Future for TimedDeliveries {
    type Output = Result<(Vec<Offset>, Instant), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.poll_all(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::task::Wake;

    use super::*;

    struct Flag(std::sync::atomic::AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn every_record_of_a_batch_gets_its_own_offset_and_is_woken() {
        let outcome = Arc::new(BatchOutcome::default());
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut first = Delivery::new(outcome.clone(), 0);
        let mut third = Delivery::new(outcome.clone(), 2);
        assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
        assert!(
            Pin::new(&mut first).poll(&mut cx).is_pending(),
            "re-polling reuses the slot"
        );
        assert_eq!(outcome.wakers().len(), 1);
        let ack = BatchAck {
            base_offset: Offset::new(40),
            last_offset: Offset::new(42),
        };
        outcome.complete(Ok(ack), Instant::now());
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        assert!(matches!(
            Pin::new(&mut first).poll(&mut cx),
            Poll::Ready(Ok(offset)) if offset == Offset::new(40)
        ));
        assert!(matches!(
            Pin::new(&mut third).poll(&mut cx),
            Poll::Ready(Ok(offset)) if offset == Offset::new(42)
        ));
    }

    #[test]
    fn a_failed_batch_fails_every_record_and_the_first_outcome_wins() {
        let outcome = Arc::new(BatchOutcome::default());
        outcome.complete(Err(Error::Closed), Instant::now());
        outcome.complete(
            Ok(BatchAck {
                base_offset: Offset::new(0),
                last_offset: Offset::new(0),
            }),
            Instant::now(),
        );
        let waker = Waker::from(Arc::new(Flag(false.into())));
        let mut cx = Context::from_waker(&waker);
        let mut delivery = Delivery::new(outcome, 0).timed();
        assert!(matches!(
            Pin::new(&mut delivery).poll(&mut cx),
            Poll::Ready(Err(Error::Closed))
        ));
    }

    #[test]
    fn many_records_resolve_in_order_across_batches_holding_one_entry_per_run() {
        let (first, second) = (
            Arc::new(BatchOutcome::default()),
            Arc::new(BatchOutcome::default()),
        );
        let mut deliveries = Deliveries::with_capacity(5);
        deliveries.push(&first, 1, 1);
        deliveries.push(&first, 2, 2);
        deliveries.push(&second, 0, 2);
        assert_eq!((deliveries.len(), deliveries.runs.len()), (5, 2));
        let waker = Waker::from(Arc::new(Flag(false.into())));
        let mut cx = Context::from_waker(&waker);
        let mut timed = deliveries.timed();
        assert!(Pin::new(&mut timed).poll(&mut cx).is_pending());
        let early = Instant::now();
        second.complete(
            Ok(BatchAck {
                base_offset: Offset::new(20),
                last_offset: Offset::new(21),
            }),
            early,
        );
        assert!(
            Pin::new(&mut timed).poll(&mut cx).is_pending(),
            "the first batch waits"
        );
        let late = early + std::time::Duration::from_millis(1);
        first.complete(
            Ok(BatchAck {
                base_offset: Offset::new(10),
                last_offset: Offset::new(13),
            }),
            late,
        );
        let Poll::Ready(Ok((offsets, at))) = Pin::new(&mut timed).poll(&mut cx) else {
            panic!("resolved");
        };
        let offsets: Vec<u64> = offsets.iter().map(|o| o.get()).collect();
        assert_eq!(offsets, vec![11, 12, 13, 20, 21]);
        assert_eq!(at, late);
    }

    #[test]
    fn many_records_fail_with_the_first_failed_batch() {
        let (ok, failed) = (
            Arc::new(BatchOutcome::default()),
            Arc::new(BatchOutcome::default()),
        );
        let mut deliveries = Deliveries::with_capacity(2);
        deliveries.push(&ok, 0, 1);
        deliveries.push(&failed, 0, 1);
        ok.complete(
            Ok(BatchAck {
                base_offset: Offset::new(0),
                last_offset: Offset::new(0),
            }),
            Instant::now(),
        );
        failed.complete(Err(Error::Closed), Instant::now());
        let waker = Waker::from(Arc::new(Flag(false.into())));
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            Pin::new(&mut deliveries).poll(&mut cx),
            Poll::Ready(Err(Error::Closed))
        ));
    }
}

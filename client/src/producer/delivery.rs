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
}

//! The order of one connection's produce requests. Each request travels on its own QUIC
//! stream, and streams are independent: a pipelined producer's later request can be read
//! before an earlier one. Appends are therefore taken in the order the streams were opened
//! (QUIC stream ids, the order `accept_bi` yields them), which is the order the client made
//! the requests. Requests of other kinds take their turn at once and never wait.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::watch;

/// The turns of one connection.
#[derive(Debug)]
pub(crate) struct RequestOrder {
    /// The lowest ticket not yet finished.
    next: watch::Sender<u64>,
    /// Finished tickets above `next`.
    finished: Mutex<BTreeSet<u64>>,
}

impl RequestOrder {
    pub(crate) fn new() -> RequestOrder {
        RequestOrder {
            next: watch::Sender::new(0),
            finished: Mutex::new(BTreeSet::new()),
        }
    }

    fn finish(&self, ticket: u64) {
        let mut finished = self
            .finished
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.next.send_if_modified(|next| {
            if ticket != *next {
                finished.insert(ticket);
                return false;
            }
            *next += 1;
            while finished.remove(next) {
                *next += 1;
            }
            true
        });
    }
}

/// One request's place in its connection's order; finishing it (or dropping it, when the
/// request fails early) lets the next one go.
pub(crate) struct Turn<'a> {
    order: &'a RequestOrder,
    ticket: u64,
    finished: bool,
}

impl<'a> Turn<'a> {
    /// The turn of the request on the stream accepted as the `ticket`-th of the connection.
    pub(crate) fn new(order: &'a RequestOrder, ticket: u64) -> Turn<'a> {
        Turn {
            order,
            ticket,
            finished: false,
        }
    }

    /// Waits until every earlier request has finished its turn.
    pub(crate) async fn wait(&self) {
        let mut next = self.order.next.subscribe();
        let _ = next.wait_for(|next| *next >= self.ticket).await;
    }

    pub(crate) fn finish(mut self) {
        self.finish_now();
    }

    fn finish_now(&mut self) {
        if !self.finished {
            self.finished = true;
            self.order.finish(self.ticket);
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.finish_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_go_in_ticket_order_whatever_order_they_finish_in() {
        let order = RequestOrder::new();
        let (first, second, third) = (
            Turn::new(&order, 0),
            Turn::new(&order, 1),
            Turn::new(&order, 2),
        );
        first.wait().await;
        // The third finishes early (say, a fetch): the second still waits for the first.
        third.finish();
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), second.wait());
        assert!(waiting.await.is_err(), "the second waits for the first");
        drop(first);
        second.wait().await;
        second.finish();
        assert_eq!(*order.next.borrow(), 3);
    }
}

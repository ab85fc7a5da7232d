//! A byte budget for memory that is dropped when it does not fit: the peer port's queues,
//! on the sending side and in front of each replica's driver, and a leader's copies of its
//! newest appends.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes held by a queue, against a limit. Items up to `always` bytes (acks, heartbeats)
/// are always admitted, so that a queue full of appends never starves the small messages
/// that let the protocol make progress.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    held: AtomicUsize,
    limit: usize,
    always: usize,
}

impl ByteBudget {
    pub(crate) const fn new(limit: usize, always: usize) -> ByteBudget {
        ByteBudget {
            held: AtomicUsize::new(0),
            limit,
            always,
        }
    }

    /// Takes `len` bytes if they fit (or are small enough to always fit); on `false` the
    /// item must be dropped. Returns the bytes held before, for logs.
    pub(crate) fn try_take(&self, len: usize) -> Result<usize, usize> {
        let held = self.held.fetch_add(len, Ordering::Relaxed);
        if len <= self.always || held + len <= self.limit {
            Ok(held)
        } else {
            self.held.fetch_sub(len, Ordering::Relaxed);
            Err(held)
        }
    }

    /// Gives back `len` bytes taken earlier (the item left the queue).
    pub(crate) fn release(&self, len: usize) {
        self.held.fetch_sub(len, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_budget_drops_large_items_but_not_small_ones() {
        let budget = ByteBudget::new(64 << 20, 4096);
        assert!(budget.try_take(63 << 20).is_ok());
        assert!(budget.try_take(1 << 20).is_ok());
        assert_eq!(budget.try_take(1 << 20), Err(64 << 20), "full");
        assert!(budget.try_take(64).is_ok(), "an ack always fits");
        budget.release(64);
        budget.release(1 << 20);
        assert!(budget.try_take(1 << 20).is_ok(), "room again");
    }
}

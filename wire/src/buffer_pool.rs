//! Reusable buffers for batches and frame payloads of up to a few megabytes: a producer's
//! batches, a broker's request payloads.
//!
//! Allocating such a buffer fresh for each batch costs more than filling it. The allocator
//! hands large buffers back to the kernel when they are freed, so each new one is faulted in
//! and zeroed page by page. A pool keeps the allocations of recent buffers and hands one out
//! again once nothing uses it any more.

use std::sync::Mutex;

use bytes::BytesMut;

/// New allocations are rounded up to a multiple of this, so that buffers of slightly
/// different sizes (batches that filled to a little under their limit) can reuse each other's.
const CAPACITY_STEP: usize = 64 << 10;

/// A bounded pool of buffer allocations.
///
/// The pool keeps, for each allocation it made, an empty handle on it (a "token"). A buffer
/// taken from the pool is the rest of that allocation; the caller fills it, freezes it and
/// passes it on as usual. Once the caller's last handle on the bytes is gone (the batch was
/// acknowledged, the payload is in the log), the token is the allocation's only owner and the
/// next [`BufferPool::take`] reuses it. So a reused buffer never overlaps bytes still in use,
/// and nothing has to be given back.
///
/// At most `idle_max` allocations of at most `capacity_max` bytes each are kept (the oldest
/// token is dropped first); larger buffers are allocated on their own.
#[derive(Debug)]
pub struct BufferPool {
    /// Oldest first: an empty handle on each kept allocation, and the allocation's size.
    tokens: Mutex<Vec<(BytesMut, usize)>>,
    idle_max: usize,
    capacity_max: usize,
}

impl BufferPool {
    pub const fn new(idle_max: usize, capacity_max: usize) -> BufferPool {
        BufferPool {
            tokens: Mutex::new(Vec::new()),
            idle_max,
            capacity_max,
        }
    }

    /// An empty buffer with room for at least `len` bytes: a kept allocation nothing uses any
    /// more when there is one, else a new one.
    pub fn take(&self, len: usize) -> BytesMut {
        if len > self.capacity_max || self.idle_max == 0 {
            return BytesMut::with_capacity(len);
        }
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let capacity = len.next_multiple_of(CAPACITY_STEP).min(self.capacity_max);
        // Not more than four times the room asked for: a small buffer that lives long (a
        // batch filling slowly) must not hold a large allocation.
        let fits = |kept: usize| kept >= len && kept <= capacity.saturating_mul(4);
        // Newest first: the most recently used allocation is the likeliest still in the
        // processor's caches.
        for (token, kept) in tokens.iter_mut().rev() {
            if fits(*kept) && token.try_reclaim(*kept) {
                return token.split_off(0);
            }
        }
        let mut token = BytesMut::with_capacity(capacity);
        let buffer = token.split_off(0);
        if tokens.len() >= self.idle_max {
            tokens.remove(0);
        }
        tokens.push((token, buffer.capacity()));
        buffer
    }

    /// Allocations the pool keeps (in use or not).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// A buffer of `len` bytes of `byte`, frozen as callers do.
    fn fill(pool: &BufferPool, len: usize, byte: u8) -> (Bytes, *const u8) {
        let mut buffer = pool.take(len);
        let at = buffer.as_ptr();
        buffer.extend_from_slice(&vec![byte; len]);
        (buffer.freeze(), at)
    }

    #[test]
    fn an_allocation_is_reused_once_nothing_uses_it() {
        let pool = BufferPool::new(4, 1 << 20);
        let (bytes, first) = fill(&pool, 1000, 7);
        drop(bytes);
        let (_, again) = fill(&pool, CAPACITY_STEP, 8);
        assert_eq!(again, first, "the same allocation");
        assert_eq!(pool.kept(), 1);
    }

    #[test]
    fn bytes_in_use_are_never_handed_out_again() {
        let pool = BufferPool::new(4, 1 << 20);
        let (kept, first) = fill(&pool, 1000, 7);
        let (other, at) = fill(&pool, 1000, 8);
        assert_ne!(at, first);
        assert!(kept.iter().all(|b| *b == 7));
        assert!(other.iter().all(|b| *b == 8));
        assert_eq!(pool.kept(), 2);
        // A slice alone keeps the allocation in use.
        let slice = kept.slice(10..20);
        drop(kept);
        let (_, third) = fill(&pool, 1000, 9);
        assert_ne!(third, first);
        assert!(slice.iter().all(|b| *b == 7));
    }

    #[test]
    fn a_buffer_that_grew_leaves_its_allocation_to_the_pool() {
        let pool = BufferPool::new(4, 1 << 20);
        let mut buffer = pool.take(100);
        let first = buffer.as_ptr();
        // Growing past the allocation moves the bytes to a new one.
        buffer.extend_from_slice(&vec![1; 2 * CAPACITY_STEP]);
        assert_ne!(buffer.as_ptr(), first);
        let (_, again) = fill(&pool, 100, 2);
        assert_eq!(again, first);
        drop(buffer);
    }

    #[test]
    fn a_small_buffer_does_not_take_a_large_allocation() {
        let pool = BufferPool::new(4, 1 << 20);
        let (large, first) = fill(&pool, 1 << 20, 1);
        drop(large);
        let (_, small) = fill(&pool, 100, 2);
        assert_ne!(small, first);
        let (_, again) = fill(&pool, (1 << 20) - 100, 3);
        assert_eq!(again, first);
    }

    #[test]
    fn the_pool_is_bounded() {
        let pool = BufferPool::new(2, 1 << 20);
        let held: Vec<Bytes> = (0..5).map(|_| fill(&pool, 100, 0).0).collect();
        assert_eq!(pool.kept(), 2);
        drop(held);
        let big = pool.take(3 << 20);
        assert!(big.capacity() >= 3 << 20);
        assert_eq!(pool.kept(), 2, "a buffer above the maximum is not kept");
        let none = BufferPool::new(0, 1 << 20);
        let _ = none.take(100);
        assert_eq!(none.kept(), 0);
    }
}

//! A broker-wide cap on the bandwidth of history reads: fetches that read sealed segments of
//! a partition's log, or its tier, on behalf of consumers catching up. Such reads go to the
//! disk the logs sync to (or to object storage through the tier cache) and take the cores
//! that QUIC needs; a consumer replaying a day of history must not slow publishers down by
//! an order of magnitude. Reads at the tail (the active segment) are never held back.
//!
//! A token bucket, charged after each read for the bytes it returned: a read waits before it
//! starts while the reads before it are over the budget, then goes whole. So a read is never
//! cut short, and over time history is served at the cap. The bucket itself is pure (the
//! time is an argument); [`HistoryReadCap`] is its shell.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes per second, with a burst of a tenth of a second's worth.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    bytes_per_second: u64,
    burst: i128,
    /// Bytes that may be read now; negative while earlier reads are over the budget.
    level: i128,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket refilling at `bytes_per_second` (at least 1).
    pub(crate) fn new(bytes_per_second: u64, now: Instant) -> TokenBucket {
        let bytes_per_second = bytes_per_second.max(1);
        let burst = i128::from(bytes_per_second / 10).max(1);
        TokenBucket {
            bytes_per_second,
            burst,
            level: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        let earned = elapsed.as_nanos() as i128 * i128::from(self.bytes_per_second) / 1_000_000_000;
        if earned > 0 {
            self.level = (self.level + earned).min(self.burst);
            self.at = now;
        }
    }

    /// How long a read must wait before it starts: zero unless earlier reads ran over.
    pub(crate) fn delay(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.level >= 0 {
            return Duration::ZERO;
        }
        let owed = u128::try_from(-self.level).unwrap_or(u128::MAX);
        let nanos = owed * 1_000_000_000 / u128::from(self.bytes_per_second) + 1;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Records a read of `bytes`.
    pub(crate) fn charge(&mut self, bytes: u64, now: Instant) {
        self.refill(now);
        self.level -= i128::from(bytes);
    }

    /// Returns `bytes` charged but not read (a reservation larger than the read).
    pub(crate) fn give_back(&mut self, bytes: u64) {
        self.level = (self.level + i128::from(bytes)).min(self.burst);
    }
}

/// The broker's history-read budget: unlimited, or a [`TokenBucket`] shared by every fetch.
///
/// Reads take turns, first come first served. A read is admitted once the bucket is out of
/// debt, and then reserves what it may return (its `max_bytes`); the part it did not return
/// goes back when its [`Admission`] is dropped. So concurrent fetches cannot start together
/// on one bucket level, and one that waits is not overtaken.
#[derive(Debug)]
pub struct HistoryReadCap {
    bucket: Option<Mutex<TokenBucket>>,
    queue: tokio::sync::Mutex<()>,
}

/// Longest a waiting read sleeps before it looks at the bucket again: a reservation given
/// back meanwhile shortens the wait.
const RECHECK: Duration = Duration::from_millis(100);

impl HistoryReadCap {
    /// `None`: no cap.
    pub fn new(bytes_per_second: Option<u64>) -> HistoryReadCap {
        HistoryReadCap {
            bucket: bytes_per_second.map(|rate| Mutex::new(TokenBucket::new(rate, Instant::now()))),
            queue: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether history reads are capped at all.
    pub fn is_capped(&self) -> bool {
        self.bucket.is_some()
    }

    fn bucket(&self) -> Option<std::sync::MutexGuard<'_, TokenBucket>> {
        self.bucket
            .as_ref()
            .map(|b| b.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Waits for this read's turn and for the budget, then reserves `reserve` bytes. `None`
    /// once `until` passes first: the caller answers with nothing and the consumer asks
    /// again (having waited until `until`, so that it does not spin).
    pub async fn admit(&self, reserve: u64, until: tokio::time::Instant) -> Option<Admission<'_>> {
        let started = tokio::time::Instant::now();
        if !self.is_capped() {
            return Some(Admission {
                rate: self,
                reserved: 0,
                used: 0,
                waited: Duration::ZERO,
            });
        }
        let Ok(_turn) = tokio::time::timeout_at(until, self.queue.lock()).await else {
            return None;
        };
        loop {
            let delay = match self.bucket() {
                Some(mut bucket) => {
                    let now = Instant::now();
                    let delay = bucket.delay(now);
                    if delay.is_zero() {
                        bucket.charge(reserve, now);
                    }
                    delay
                }
                None => Duration::ZERO,
            };
            if delay.is_zero() {
                return Some(Admission {
                    rate: self,
                    reserved: reserve,
                    used: 0,
                    waited: started.elapsed(),
                });
            }
            let wake = tokio::time::Instant::now() + delay.min(RECHECK);
            if wake > until {
                tokio::time::sleep_until(until).await;
                return None;
            }
            tokio::time::sleep_until(wake).await;
        }
    }

    fn give_back(&self, bytes: u64) {
        if bytes > 0
            && let Some(mut bucket) = self.bucket()
        {
            bucket.give_back(bytes);
        }
    }
}

/// A history read let through: holds its reservation until dropped, when the part it did
/// not use (all of it, if the read failed) goes back to the budget.
#[derive(Debug)]
#[must_use = "dropping the admission at once gives its reservation back"]
pub struct Admission<'a> {
    rate: &'a HistoryReadCap,
    reserved: u64,
    used: u64,
    /// How long the read waited for its turn and the budget.
    pub waited: Duration,
}

impl Admission<'_> {
    /// The read returned `bytes`.
    pub fn used(&mut self, bytes: u64) {
        self.used = bytes;
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.rate.give_back(self.reserved.saturating_sub(self.used));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_full_bucket_lets_a_read_start_at_once() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10 * MIB, start);
        assert_eq!(bucket.delay(start), Duration::ZERO);
    }

    #[test]
    fn a_read_over_the_budget_delays_the_next_by_what_it_owes() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10 * MIB, start);
        // The burst is 1 MiB: a 6 MiB read leaves 5 MiB owed, half a second at 10 MiB/s.
        bucket.charge(6 * MIB, start);
        let delay = bucket.delay(start);
        assert!(
            delay > Duration::from_millis(499) && delay < Duration::from_millis(501),
            "{delay:?}"
        );
        // A quarter of a second later, half of it is paid.
        let later = start + Duration::from_millis(250);
        let delay = bucket.delay(later);
        assert!(
            delay > Duration::from_millis(249) && delay < Duration::from_millis(251),
            "{delay:?}"
        );
        assert_eq!(
            bucket.delay(start + Duration::from_millis(501)),
            Duration::ZERO
        );
    }

    #[test]
    fn idle_time_earns_no_more_than_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10 * MIB, start);
        let much_later = start + Duration::from_secs(3600);
        // An hour idle: still only 1 MiB may go unpaid, so 2 MiB owe 1 MiB (0.1 s).
        bucket.charge(2 * MIB, much_later);
        let delay = bucket.delay(much_later);
        assert!(
            delay > Duration::from_millis(99) && delay < Duration::from_millis(101),
            "{delay:?}"
        );
    }

    #[test]
    fn reads_paced_by_the_bucket_average_the_rate() {
        // 100 reads of 4 MiB at 10 MiB/s, each starting when the bucket allows: after the
        // first (3 MiB over the 1 MiB burst) each waits 0.4 s, so the last starts 39.5 s in.
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10 * MIB, start);
        let mut now = start;
        for _ in 0..100 {
            now += bucket.delay(now);
            bucket.charge(4 * MIB, now);
        }
        let elapsed = now - start;
        assert!(
            elapsed > Duration::from_millis(39_400) && elapsed < Duration::from_millis(39_600),
            "{elapsed:?}"
        );
    }

    #[test]
    fn no_cap_never_waits() {
        let rate = HistoryReadCap::new(None);
        block_on(async {
            let until = tokio::time::Instant::now();
            let admitted = rate.admit(u64::MAX, until).await.expect("admitted");
            assert_eq!(admitted.waited, Duration::ZERO);
        });
    }

    #[test]
    fn a_reservation_is_given_back_for_what_the_read_did_not_return() {
        let rate = HistoryReadCap::new(Some(10 * MIB));
        block_on(async {
            let until = tokio::time::Instant::now() + Duration::from_secs(5);
            let mut first = rate.admit(8 * MIB, until).await.expect("admitted");
            first.used(MIB);
            drop(first);
            // 8 MiB reserved, 7 given back: the next read starts at once.
            let second = rate.admit(MIB, until).await.expect("admitted");
            assert!(
                second.waited < Duration::from_millis(50),
                "{:?}",
                second.waited
            );
        });
    }

    #[test]
    fn a_read_that_cannot_start_before_its_bound_gets_nothing_after_waiting_for_it() {
        let rate = HistoryReadCap::new(Some(MIB));
        block_on(async {
            let start = tokio::time::Instant::now();
            let mut big = rate
                .admit(10 * MIB, start + Duration::from_secs(1))
                .await
                .expect("the first read starts at once");
            big.used(10 * MIB);
            drop(big);
            // Ten seconds owed at 1 MiB/s: a read bound to 200 ms waits that long, then
            // gets nothing.
            let bound = tokio::time::Instant::now() + Duration::from_millis(200);
            assert!(rate.admit(MIB, bound).await.is_none());
            assert!(tokio::time::Instant::now() >= bound);
        });
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(future)
    }
}

//! [`Backoff`]: how long to wait before the next try, for every retry loop in Floe (the
//! client's reconnects, resends and fetches; the tier's uploads). Exponential, capped, with
//! full jitter so that clients that failed together do not retry together. Pure: the caller
//! passes the random number (from a [`Jitter`]) and does the sleeping; no clock, no I/O.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// An exponential backoff with full jitter: before retry `n` (0 = the first retry) wait a
/// uniformly random time in `[0, min(max, initial · 2ⁿ)]`.
///
/// Full jitter spreads retries that failed together over the whole window, which is what
/// keeps a broker or a bucket that just came back from a wave of synchronised retries; the
/// cap keeps the wait bounded however long the outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first retry's wait.
    pub initial: Duration,
    /// The ceiling of any wait; `initial` above it is cut to it.
    pub max: Duration,
}

impl Backoff {
    /// The longest wait before retry `retry`: `initial · 2^retry`, at most `max`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The wait before retry `retry`: `random` (uniform over `u64`, e.g. [`Jitter::draw`])
    /// scaled into `[0, ceiling(retry)]`. `u64::MAX` gives the ceiling itself. Only its high
    /// 32 bits count: steps of a four-billionth of the ceiling are fine enough, and the
    /// product stays within a `u128` even for `Duration::MAX`.
    #[must_use]
    pub fn delay(&self, retry: u32, random: u64) -> Duration {
        let ceiling = self.ceiling(retry).as_nanos();
        let steps = u128::from(u32::MAX);
        let nanos = ceiling * u128::from(random >> 32) / steps;
        // `nanos <= ceiling`, a `Duration`'s: its seconds fit in a `u64`.
        let seconds = u64::try_from(nanos / NANOS_PER_SECOND).unwrap_or(u64::MAX);
        let subsecond = (nanos % NANOS_PER_SECOND) as u32;
        Duration::new(seconds, subsecond)
    }
}

/// A small seeded source of the random numbers [`Backoff::delay`] takes (splitmix64): the
/// same seed gives the same waits, so tests pin them. Not for anything secret.
#[derive(Debug, Clone)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    /// A source that yields the same numbers for the same `seed`.
    pub fn new(seed: u64) -> Jitter {
        Jitter { state: seed }
    }

    /// A source seeded differently in every process and every call, from the random keys
    /// the standard library keeps for its hash maps: the one constructor that is not
    /// deterministic, for retry loops outside tests.
    pub fn unpredictable() -> Jitter {
        Jitter::new(RandomState::new().hash_one(0x666c_6f65_u64))
    }

    /// The next number, uniform over `u64`.
    pub fn draw(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
    };

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let ceilings: Vec<u128> = (0..6).map(|r| BACKOFF.ceiling(r).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(BACKOFF.ceiling(31), Duration::from_secs(1));
        assert_eq!(BACKOFF.ceiling(u32::MAX), Duration::from_secs(1));
        let huge = Backoff {
            initial: Duration::MAX,
            max: Duration::MAX,
        };
        assert_eq!(huge.ceiling(40), Duration::MAX, "saturates, never panics");
    }

    #[test]
    fn the_random_number_spans_zero_to_the_ceiling() {
        assert_eq!(BACKOFF.delay(0, 0), Duration::ZERO);
        assert_eq!(BACKOFF.delay(0, u64::MAX), Duration::from_millis(100));
        assert_eq!(BACKOFF.delay(2, 1 << 63), Duration::from_millis(200));
        assert_eq!(BACKOFF.delay(9, u64::MAX), Duration::from_secs(1));
        let huge = Backoff {
            initial: Duration::MAX,
            max: Duration::MAX,
        };
        assert_eq!(huge.delay(3, u64::MAX), Duration::MAX);
    }

    #[test]
    fn jittered_waits_fill_the_window_and_stay_in_it() {
        let mut jitter = Jitter::new(7);
        let waits: Vec<Duration> = (0..1000).map(|_| BACKOFF.delay(3, jitter.draw())).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_millis(800)));
        // A uniform spread: each eighth of the window gets about 125 of 1000.
        let mut eighths = [0u32; 8];
        for w in &waits {
            let slot = (w.as_nanos() * 8 / Duration::from_millis(800).as_nanos()).min(7);
            eighths[slot as usize] += 1;
        }
        assert!(
            eighths.iter().all(|n| (80..=170).contains(n)),
            "{eighths:?}"
        );
    }

    #[test]
    fn a_seed_pins_the_sequence() {
        let mut a = Jitter::new(42);
        let mut b = Jitter::new(42);
        let first: Vec<u64> = (0..4).map(|_| a.draw()).collect();
        assert_eq!(first, (0..4).map(|_| b.draw()).collect::<Vec<_>>());
        // splitmix64's published first output for seed 0.
        assert_eq!(Jitter::new(0).draw(), 0xe220_a839_7b1d_cdaf);
        assert_ne!(Jitter::new(43).draw(), first[0]);
    }
}

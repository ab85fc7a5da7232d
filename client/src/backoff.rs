//! How long to wait before the next attempt: exponential, capped, honouring what the broker
//! asked for. Pure: the caller sleeps.

use std::time::Duration;

/// Backoff schedule: `base` before the first retry, doubling per retry, never above `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait before retry number `retry` (0 = the first retry). A broker's `retry after`
    /// hint is a floor: the wait is never shorter than what it asked for.
    pub fn delay(&self, retry: u32, broker_hint: Option<Duration>) -> Duration {
        let doubled = self
            .base
            .checked_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.max);
        let delay = doubled.min(self.max);
        broker_hint.map_or(delay, |hint| delay.max(hint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let delays: Vec<u128> = (0..6).map(|r| backoff.delay(r, None).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.delay(u32::MAX, None), Duration::from_secs(1));
    }

    #[test]
    fn a_broker_hint_is_a_floor() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert_eq!(
            backoff.delay(0, Some(Duration::from_millis(750))),
            Duration::from_millis(750)
        );
        assert_eq!(
            backoff.delay(3, Some(Duration::from_millis(10))),
            Duration::from_millis(800)
        );
    }
}

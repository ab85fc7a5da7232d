//! Retrying a fallible object-store operation with exponential backoff. Only errors that
//! [`TierError::is_retryable`] says may pass are retried.

use std::future::Future;
use std::time::Duration;

use crate::TierError;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The wait before try number `attempt + 1` (`attempt` counts from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// Runs `op` until it succeeds, fails for good, or the attempts run out.
    pub async fn run<T, F, Fut>(&self, mut op: F) -> Result<T, TierError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, TierError>>,
    {
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(value) => return Ok(value),
                Err(e) if e.is_retryable() && attempt < self.attempts => {
                    tracing::debug!(error = %e, attempt, "tier operation failed; retrying");
                    tokio::time::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        let waits: Vec<_> = (1..=6).map(|a| p.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.backoff(200), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_are_retried_and_others_are_not() {
        let calls = Arc::new(AtomicU32::new(0));
        let policy = RetryPolicy::default();
        let c = calls.clone();
        let result = policy
            .run(|| {
                let c = c.clone();
                async move {
                    if c.fetch_add(1, Ordering::SeqCst) < 2 {
                        Err(TierError::Cache("flaky".into()))
                    } else {
                        Ok(7)
                    }
                }
            })
            .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let c = calls.clone();
        c.store(0, Ordering::SeqCst);
        let result: Result<(), _> = policy
            .run(|| {
                c.fetch_add(1, Ordering::SeqCst);
                async {
                    Err(TierError::Fenced {
                        writer: 1,
                        committed: 2,
                    })
                }
            })
            .await;
        assert!(matches!(result, Err(TierError::Fenced { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}

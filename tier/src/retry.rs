//! Retrying a fallible tier operation: [`RetryPolicy`] says how often, and waits Floe's one
//! [`Backoff`] (exponential, full jitter) between tries. Which errors deserve another try is
//! the caller's to say: [`TierStore::worth_retrying`](crate::TierStore::worth_retrying) keeps
//! this loop from stacking on the retries an S3 store already made for each request.

use std::future::Future;
use std::time::Duration;

use floe_wire::{Backoff, Jitter};

use crate::TierError;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            backoff: Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(10),
            },
        }
    }
}

impl RetryPolicy {
    /// Runs `op` until it succeeds, fails with an error `worth_retrying` refuses, or the
    /// attempts run out; returns the last error then.
    pub async fn run<T, F, Fut>(
        &self,
        worth_retrying: impl Fn(&TierError) -> bool,
        mut op: F,
    ) -> Result<T, TierError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, TierError>>,
    {
        let mut jitter = Jitter::unpredictable();
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(value) => return Ok(value),
                Err(e) if attempt < self.attempts && worth_retrying(&e) => {
                    tracing::debug!(error = %e, attempt, "tier operation failed; retrying");
                    tokio::time::sleep(self.backoff.delay(attempt - 1, jitter.draw())).await;
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

    #[tokio::test(start_paused = true)]
    async fn errors_worth_retrying_are_retried_and_others_are_not() {
        let calls = Arc::new(AtomicU32::new(0));
        let policy = RetryPolicy::default();
        let c = calls.clone();
        let result = policy
            .run(TierError::is_retryable, || {
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
            .run(TierError::is_retryable, || {
                c.fetch_add(1, Ordering::SeqCst);
                async {
                    Err(TierError::Fenced {
                        writer: floe_wire::LeaderEpoch::new(1),
                        committed: floe_wire::LeaderEpoch::new(2),
                    })
                }
            })
            .await;
        assert!(
            matches!(result, Err(TierError::Fenced { .. })),
            "{result:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_attempts_bound_the_tries_and_the_waits_stay_under_the_ceilings() {
        let calls = Arc::new(AtomicU32::new(0));
        let policy = RetryPolicy {
            attempts: 4,
            backoff: Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(3),
            },
        };
        let started = tokio::time::Instant::now();
        let result: Result<(), _> = policy
            .run(
                |_| true,
                || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Err(TierError::Cache("down".into())) }
                },
            )
            .await;
        assert!(matches!(result, Err(TierError::Cache(_))), "{result:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        // Three waits, under ceilings of 1 s, 2 s and 3 s.
        assert!(
            started.elapsed() <= Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
    }
}

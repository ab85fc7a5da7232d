//! A producer's settings, and the effective values once the broker's limits are known.
//! Pure.

use std::time::Duration;

use floe_wire::batch::HEADER_LEN;
use floe_wire::frame::{ConnectionLimits, FRAME_OVERHEAD_BYTES};

use crate::error::ConfigError;

use super::window::RetryPolicy;

/// The most batches a producer keeps in flight per partition: what a broker of this version
/// remembers per producer for deduplication, and announces in its `HelloAck`. A broker may
/// announce fewer; the producer then keeps to that, since more in flight could make a resend
/// look out of order.
pub const MAX_IN_FLIGHT_BATCHES: usize = 16;

/// Batches in flight per partition by default. On one connection the window, not the CPU,
/// bounds a producer's rate until about this many 1 MiB batches (`docs/benchmarks-history.md`).
pub const DEFAULT_IN_FLIGHT_BATCHES: usize = 10;

/// How a [`Producer`](crate::Producer) batches, retries and bounds its memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// How long a batch waits for more records before it is sent.
    pub linger: Duration,
    /// Largest batch, header included; capped by the broker's `max_batch_bytes`.
    pub max_batch_bytes: u32,
    /// Batches per partition sent and not yet acknowledged; 1 to
    /// [`MAX_IN_FLIGHT_BATCHES`], and capped by what the broker announces.
    pub max_in_flight: usize,
    /// Record bytes buffered (waiting, in flight, or awaiting retry) before `send` waits.
    pub buffer_bytes: u32,
    /// Resends of one batch before it fails.
    pub max_retries: u32,
    /// A batch not acknowledged this long after its first send fails.
    pub delivery_timeout: Duration,
    /// The longest wait before the first resend; it doubles per resend up to
    /// `retry_backoff_max`. Each wait is random below it ([`floe_wire::Backoff`]), and never
    /// shorter than a broker's `retry after`.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// How long [`Producer::new`](crate::Producer::new) waits for a stream the brokers do not
    /// know yet (one just created, whose partitions are still being assigned) before it
    /// fails with `UnknownStream`. Zero fails at once.
    pub metadata_wait: Duration,
}

impl Default for ProducerConfig {
    fn default() -> ProducerConfig {
        ProducerConfig {
            linger: Duration::from_millis(5),
            max_batch_bytes: 1024 * 1024,
            max_in_flight: DEFAULT_IN_FLIGHT_BATCHES,
            buffer_bytes: 32 * 1024 * 1024,
            max_retries: 10,
            delivery_timeout: Duration::from_secs(120),
            retry_backoff: Duration::from_millis(50),
            retry_backoff_max: Duration::from_secs(2),
            metadata_wait: Duration::from_secs(10),
        }
    }
}

/// The values a producer runs with on a connection with `limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub linger: Duration,
    pub max_batch_bytes: usize,
    pub max_in_flight: usize,
    pub buffer_bytes: u32,
    /// Most batch bytes in one `Produce` request: the frame limit less the room its other
    /// fields need.
    pub request_bytes: usize,
    pub retry: RetryPolicy,
}

impl Settings {
    /// Caps the configuration by the broker's limits and checks that it can work.
    pub fn resolve(
        config: &ProducerConfig,
        limits: &ConnectionLimits,
    ) -> Result<Settings, ConfigError> {
        let max_batch_bytes = config.max_batch_bytes.min(limits.max_batch_bytes) as usize;
        if max_batch_bytes <= HEADER_LEN {
            return Err(ConfigError::Invalid {
                field: "max_batch_bytes",
                reason: format!("{max_batch_bytes} leaves no room for a record"),
            });
        }
        if !(1..=MAX_IN_FLIGHT_BATCHES).contains(&config.max_in_flight) {
            return Err(ConfigError::Invalid {
                field: "max_in_flight",
                reason: format!(
                    "{} is outside 1..={MAX_IN_FLIGHT_BATCHES}, the batches the broker \
                     deduplicates per producer",
                    config.max_in_flight
                ),
            });
        }
        if (config.buffer_bytes as usize) < max_batch_bytes {
            return Err(ConfigError::Invalid {
                field: "buffer_bytes",
                reason: format!(
                    "{} is smaller than one batch of {max_batch_bytes} bytes",
                    config.buffer_bytes
                ),
            });
        }
        let request_bytes = limits
            .max_frame_bytes
            .saturating_sub(FRAME_OVERHEAD_BYTES)
            .max(limits.max_batch_bytes) as usize;
        Ok(Settings {
            linger: config.linger,
            max_batch_bytes,
            max_in_flight: config
                .max_in_flight
                .min(usize::from(limits.max_in_flight_batches)),
            buffer_bytes: config.buffer_bytes,
            request_bytes,
            retry: RetryPolicy {
                backoff: floe_wire::Backoff {
                    initial: config.retry_backoff,
                    max: config.retry_backoff_max,
                },
                max_retries: config.max_retries,
                delivery_timeout: config.delivery_timeout,
            },
        })
    }
}

/// The limits a broker with its default settings announces, for the producer's tests.
#[cfg(test)]
pub(crate) const TEST_LIMITS: ConnectionLimits = ConnectionLimits {
    max_frame_bytes: 16 * 1024 * 1024,
    max_batch_bytes: 8 * 1024 * 1024,
    max_list_entries: 10_000,
    max_in_flight_bytes: 64 * 1024 * 1024,
    max_in_flight_batches: 16,
};

#[cfg(test)]
mod tests {
    use super::TEST_LIMITS as LIMITS;
    use super::*;

    #[test]
    fn the_defaults_fit_the_default_broker() {
        let settings = Settings::resolve(&ProducerConfig::default(), &LIMITS).expect("valid");
        assert_eq!(settings.max_batch_bytes, 1024 * 1024);
        assert_eq!(settings.linger, Duration::from_millis(5));
        assert_eq!(settings.max_in_flight, 10);
        assert_eq!(settings.request_bytes, 16 * 1024 * 1024 - 1024);
    }

    #[test]
    fn batches_never_exceed_the_brokers_limit() {
        let config = ProducerConfig {
            max_batch_bytes: 32 * 1024 * 1024,
            ..ProducerConfig::default()
        };
        let settings = Settings::resolve(&config, &LIMITS).expect("valid");
        assert_eq!(settings.max_batch_bytes, 8 * 1024 * 1024);
    }

    #[test]
    fn more_in_flight_than_the_broker_deduplicates_is_refused() {
        for max_in_flight in [0, 17] {
            let config = ProducerConfig {
                max_in_flight,
                ..ProducerConfig::default()
            };
            assert!(matches!(
                Settings::resolve(&config, &LIMITS),
                Err(ConfigError::Invalid {
                    field: "max_in_flight",
                    ..
                })
            ));
        }
    }

    #[test]
    fn a_broker_that_remembers_fewer_batches_caps_the_window() {
        let config = ProducerConfig {
            max_in_flight: 16,
            ..ProducerConfig::default()
        };
        let remembers_five = ConnectionLimits {
            max_in_flight_batches: 5,
            ..LIMITS
        };
        let settings = Settings::resolve(&config, &remembers_five).expect("valid");
        assert_eq!(settings.max_in_flight, 5);
        assert_eq!(
            Settings::resolve(&config, &LIMITS)
                .expect("valid")
                .max_in_flight,
            16
        );
    }

    #[test]
    fn a_buffer_smaller_than_a_batch_is_refused() {
        let config = ProducerConfig {
            buffer_bytes: 1024,
            ..ProducerConfig::default()
        };
        assert!(matches!(
            Settings::resolve(&config, &LIMITS),
            Err(ConfigError::Invalid {
                field: "buffer_bytes",
                ..
            })
        ));
    }
}

//! The time a bench record was meant to be sent, written at the start of its value so that
//! a consumer can measure end to end: the magic `FLBN`, then microseconds since the Unix
//! epoch as a little-endian u64. No I/O here.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floe_client::ConsumedRecord;

use super::micros;

/// Marks a value that carries its publish time.
const STAMP_MAGIC: &[u8; 4] = b"FLBN";
const STAMP_LEN: usize = 12;

/// Writes the magic and a time (µs since the Unix epoch) at the start of a value long enough
/// to hold them.
pub(crate) fn stamp(value: &mut [u8], micros: u64) {
    if value.len() >= STAMP_LEN {
        value[..4].copy_from_slice(STAMP_MAGIC);
        value[4..STAMP_LEN].copy_from_slice(&micros.to_le_bytes());
    }
}

/// The time stamped in a value, if it has one.
pub(crate) fn stamped_micros(value: &[u8]) -> Option<u64> {
    value
        .get(..STAMP_LEN)
        .filter(|head| head.starts_with(STAMP_MAGIC))
        .and_then(|head| head[4..].try_into().ok())
        .map(u64::from_le_bytes)
}

/// When a record was published, in µs since the Unix epoch: the stamp in its value if it has
/// one, else its timestamp (ms).
pub(crate) fn published_micros(record: &ConsumedRecord) -> u64 {
    stamped_micros(&record.value).unwrap_or_else(|| {
        u64::try_from(record.timestamp)
            .unwrap_or(0)
            .saturating_mul(1000)
    })
}

/// The wall clock read off the monotonic one: one clock read per record gives both the
/// send time a latency is measured from and the time stamped in the value. Over a
/// benchmark's minutes the two clocks drift apart by microseconds at most.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallClock {
    origin: Instant,
    origin_micros: u64,
}

impl WallClock {
    pub fn new() -> WallClock {
        WallClock {
            origin: Instant::now(),
            origin_micros: now_micros(),
        }
    }

    /// Microseconds since the Unix epoch at `at`.
    pub fn micros_at(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.origin) {
            Some(after) => self.origin_micros.saturating_add(micros(after)),
            None => self
                .origin_micros
                .saturating_sub(micros(self.origin.duration_since(at))),
        }
    }
}

pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, micros)
}

/// Microseconds between two wall-clock readings, zero if `later` is not later.
pub(crate) fn micros_between(earlier: u64, later: u64) -> Duration {
    Duration::from_micros(later.saturating_sub(earlier))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use floe_client::{Offset, PartitionId};

    use super::*;

    fn record(timestamp: i64, value: Vec<u8>) -> ConsumedRecord {
        ConsumedRecord {
            partition: PartitionId::new(0),
            offset: Offset::new(0),
            timestamp,
            key: None,
            value: Bytes::from(value),
            headers: vec![],
        }
    }

    #[test]
    fn a_stamped_value_gives_its_publish_time_in_microseconds() {
        let mut value = vec![0u8; 100];
        let clock = WallClock::new();
        let at = Instant::now();
        stamp(&mut value, clock.micros_at(at));
        let published = published_micros(&record(0, value));
        assert_eq!(published, clock.micros_at(at));
        assert_eq!(
            micros_between(published, published + 1500),
            Duration::from_micros(1500)
        );
    }

    #[test]
    fn an_unstamped_value_falls_back_to_the_record_timestamp() {
        assert_eq!(
            published_micros(&record(2_000, b"short".to_vec())),
            2_000_000
        );
        let mut tiny = [0u8; 4];
        stamp(&mut tiny, now_micros());
        assert_eq!(tiny, [0; 4], "too short to stamp");
    }

    #[test]
    fn the_wall_clock_reads_instants_before_and_after_its_origin() {
        let clock = WallClock::new();
        let later = clock.origin + Duration::from_millis(3);
        assert_eq!(clock.micros_at(later), clock.origin_micros + 3_000);
        if let Some(earlier) = clock.origin.checked_sub(Duration::from_millis(2)) {
            assert_eq!(clock.micros_at(earlier), clock.origin_micros - 2_000);
        }
    }
}

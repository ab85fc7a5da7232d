//! The wall clock, read in one place: milliseconds since the Unix epoch, the unit of record
//! timestamps, segment ages, tier retention and the replication state machine's time.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch; 0 for a clock set before it.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// [`now_ms`] as the unsigned count the replication state machine takes.
pub(crate) fn now_ms_unsigned() -> u64 {
    u64::try_from(now_ms()).unwrap_or(0)
}

//! Byte sizes and durations as people type them: `64MiB`, `1.5GB`, `4096`; `10m`, `1h30m`.

use std::time::Duration;

pub use floe_wire::units::parse_size;

/// Parses a duration such as `10m`, `1h30m`, `500ms` or `7days`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration (try 10m or 1h30m): {e}"))
}

/// Milliseconds of a duration, as the protocol carries them.
pub fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_human_units() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(duration_ms(Duration::from_secs(600)), 600_000);
    }
}

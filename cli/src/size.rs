//! Byte sizes and durations as people type them: `64MiB`, `1.5GB`, `4096`; `10m`, `1h30m`.

use std::time::Duration;

pub use floe_wire::units::parse_size;

/// Parses a duration such as `10m`, `1h30m`, `500ms` or `7days`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration (try 10m or 1h30m): {e}"))
}

/// A setting given on the command line: a value, or `default` (also `unlimited`, `none`)
/// to return it to its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting(pub Option<u64>);

const CLEARING: [&str; 3] = ["default", "unlimited", "none"];

/// A size such as `64MiB`, or `default`.
pub fn parse_size_setting(text: &str) -> Result<Setting, String> {
    if CLEARING.contains(&text.trim()) {
        return Ok(Setting(None));
    }
    parse_size(text).map(|bytes| Setting(Some(bytes)))
}

/// A duration such as `6h`, or `default`; in milliseconds.
pub fn parse_duration_setting(text: &str) -> Result<Setting, String> {
    if CLEARING.contains(&text.trim()) {
        return Ok(Setting(None));
    }
    parse_duration(text).map(|d| Setting(Some(duration_ms(d))))
}

/// Milliseconds of a duration, as the protocol carries them.
pub fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_a_value_or_its_default() {
        assert_eq!(parse_size_setting("1MiB"), Ok(Setting(Some(1 << 20))));
        assert_eq!(parse_size_setting("unlimited"), Ok(Setting(None)));
        assert_eq!(parse_duration_setting("1m"), Ok(Setting(Some(60_000))));
        assert_eq!(parse_duration_setting("default"), Ok(Setting(None)));
        assert!(parse_duration_setting("soon").is_err());
    }

    #[test]
    fn durations_use_human_units() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(duration_ms(Duration::from_secs(600)), 600_000);
    }
}

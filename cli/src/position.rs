//! Where `floe consume` starts: `earliest`, `latest`, an offset, or an RFC 3339 time.

use std::time::UNIX_EPOCH;

use floe_client::{FetchPosition, Offset};

/// Parses `--from`: `earliest`, `latest`, a decimal offset, or an RFC 3339 time such as
/// `2024-05-01T12:00:00Z` (a fraction of a second and a `+hh:mm` offset are allowed; a time
/// without a zone is read as UTC).
pub fn parse_position(text: &str) -> Result<FetchPosition, String> {
    let text = text.trim();
    match text {
        "earliest" => return Ok(FetchPosition::Earliest),
        "latest" => return Ok(FetchPosition::Latest),
        _ => {}
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let offset: u64 = text
            .parse()
            .map_err(|_| format!("offset `{text}` is too large"))?;
        if offset > Offset::MAX.get() {
            return Err(format!("offset `{text}` is too large"));
        }
        return Ok(FetchPosition::Offset(Offset::new(offset)));
    }
    let time = parse_time(text).map_err(|e| {
        format!("`{text}` is not earliest, latest, an offset or an RFC 3339 time: {e}")
    })?;
    Ok(FetchPosition::Timestamp(time))
}

/// Milliseconds since the Unix epoch of an RFC 3339 time.
fn parse_time(text: &str) -> Result<i64, String> {
    let (local, offset_ms) = split_zone(text)?;
    let time = humantime::parse_rfc3339_weak(local).map_err(|e| e.to_string())?;
    let ms = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).map_err(|_| "too far in the future")?,
        Err(before) => -i64::try_from(before.duration().as_millis()).map_err(|_| "too far back")?,
    };
    Ok(ms - offset_ms)
}

/// Splits a trailing `Z` or `±hh:mm` zone from an RFC 3339 time; returns the local part and
/// the zone's offset from UTC in milliseconds.
fn split_zone(text: &str) -> Result<(&str, i64), String> {
    if let Some(local) = text.strip_suffix(['Z', 'z']) {
        return Ok((local, 0));
    }
    let bytes = text.as_bytes();
    if bytes.len() > 6 && bytes[bytes.len() - 3] == b':' {
        let sign = bytes[bytes.len() - 6];
        if sign == b'+' || sign == b'-' {
            let zone = &text[text.len() - 5..];
            let hours: i64 = zone[..2].parse().map_err(|_| "bad zone hours")?;
            let minutes: i64 = zone[3..].parse().map_err(|_| "bad zone minutes")?;
            if hours > 23 || minutes > 59 {
                return Err("zone offset out of range".into());
            }
            let offset = (hours * 60 + minutes) * 60_000;
            let offset = if sign == b'+' { offset } else { -offset };
            return Ok((&text[..text.len() - 6], offset));
        }
    }
    Ok((text, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_offsets() {
        assert_eq!(parse_position("earliest"), Ok(FetchPosition::Earliest));
        assert_eq!(parse_position("latest"), Ok(FetchPosition::Latest));
        assert_eq!(
            parse_position("0"),
            Ok(FetchPosition::Offset(Offset::new(0)))
        );
        assert_eq!(
            parse_position("123456"),
            Ok(FetchPosition::Offset(Offset::new(123_456)))
        );
    }

    #[test]
    fn offsets_beyond_the_largest_are_refused() {
        assert!(parse_position("9223372036854775807").is_ok());
        assert!(parse_position("9223372036854775808").is_err());
        assert!(parse_position("99999999999999999999").is_err());
    }

    #[test]
    fn rfc3339_times_become_milliseconds_since_the_epoch() {
        assert_eq!(
            parse_position("2024-05-01T12:00:00Z"),
            Ok(FetchPosition::Timestamp(1_714_564_800_000))
        );
        assert_eq!(
            parse_position("2024-05-01T12:00:00.250Z"),
            Ok(FetchPosition::Timestamp(1_714_564_800_250))
        );
        assert_eq!(
            parse_position("2024-05-01T14:00:00+02:00"),
            Ok(FetchPosition::Timestamp(1_714_564_800_000))
        );
        assert_eq!(
            parse_position("2024-05-01T07:30:00-04:30"),
            Ok(FetchPosition::Timestamp(1_714_564_800_000))
        );
        assert_eq!(
            parse_position("2024-05-01 12:00:00"),
            Ok(FetchPosition::Timestamp(1_714_564_800_000)),
            "no zone means UTC"
        );
    }

    #[test]
    fn anything_else_is_refused_with_the_choices() {
        for bad in [
            "",
            "first",
            "-1",
            "12abc",
            "2024-13-01T00:00:00Z",
            "2024-05-01T12:00:00+25:00",
        ] {
            let error = parse_position(bad).expect_err(bad);
            assert!(
                error.contains("earliest") || error.contains("zone"),
                "{bad}: {error}"
            );
        }
    }
}

//! Byte sizes as people type them: `64MiB`, `1.5GB`, `4096`. Shared by the broker's and the
//! CLI's flags so that both read sizes the same way.

/// Parses a byte size: a number, optionally with a fraction, and an optional unit. Binary
/// units (`KiB`, `MiB`, `GiB`, `TiB`, and the short `K`, `M`, `G`, `T`) are powers of 1024;
/// decimal units (`kB`/`KB`, `MB`, `GB`, `TB`) powers of 1000; `B` or nothing means bytes.
/// Units are case-insensitive and may follow a space. Fractions round down to whole bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{text}` (try 64MiB)"
            ));
        }
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{text}` is not a size (try 64MiB or 4096)"));
    }
    let whole: u64 = whole
        .parse()
        .map_err(|_| format!("`{text}` is not a size (try 64MiB or 4096)"))?;
    let too_large = || format!("`{text}` is too large");
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    // The fraction, exactly: digits × multiplier / 10^digits, in u128 to avoid overflow.
    let digits = fraction.len().min(18);
    if digits > 0 {
        let numerator: u128 = fraction[..digits].parse().map_err(|_| too_large())?;
        let part = numerator * u128::from(multiplier) / 10u128.pow(digits as u32);
        bytes = bytes
            .checked_add(u64::try_from(part).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("12B"), Ok(12));
    }

    #[test]
    fn binary_units_are_powers_of_1024() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1 TiB"), Ok(1 << 40));
    }

    #[test]
    fn decimal_units_are_powers_of_1000() {
        assert_eq!(parse_size("1kB"), Ok(1_000));
        assert_eq!(parse_size("1KB"), Ok(1_000));
        assert_eq!(parse_size("3MB"), Ok(3_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
    }

    #[test]
    fn fractions_are_exact_and_round_down() {
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("0.5MiB"), Ok(512 * 1024));
        assert_eq!(parse_size("1.0001KiB"), Ok(1024));
        assert_eq!(parse_size("2.5GB"), Ok(2_500_000_000));
    }

    #[test]
    fn nonsense_is_refused_with_a_hint() {
        for bad in ["", "MiB", "12 parsecs", "1.2.3MB", "-5", "1e3", ".5MiB"] {
            let error = parse_size(bad).expect_err(bad);
            assert!(
                error.contains(bad.trim()) || bad.is_empty(),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn overflow_is_refused() {
        assert!(parse_size("18446744073709551615").is_ok());
        assert!(parse_size("18446744073709551616").is_err());
        assert!(parse_size("16777216TiB").is_err());
        assert!(parse_size("16777215.99999TiB").is_ok());
    }
}

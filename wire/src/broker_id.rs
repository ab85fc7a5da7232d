//! The identity of a broker in its cluster.

use std::fmt;

/// A broker's id, assigned by the controlplane and stable across restarts.
///
/// Sent as a little-endian `u32`; a plain number in JSON.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct BrokerId(u32);

impl BrokerId {
    /// A broker id from its raw value.
    pub const fn new(value: u32) -> BrokerId {
        BrokerId(value)
    }

    /// The raw value.
    pub const fn get(self) -> u32 {
        self.0
    }
}

/// The prefix of the URI that names a broker in its peer-port certificate, as a subject
/// alternative name: `floe:broker:<id>`, the id in decimal without leading zeros. Stable:
/// certificates carry it.
pub const CERTIFICATE_URI_PREFIX: &str = "floe:broker:";

impl BrokerId {
    /// The URI naming this broker in its peer-port certificate: `floe:broker:<id>`.
    pub fn certificate_uri(self) -> String {
        format!("{CERTIFICATE_URI_PREFIX}{}", self.0)
    }

    /// The broker a certificate URI names; `None` for any other URI, and for an id written
    /// other than as [`BrokerId::certificate_uri`] writes it.
    pub fn from_certificate_uri(uri: &str) -> Option<BrokerId> {
        BrokerId::from_canonical_decimal(uri.strip_prefix(CERTIFICATE_URI_PREFIX)?)
    }

    /// An id written in decimal as `Display` writes it: no sign, no leading zeros, so that
    /// one broker has exactly one name.
    pub fn from_canonical_decimal(digits: &str) -> Option<BrokerId> {
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !canonical {
            return None;
        }
        digits.parse().ok().map(BrokerId)
    }
}

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_uri_names_one_broker_one_way() {
        let id = BrokerId::new(42);
        assert_eq!(id.certificate_uri(), "floe:broker:42");
        assert_eq!(BrokerId::from_certificate_uri("floe:broker:42"), Some(id));
        assert_eq!(
            BrokerId::from_certificate_uri("floe:broker:0"),
            Some(BrokerId::new(0))
        );
        let max = BrokerId::new(u32::MAX);
        assert_eq!(
            BrokerId::from_certificate_uri(&max.certificate_uri()),
            Some(max)
        );
        for other in [
            "floe:broker:042",
            "floe:broker:+42",
            "floe:broker:",
            "floe:broker:4294967296",
            "floe:broker:42 ",
            "floe:replica:42",
            "https://floe/broker/42",
        ] {
            assert_eq!(BrokerId::from_certificate_uri(other), None, "{other}");
        }
    }
}

//! The name of a stream: validated once where it enters the process, then trusted.
//!
//! Names appear in frames, in the REST API and in object-storage keys, so the alphabet is
//! deliberately small: ASCII letters, digits, `.`, `_` and `-`, which are safe in a path
//! segment and in a URL without escaping. No I/O here.

use std::fmt;
use std::str::FromStr;

/// A validated stream name: 1 to 255 bytes of `[A-Za-z0-9._-]`, and neither `.` nor `..`
/// (both would be ambiguous as a path segment). A JSON string, checked when it is read.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct StreamName(String);

/// Why a string is not a stream name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamNameError {
    #[error("stream name is empty")]
    Empty,
    #[error("stream name is {len} bytes, longer than {}", StreamName::MAX_LEN)]
    TooLong { len: usize },
    #[error("stream name byte {byte:#04x} at {at} is not one of [A-Za-z0-9._-]")]
    InvalidByte { byte: u8, at: usize },
    #[error("stream name `{0}` is reserved")]
    Reserved(&'static str),
}

impl StreamName {
    /// The longest name, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates `name` and wraps it.
    pub fn new(name: impl Into<String>) -> Result<StreamName, StreamNameError> {
        let name = name.into();
        Self::check(name.as_bytes())?;
        Ok(StreamName(name))
    }

    /// Validates raw bytes (as read from a frame) and copies them into a name.
    pub fn from_utf8(bytes: &[u8]) -> Result<StreamName, StreamNameError> {
        Self::check(bytes)?;
        // Every byte was checked to be ASCII, so this conversion cannot lose anything.
        Ok(StreamName(String::from_utf8_lossy(bytes).into_owned()))
    }

    fn check(bytes: &[u8]) -> Result<(), StreamNameError> {
        if bytes.is_empty() {
            return Err(StreamNameError::Empty);
        }
        if bytes.len() > Self::MAX_LEN {
            return Err(StreamNameError::TooLong { len: bytes.len() });
        }
        if let Some((at, &byte)) = bytes
            .iter()
            .enumerate()
            .find(|(_, b)| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
        {
            return Err(StreamNameError::InvalidByte { byte, at });
        }
        match bytes {
            b"." => Err(StreamNameError::Reserved(".")),
            b".." => Err(StreamNameError::Reserved("..")),
            _ => Ok(()),
        }
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Consumes the name, returning its string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for StreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for StreamName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<StreamName> for String {
    fn from(name: StreamName) -> String {
        name.0
    }
}

impl FromStr for StreamName {
    type Err = StreamNameError;

    fn from_str(s: &str) -> Result<StreamName, StreamNameError> {
        StreamName::new(s)
    }
}

impl TryFrom<String> for StreamName {
    type Error = StreamNameError;

    fn try_from(s: String) -> Result<StreamName, StreamNameError> {
        StreamName::new(s)
    }
}

impl TryFrom<&str> for StreamName {
    type Error = StreamNameError;

    fn try_from(s: &str) -> Result<StreamName, StreamNameError> {
        StreamName::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_whole_alphabet_and_the_length_bounds() {
        let alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
        assert_eq!(
            StreamName::new(alphabet).map(|n| n.into_string()),
            Ok(alphabet.to_owned())
        );
        assert!(StreamName::new("a").is_ok());
        assert!(StreamName::new("a".repeat(255)).is_ok());
        assert!(StreamName::new("...").is_ok());
    }

    #[test]
    fn rejects_empty_long_reserved_and_foreign_bytes() {
        assert_eq!(StreamName::new(""), Err(StreamNameError::Empty));
        assert_eq!(
            StreamName::new("a".repeat(256)),
            Err(StreamNameError::TooLong { len: 256 })
        );
        assert_eq!(StreamName::new("."), Err(StreamNameError::Reserved(".")));
        assert_eq!(StreamName::new(".."), Err(StreamNameError::Reserved("..")));
        assert_eq!(
            StreamName::new("orders/eu"),
            Err(StreamNameError::InvalidByte { byte: b'/', at: 6 })
        );
        assert_eq!(
            StreamName::new("caf\u{e9}"),
            Err(StreamNameError::InvalidByte { byte: 0xc3, at: 3 })
        );
        assert_eq!(
            StreamName::from_utf8(b"a b"),
            Err(StreamNameError::InvalidByte { byte: b' ', at: 1 })
        );
        assert_eq!(
            StreamName::from_utf8(b"\xff"),
            Err(StreamNameError::InvalidByte { byte: 0xff, at: 0 })
        );
    }
}

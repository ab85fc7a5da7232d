//! A network address as the cluster advertises it: `host:port`, validated once.
//!
//! Only the syntax is checked here; resolving the host is the business of whoever dials it.
//! No I/O here.

use std::fmt;
use std::str::FromStr;

/// A `host:port` address: a DNS name or IPv4 address of `[A-Za-z0-9._-]`, or an IPv6
/// address in brackets (`[::1]:7400`), then a port from 1 to 65535 in decimal. At most 255
/// bytes. A JSON string, checked when it is read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Endpoint {
    text: String,
    /// Byte position of the `:` before the port.
    colon: usize,
    port: u16,
}

/// Why a string is not an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("endpoint is {len} bytes, longer than {}", Endpoint::MAX_LEN)]
    TooLong { len: usize },
    #[error("endpoint has no `:port`")]
    MissingPort,
    #[error("endpoint port is not a number from 1 to 65535")]
    InvalidPort,
    #[error("endpoint host is empty or holds a byte outside its alphabet")]
    InvalidHost,
}

impl Endpoint {
    /// The longest endpoint, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates `text` as `host:port`.
    pub fn new(text: impl Into<String>) -> Result<Endpoint, EndpointError> {
        let text = text.into();
        let (colon, port) = Self::check(text.as_bytes())?;
        Ok(Endpoint { text, colon, port })
    }

    /// Validates raw bytes (as read from a frame) and copies them into an endpoint.
    pub fn from_utf8(bytes: &[u8]) -> Result<Endpoint, EndpointError> {
        let (colon, port) = Self::check(bytes)?;
        // Every byte was checked to be ASCII, so this conversion cannot lose anything.
        let text = String::from_utf8_lossy(bytes).into_owned();
        Ok(Endpoint { text, colon, port })
    }

    fn check(bytes: &[u8]) -> Result<(usize, u16), EndpointError> {
        if bytes.len() > Self::MAX_LEN {
            return Err(EndpointError::TooLong { len: bytes.len() });
        }
        let colon = bytes
            .iter()
            .rposition(|b| *b == b':')
            .ok_or(EndpointError::MissingPort)?;
        let port = parse_port(&bytes[colon + 1..]).ok_or(EndpointError::InvalidPort)?;
        let host = &bytes[..colon];
        let valid_host = match host {
            [b'[', inner @ .., b']'] => {
                !inner.is_empty()
                    && inner
                        .iter()
                        .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
            }
            _ => {
                !host.is_empty()
                    && host
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            }
        };
        if !valid_host {
            return Err(EndpointError::InvalidHost);
        }
        Ok((colon, port))
    }

    /// The host, brackets included for IPv6.
    pub fn host(&self) -> &str {
        &self.text[..self.colon]
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The whole `host:port` text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn parse_port(digits: &[u8]) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
    u16::try_from(value).ok().filter(|port| *port != 0)
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<Endpoint> for String {
    fn from(endpoint: Endpoint) -> String {
        endpoint.text
    }
}

impl TryFrom<String> for Endpoint {
    type Error = EndpointError;

    fn try_from(text: String) -> Result<Endpoint, EndpointError> {
        Endpoint::new(text)
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Endpoint, EndpointError> {
        Endpoint::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_host_and_port() {
        let endpoint = Endpoint::new("broker-1.floe.internal:7400").expect("valid");
        assert_eq!(endpoint.host(), "broker-1.floe.internal");
        assert_eq!(endpoint.port(), 7400);
        let v6 = Endpoint::new("[fd00::1]:65535").expect("valid");
        assert_eq!(v6.host(), "[fd00::1]");
        assert_eq!(v6.port(), 65535);
        assert_eq!(Endpoint::from_utf8(b"10.0.0.7:1").map(|e| e.port()), Ok(1));
    }

    #[test]
    fn rejects_bad_hosts_and_ports() {
        assert_eq!(Endpoint::new("broker"), Err(EndpointError::MissingPort));
        assert_eq!(Endpoint::new("broker:"), Err(EndpointError::InvalidPort));
        assert_eq!(Endpoint::new("broker:0"), Err(EndpointError::InvalidPort));
        assert_eq!(
            Endpoint::new("broker:65536"),
            Err(EndpointError::InvalidPort)
        );
        assert_eq!(Endpoint::new("broker:+80"), Err(EndpointError::InvalidPort));
        assert_eq!(
            Endpoint::new("broker:123456"),
            Err(EndpointError::InvalidPort)
        );
        assert_eq!(Endpoint::new(":80"), Err(EndpointError::InvalidHost));
        assert_eq!(Endpoint::new("::1:80"), Err(EndpointError::InvalidHost));
        assert_eq!(Endpoint::new("[]:80"), Err(EndpointError::InvalidHost));
        assert_eq!(Endpoint::new("a b:80"), Err(EndpointError::InvalidHost));
        assert_eq!(
            Endpoint::from_utf8(b"\xff:80"),
            Err(EndpointError::InvalidHost)
        );
        let long = format!("{}:80", "a".repeat(253));
        assert_eq!(
            Endpoint::new(long),
            Err(EndpointError::TooLong { len: 256 })
        );
    }
}

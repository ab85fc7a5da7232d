//! When a leader acknowledges a publish: the durability a stream promises its producers.

use std::fmt;
use std::str::FromStr;

/// A stream's acknowledgement mode. The discriminants are sent on the wire and stored in
/// metadata; they are stable and never reused.
///
/// Its name ([`AckMode::as_str`], parsed back by [`FromStr`]) is the lowercase word —
/// `"none"`, `"leader"`, `"quorum"` — in JSON (the REST API), in the controlplane's store and
/// on the command line. The names are stable too: they are persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum AckMode {
    /// The leader acknowledges once it has accepted the batch, before any fsync.
    None = 0,
    /// The leader acknowledges once the batch is fsynced on its own log.
    Leader = 1,
    /// The leader acknowledges once a majority of replicas, itself included, has fsynced the
    /// batch. The default in a cluster.
    Quorum = 2,
}

/// A name that is not an ack mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not an ack mode (none, leader or quorum)")]
pub struct UnknownAckMode {
    /// The name given, cut to its first 64 characters (it may come from outside).
    pub name: String,
}

impl AckMode {
    /// Every mode, in discriminant order.
    pub const ALL: [AckMode; 3] = [AckMode::None, AckMode::Leader, AckMode::Quorum];

    /// The mode with discriminant `value`, if there is one.
    pub fn from_u8(value: u8) -> Option<AckMode> {
        AckMode::ALL.into_iter().find(|mode| *mode as u8 == value)
    }

    /// The stable discriminant.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The stable lowercase name, the same as in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            AckMode::None => "none",
            AckMode::Leader => "leader",
            AckMode::Quorum => "quorum",
        }
    }
}

impl FromStr for AckMode {
    type Err = UnknownAckMode;

    /// The mode named exactly (lowercase) by `name`.
    fn from_str(name: &str) -> Result<AckMode, UnknownAckMode> {
        AckMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == name)
            .ok_or_else(|| UnknownAckMode {
                name: name.chars().take(64).collect(),
            })
    }
}

impl fmt::Display for AckMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_match_the_json_form() {
        for mode in AckMode::ALL {
            assert_eq!(mode.as_str().parse::<AckMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).expect("an ack mode serializes");
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
    }

    #[test]
    fn other_names_are_refused() {
        for name in ["", "Quorum", "all", "leader "] {
            assert_eq!(
                name.parse::<AckMode>(),
                Err(UnknownAckMode {
                    name: name.to_owned()
                })
            );
        }
    }
}

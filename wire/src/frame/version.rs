//! Protocol versions and the negotiation that picks one per connection.
//!
//! The client's `Hello` names the range of versions it speaks; the broker answers with the
//! highest version both sides speak, or refuses. Decoders keep accepting every version from
//! [`ProtocolVersion::OLDEST`] on, so an upgraded broker still serves old clients.

/// A protocol version this build can encode and decode. The discriminant is the byte in the
/// frame header; discriminants are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ProtocolVersion {
    /// The first version: the frame header and messages described in `docs/protocol.md`.
    V1 = 1,
}

impl ProtocolVersion {
    /// Every version this build speaks, oldest first.
    pub const ALL: [ProtocolVersion; 1] = [ProtocolVersion::V1];
    /// The oldest version this build speaks.
    pub const OLDEST: ProtocolVersion = ProtocolVersion::V1;
    /// The newest version this build speaks, and the one it prefers.
    pub const CURRENT: ProtocolVersion = ProtocolVersion::V1;

    /// The version with header byte `value`, if this build speaks it.
    pub fn from_u8(value: u8) -> Option<ProtocolVersion> {
        ProtocolVersion::ALL
            .into_iter()
            .find(|version| *version as u8 == value)
    }

    /// The header byte.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// The client's range of versions and this build's have no version in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no common protocol version: client speaks {client_min}..={client_max}, \
     this build {}..={}",
    ProtocolVersion::OLDEST.as_u8(),
    ProtocolVersion::CURRENT.as_u8()
)]
pub struct NoCommonVersion {
    pub client_min: u8,
    pub client_max: u8,
}

/// Picks the version for a connection: the highest version in both the client's range
/// `client_min..=client_max` and this build's range. A pure function, so the broker and the
/// tests agree on the rule.
pub fn negotiate(client_min: u8, client_max: u8) -> Result<ProtocolVersion, NoCommonVersion> {
    let refuse = NoCommonVersion {
        client_min,
        client_max,
    };
    let highest = client_max.min(ProtocolVersion::CURRENT.as_u8());
    let lowest = client_min.max(ProtocolVersion::OLDEST.as_u8());
    if highest < lowest {
        return Err(refuse);
    }
    // Versions are contiguous today; should a version ever be withdrawn, this still picks the
    // highest one both sides speak.
    (lowest..=highest)
        .rev()
        .find_map(ProtocolVersion::from_u8)
        .ok_or(refuse)
}

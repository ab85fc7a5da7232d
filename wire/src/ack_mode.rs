//! When a leader acknowledges a publish: the durability a stream promises its producers.

/// A stream's acknowledgement mode. The discriminants are sent on the wire and stored in
/// metadata; they are stable and never reused.
///
/// In JSON (the REST API) a mode is its lowercase name: `"none"`, `"leader"`, `"quorum"`.
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
}

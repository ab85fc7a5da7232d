//! `GET /v1/health` and `GET /v1/ready`.

use serde::{Deserialize, Serialize};

/// The process is up and serving HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Always `"ok"`.
    pub status: String,
}

/// Whether this controlplane serves the API: only the leader does. Sent with 200 when
/// `ready`, 503 otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub ready: bool,
    pub role: Role,
}

/// A controlplane's part in leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Holds the leadership: runs the loops and serves the API.
    Leader,
    /// Waits to take over; answers `not_leader` to API calls.
    Standby,
}

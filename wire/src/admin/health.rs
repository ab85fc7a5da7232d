//! `GET /v1/health` and `GET /v1/ready`.

use serde::{Deserialize, Serialize};

/// The process is up and serving HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Always `"ok"`.
    pub status: String,
    /// The controlplane's build (absent from controlplanes older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
}

/// A program's build: its version, and the commit it was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Build {
    pub version: String,
    /// The commit `FLOE_BUILD_COMMIT` named at compile time (`scripts/package.sh` sets it),
    /// else `unknown`.
    pub commit: String,
}

impl Build {
    /// This program's build.
    pub fn current() -> Build {
        Build {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: option_env!("FLOE_BUILD_COMMIT")
                .unwrap_or("unknown")
                .to_owned(),
        }
    }
}

impl std::fmt::Display for Build {
    /// `0.1.0 (commit 1a2b3c4)`, as `--version` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (commit {})", self.version, self.commit)
    }
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

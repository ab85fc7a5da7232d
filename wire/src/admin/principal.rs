//! Principals and their tokens: `/v1/principals` (the `floe token` commands) and the table
//! brokers and read replicas check callers against (`/v1/auth/credentials`).

use serde::{Deserialize, Serialize};

use crate::auth::{Grant, PrincipalKind};

/// `POST /v1/principals`: a new principal and its first token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePrincipalRequest {
    pub name: String,
    /// `user` when absent.
    #[serde(default = "user")]
    pub kind: PrincipalKind,
    /// What the principal may do; may be empty (a principal that can only authenticate).
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// For a `broker`: the one broker id it may act for (register as, heartbeat, …).
    /// Absent: any broker, like the bootstrap principal `brokers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_id: Option<crate::BrokerId>,
}

fn user() -> PrincipalKind {
    PrincipalKind::User
}

/// A token just minted: the only time its secret is shown. The answer to
/// `POST /v1/principals` and `POST /v1/principals/{name}/tokens`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    pub name: String,
    pub token: String,
    pub key_id: String,
}

impl std::fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedToken")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("key_id", &self.key_id)
            .finish()
    }
}

/// One of a principal's tokens, without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub key_id: String,
    /// Milliseconds since the Unix epoch; absent for a token given at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<u64>,
}

/// A principal as `floe token list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalInfo {
    pub name: String,
    pub kind: PrincipalKind,
    pub grants: Vec<Grant>,
    /// The broker id a `broker` is bound to; absent when it may act for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_id: Option<crate::BrokerId>,
    pub tokens: Vec<TokenInfo>,
    /// Given to the controlplane at start (`--admin-token-file` and the like): it cannot be
    /// revoked through the API, only by restarting without it.
    #[serde(default)]
    pub bootstrap: bool,
}

/// `GET /v1/principals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalList {
    pub principals: Vec<PrincipalInfo>,
}

/// The answer to `GET /v1/auth/whoami`: who the caller's token proves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    pub name: String,
    pub kind: PrincipalKind,
    pub grants: Vec<Grant>,
}

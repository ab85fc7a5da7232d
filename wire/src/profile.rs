//! The client profile: how `floe` reaches a broker without flags. `floe-broker dev` writes it;
//! the client reads it. JSON, unknown fields refused.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a client connects and which CA it trusts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientProfile {
    /// QUIC address of a broker, `host:port`.
    pub endpoint: String,
    /// Name the broker's certificate is checked against.
    pub server_name: String,
    /// PEM file of the CA that signed the broker's certificate.
    pub ca_cert: PathBuf,
    /// `host:port` of the broker's `/metrics` endpoint, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Base URL of the controlplane's REST API (`http://host:port`), when there is one:
    /// `floe stream …`, `floe broker list` and `floe cluster status` use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controlplane: Option<String>,
}

/// The profile's default location: `$FLOE_PROFILE`, else `$XDG_CONFIG_HOME/floe/profile.json`,
/// else `$HOME/.config/floe/profile.json`. `env` looks up a variable (pure: the caller reads
/// the environment).
pub fn default_path(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(path) = env("FLOE_PROFILE") {
        return Some(PathBuf::from(path));
    }
    if let Some(config) = env("XDG_CONFIG_HOME") {
        return Some(PathBuf::from(config).join("floe").join("profile.json"));
    }
    env("HOME").map(|home| {
        PathBuf::from(home)
            .join(".config")
            .join("floe")
            .join("profile.json")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_path_prefers_the_explicit_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(
            default_path(env(&[("FLOE_PROFILE", "/p.json"), ("HOME", "/h")])),
            Some("/p.json".into())
        );
        assert_eq!(
            default_path(env(&[("XDG_CONFIG_HOME", "/c"), ("HOME", "/h")])),
            Some("/c/floe/profile.json".into())
        );
        assert_eq!(
            default_path(env(&[("HOME", "/h")])),
            Some("/h/.config/floe/profile.json".into())
        );
        assert_eq!(default_path(env(&[])), None);
    }
}

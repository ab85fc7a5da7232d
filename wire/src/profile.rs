//! The client profile: how `floe` reaches a cluster without flags. `floe-broker dev` writes
//! one; `floe profile create` writes others; the client reads them. JSON, unknown fields
//! refused.
//!
//! Profiles have names. A named profile lives in `profiles/NAME.json` under Floe's
//! configuration directory (`$XDG_CONFIG_HOME/floe`, else `$HOME/.config/floe`), and the file
//! `current-profile` there names the one used when nothing else is said. Wherever a profile
//! is asked for (`--profile`, `$FLOE_PROFILE`) a value is a path when it holds a `/` or ends
//! in `.json`, and a name otherwise.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

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
    /// The token the client proves its principal with, on the brokers' client port and the
    /// controlplane's API. A profile holding one is written readable by its owner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<crate::auth::Secret>,
    /// A client certificate and its key (PEM files) to present to brokers and read replicas
    /// that take `--client-ca`: mutual TLS instead of a token. Both or neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
}

/// The name of the profile `floe-broker dev` writes.
pub const DEV_PROFILE: &str = "dev";

/// A profile asked for by name or by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileRef {
    Named(String),
    Path(PathBuf),
}

impl ProfileRef {
    /// A path when `value` holds a `/` or ends in `.json`, else a name.
    pub fn parse(value: &OsStr) -> ProfileRef {
        let text = value.to_string_lossy();
        if text.contains(std::path::MAIN_SEPARATOR) || text.contains('/') || text.ends_with(".json")
        {
            ProfileRef::Path(PathBuf::from(value))
        } else {
            ProfileRef::Named(text.into_owned())
        }
    }
}

/// Why a string cannot name a profile.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a profile name: 1 to 64 letters, digits, `-`, `_` or `.`, \
             starting with a letter or digit (a path needs a `/` or the `.json` ending)"
        ))
    }
}

/// Floe's configuration directory and the profile files in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDir {
    root: PathBuf,
}

impl ProfileDir {
    /// `$XDG_CONFIG_HOME/floe`, else `$HOME/.config/floe`. `env` looks up a variable (pure:
    /// the caller reads the environment). An empty variable counts as unset, as the XDG
    /// base-directory specification says (an empty one would otherwise name the working
    /// directory).
    pub fn from_env(env: impl Fn(&str) -> Option<OsString>) -> Option<ProfileDir> {
        let set = |name: &str| env(name).filter(|value| !value.is_empty());
        let root = match set("XDG_CONFIG_HOME") {
            Some(config) => PathBuf::from(config).join("floe"),
            None => PathBuf::from(set("HOME")?).join(".config").join("floe"),
        };
        Some(ProfileDir { root })
    }

    pub fn at(root: impl Into<PathBuf>) -> ProfileDir {
        ProfileDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of named profiles.
    pub fn profiles(&self) -> PathBuf {
        self.root.join("profiles")
    }

    /// The file of the profile `name`.
    pub fn named(&self, name: &str) -> PathBuf {
        self.profiles().join(format!("{name}.json"))
    }

    /// The file naming the current profile.
    pub fn current_file(&self) -> PathBuf {
        self.root.join("current-profile")
    }

    /// The single profile file of Floe before profiles had names; still read when no
    /// profile is current.
    pub fn unnamed(&self) -> PathBuf {
        self.root.join("profile.json")
    }

    /// The file of `reference`.
    pub fn path_of(&self, reference: &ProfileRef) -> PathBuf {
        match reference {
            ProfileRef::Named(name) => self.named(name),
            ProfileRef::Path(path) => path.clone(),
        }
    }
}

/// The profile's default location when no variable names one: `$FLOE_PROFILE` (a name or a
/// path), else the `dev` profile's file. Used by whoever writes the `dev` profile.
pub fn default_path(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let dir = ProfileDir::from_env(&env);
    match env("FLOE_PROFILE").map(|v| ProfileRef::parse(&v)) {
        Some(ProfileRef::Path(path)) => Some(path),
        Some(named) => dir.map(|d| d.path_of(&named)),
        None => dir.map(|d| d.named(DEV_PROFILE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_profile_path_prefers_the_explicit_variable() {
        assert_eq!(
            default_path(env(&[("FLOE_PROFILE", "/p.json"), ("HOME", "/h")])),
            Some("/p.json".into())
        );
        assert_eq!(
            default_path(env(&[("FLOE_PROFILE", "prod"), ("HOME", "/h")])),
            Some("/h/.config/floe/profiles/prod.json".into())
        );
        assert_eq!(
            default_path(env(&[("XDG_CONFIG_HOME", "/c"), ("HOME", "/h")])),
            Some("/c/floe/profiles/dev.json".into())
        );
        assert_eq!(
            default_path(env(&[("HOME", "/h")])),
            Some("/h/.config/floe/profiles/dev.json".into())
        );
        assert_eq!(default_path(env(&[])), None);
        // Empty counts as unset.
        assert_eq!(
            default_path(env(&[("XDG_CONFIG_HOME", ""), ("HOME", "/h")])),
            Some("/h/.config/floe/profiles/dev.json".into())
        );
        assert_eq!(default_path(env(&[("HOME", "")])), None);
    }

    #[test]
    fn names_and_paths_are_told_apart() {
        let parse = |s: &str| ProfileRef::parse(OsStr::new(s));
        assert_eq!(parse("prod"), ProfileRef::Named("prod".into()));
        assert_eq!(parse("eu-west.1"), ProfileRef::Named("eu-west.1".into()));
        assert_eq!(
            parse("profile.json"),
            ProfileRef::Path("profile.json".into())
        );
        assert_eq!(parse("./prod"), ProfileRef::Path("./prod".into()));
        assert_eq!(parse("/etc/floe/p"), ProfileRef::Path("/etc/floe/p".into()));
        assert!(check_name("prod").is_ok());
        assert!(check_name("team_a-1.eu").is_ok());
        for bad in ["", "-x", ".hidden", "a b", "é", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}

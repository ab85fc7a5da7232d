//! Who may do what: principals, their grants, and the tokens that prove who a caller is.
//!
//! The controlplane keeps the principals; it hands brokers and read replicas the
//! [`CredentialTable`] (names, grants and the hashes of their tokens, never a token) so that
//! every port checks a caller the same way, with [`Credentials::authenticate`] and
//! [`Principal::may`]. Pure: no I/O, no clock and no randomness — whoever mints a token
//! brings the random bytes.
//!
//! A token is `floe_<key id>_<secret>`: 8 random bytes of key id and 32 of secret, in
//! lowercase hex. The key id finds the stored hash without comparing secrets; the hash
//! (SHA-256 of the whole token) is compared in constant time. The tokens an operator gives
//! the controlplane at start (`--admin-token-file` and the like) may have any form: they are
//! found by comparing their hash with each of those few.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::StreamName;

/// What a grant allows on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Append records.
    Publish,
    /// Read records, and commit a consumer group's offsets in the stream.
    Consume,
    /// Create, alter and delete the stream.
    Admin,
    /// See that the stream exists, its settings and its partitions. Every other action on a
    /// stream implies it.
    Describe,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Publish,
        Action::Consume,
        Action::Admin,
        Action::Describe,
    ];

    /// The lowercase name used in grants, JSON and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Consume => "consume",
            Action::Admin => "admin",
            Action::Describe => "describe",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The streams a grant covers: one name, or every name starting with a prefix (`orders-*`;
/// `*` alone is every stream).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamPattern {
    Exact(StreamName),
    Prefix(String),
}

impl StreamPattern {
    pub fn matches(&self, stream: &StreamName) -> bool {
        match self {
            StreamPattern::Exact(name) => name == stream,
            StreamPattern::Prefix(prefix) => stream.as_str().starts_with(prefix.as_str()),
        }
    }
}

impl fmt::Display for StreamPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamPattern::Exact(name) => f.write_str(name.as_str()),
            StreamPattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// A permission a principal holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grant {
    /// `ACTION:STREAM` or `ACTION:PREFIX*`.
    Stream {
        action: Action,
        streams: StreamPattern,
    },
    /// `cluster-admin`: everything, including brokers, read replicas, the scaling policy and
    /// the principals themselves.
    ClusterAdmin,
}

/// Why a string is not a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{given}` is not a grant: {reason} (grants are ACTION:STREAM or ACTION:PREFIX* with ACTION one of publish, consume, admin, describe; or cluster-admin)"
)]
pub struct GrantError {
    /// The text given, cut to its first 64 characters (it may come from outside).
    pub given: String,
    pub reason: String,
}

impl FromStr for Grant {
    type Err = GrantError;

    fn from_str(text: &str) -> Result<Grant, GrantError> {
        let fail = |reason: String| GrantError {
            given: text.chars().take(64).collect(),
            reason,
        };
        if text == "cluster-admin" {
            return Ok(Grant::ClusterAdmin);
        }
        let (action, streams) = text
            .split_once(':')
            .ok_or_else(|| fail("no `:` between the action and the stream".into()))?;
        let action = Action::ALL
            .into_iter()
            .find(|a| a.as_str() == action)
            .ok_or_else(|| fail(format!("`{action}` is not an action")))?;
        let streams = match streams.strip_suffix('*') {
            Some(prefix) => {
                // The prefix must be the start of some valid name.
                if !prefix.is_empty() {
                    StreamName::new(prefix).map_err(|e| fail(e.to_string()))?;
                }
                StreamPattern::Prefix(prefix.to_owned())
            }
            None => {
                StreamPattern::Exact(StreamName::new(streams).map_err(|e| fail(e.to_string()))?)
            }
        };
        Ok(Grant::Stream { action, streams })
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Stream { action, streams } => write!(f, "{action}:{streams}"),
            Grant::ClusterAdmin => f.write_str("cluster-admin"),
        }
    }
}

impl serde::Serialize for Grant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Grant {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Grant, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What a principal is. Brokers and read replicas act for the cluster; they hold only what
/// their role needs, implied by their kind rather than granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrincipalKind {
    /// A person or an application: exactly its grants.
    User,
    /// A broker: registers, renews its lease, reads its assignments and reports elections
    /// on the controlplane; may describe and consume every stream.
    Broker,
    /// A read replica: registers and renews its lease; may describe and consume every stream
    /// (it follows the brokers' tails).
    ReadReplica,
}

impl PrincipalKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::User => "user",
            PrincipalKind::Broker => "broker",
            PrincipalKind::ReadReplica => "read-replica",
        }
    }
}

impl FromStr for PrincipalKind {
    type Err = String;

    fn from_str(text: &str) -> Result<PrincipalKind, String> {
        [
            PrincipalKind::User,
            PrincipalKind::Broker,
            PrincipalKind::ReadReplica,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
        .ok_or_else(|| format!("`{text}` is not a principal kind (user, broker, read-replica)"))
    }
}

impl fmt::Display for PrincipalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a caller is, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Principal {
    pub name: String,
    pub kind: PrincipalKind,
    pub grants: Vec<Grant>,
    /// A principal of kind `broker` bound to one broker id acts for that broker only
    /// ([`Principal::may_act_for`]); `None` for every other kind, and for the shared
    /// bootstrap principal `brokers`, which may act for any broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_id: Option<crate::BrokerId>,
}

impl Principal {
    /// Whether this principal may act for broker `id` (register as it, heartbeat, read its
    /// assignments, report its elections, ask for its peer certificate): a `cluster-admin`
    /// and an unbound `broker` may act for any, a bound `broker` for its own id only.
    pub fn may_act_for(&self, id: crate::BrokerId) -> bool {
        if self.is_cluster_admin() {
            return true;
        }
        self.kind == PrincipalKind::Broker && self.broker_id.is_none_or(|bound| bound == id)
    }

    /// Whether this principal may take `action` on `stream`.
    pub fn may(&self, action: Action, stream: &StreamName) -> bool {
        if self.is_cluster_admin() {
            return true;
        }
        if self.kind != PrincipalKind::User && matches!(action, Action::Consume | Action::Describe)
        {
            return true;
        }
        self.grants.iter().any(|grant| match grant {
            Grant::Stream {
                action: granted,
                streams,
            } => (*granted == action || action == Action::Describe) && streams.matches(stream),
            Grant::ClusterAdmin => true,
        })
    }

    /// Whether this principal holds `cluster-admin`.
    pub fn is_cluster_admin(&self) -> bool {
        self.grants.contains(&Grant::ClusterAdmin)
    }
}

/// Checks a principal name: 1 to 64 bytes of `[A-Za-z0-9._-]`, starting with a letter or a
/// digit.
pub fn check_principal_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "a principal name is 1 to 64 characters, not {}",
            name.len()
        ));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err("a principal name starts with a letter or a digit".into());
    }
    match name
        .bytes()
        .find(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
    {
        Some(byte) => Err(format!(
            "a principal name has only letters, digits, `.`, `_` and `-`, not {:?}",
            char::from(byte)
        )),
        None => Ok(()),
    }
}

/// The SHA-256 of a token: what is stored instead of it. A JSON string of 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretHash([u8; 32]);

impl SecretHash {
    /// The hash of a presented or minted token.
    pub fn of(token: &[u8]) -> SecretHash {
        SecretHash(Sha256::digest(token).into())
    }

    /// Compares two hashes in time independent of where they differ.
    pub fn matches(&self, other: &SecretHash) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    pub fn from_hex(text: &str) -> Option<SecretHash> {
        let bytes = unhex(text)?;
        Some(SecretHash(bytes.try_into().ok()?))
    }
}

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretHash({}…)", &self.to_hex()[..8])
    }
}

impl serde::Serialize for SecretHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for SecretHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SecretHash, D::Error> {
        let text = String::deserialize(deserializer)?;
        SecretHash::from_hex(&text)
            .ok_or_else(|| serde::de::Error::custom("a secret hash is 64 hex digits"))
    }
}

/// A secret held in memory (a token, a password in a URL): its `Debug` never shows it, and
/// it is a JSON string where a file holds it.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret itself, to send.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A freshly minted token: the secret shown once, and what is stored of it.
pub struct MintedToken {
    pub token: String,
    pub key: Credential,
}

impl fmt::Debug for MintedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedToken")
            .field("token", &"<redacted>")
            .field("key", &self.key)
            .finish()
    }
}

/// The prefix every minted token starts with.
pub const TOKEN_PREFIX: &str = "floe_";

/// Mints a token from 40 random bytes (8 of key id, 32 of secret) the caller drew from the
/// operating system.
pub fn mint_token(random: [u8; 40]) -> MintedToken {
    let key_id = hex(&random[..8]);
    let token = format!("{TOKEN_PREFIX}{key_id}_{}", hex(&random[8..]));
    let hash = SecretHash::of(token.as_bytes());
    MintedToken {
        token,
        key: Credential { key_id, hash },
    }
}

/// The key id of a minted token, when `token` has that form.
fn key_id_of(token: &[u8]) -> Option<&str> {
    let rest = std::str::from_utf8(token)
        .ok()?
        .strip_prefix(TOKEN_PREFIX)?;
    let (key_id, secret) = rest.split_once('_')?;
    (key_id.len() == 16 && secret.len() == 64).then_some(key_id)
}

/// One token of a principal, as stored: its key id and its hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credential {
    /// 16 hex digits for a minted token; `bootstrap-…` for a token given at start.
    pub key_id: String,
    pub hash: SecretHash,
}

impl Credential {
    /// The stored form of a token given to the controlplane at start, under `key_id`.
    pub fn bootstrap(key_id: impl Into<String>, token: &str) -> Credential {
        Credential {
            key_id: key_id.into(),
            hash: SecretHash::of(token.trim().as_bytes()),
        }
    }

    fn is_bootstrap(&self) -> bool {
        self.key_id.starts_with(BOOTSTRAP_KEY_PREFIX)
    }
}

/// The key-id prefix of tokens given at start rather than minted.
pub const BOOTSTRAP_KEY_PREFIX: &str = "bootstrap-";

/// A principal with the hashes of its tokens.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrincipalCredentials {
    pub principal: Principal,
    pub keys: Vec<Credential>,
}

/// Every principal and token hash at one version of the controlplane's principals: what
/// brokers and read replicas check callers against. `GET /v1/auth/credentials`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CredentialTable {
    /// Increases with every change of principals, grants or tokens.
    pub version: u64,
    pub principals: Vec<PrincipalCredentials>,
}

/// Why a caller is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "no token: this cluster requires one (`--token`, `FLOE_TOKEN` or the profile's `token`)"
    )]
    Missing,
    #[error("the token is unknown or was revoked")]
    Unknown,
    /// A client certificate named a principal the cluster does not have, or one that may
    /// not sign in by certificate (only principals of kind `user` may).
    #[error("the client certificate names `{0}`, which is no user principal of this cluster")]
    UnknownCertificateName(String),
}

/// A [`CredentialTable`] indexed for checking callers.
#[derive(Debug, Default)]
pub struct Credentials {
    version: u64,
    by_key: HashMap<String, (SecretHash, Arc<Principal>)>,
    bootstrap: Vec<(SecretHash, Arc<Principal>)>,
    /// Principals of kind `user` by name: who a verified client certificate may be.
    users: HashMap<String, Arc<Principal>>,
}

impl Credentials {
    pub fn new(table: CredentialTable) -> Credentials {
        let mut credentials = Credentials {
            version: table.version,
            ..Credentials::default()
        };
        for entry in table.principals {
            let principal = Arc::new(entry.principal);
            if principal.kind == PrincipalKind::User {
                credentials
                    .users
                    .insert(principal.name.clone(), principal.clone());
            }
            for key in entry.keys {
                if key.is_bootstrap() {
                    credentials.bootstrap.push((key.hash, principal.clone()));
                } else {
                    credentials
                        .by_key
                        .insert(key.key_id, (key.hash, principal.clone()));
                }
            }
        }
        credentials
    }

    /// The version of the table this was built from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The principal `token` proves, if any.
    pub fn authenticate(&self, token: Option<&[u8]>) -> Result<Arc<Principal>, AuthError> {
        let token = token.ok_or(AuthError::Missing)?;
        let presented = SecretHash::of(token);
        if let Some(key_id) = key_id_of(token) {
            if let Some((hash, principal)) = self.by_key.get(key_id)
                && hash.matches(&presented)
            {
                return Ok(principal.clone());
            }
            return Err(AuthError::Unknown);
        }
        // Every bootstrap hash is compared, so the time taken does not say which matched.
        let mut found = None;
        for (hash, principal) in &self.bootstrap {
            if hash.matches(&presented) {
                found = Some(principal.clone());
            }
        }
        found.ok_or(AuthError::Unknown)
    }

    /// The principal a client certificate names (`name`, its subject's common name), once
    /// the server's TLS has verified the certificate against the client CA. Only principals
    /// of kind `user` sign in this way: a certificate cannot make its holder a broker.
    pub fn authenticate_certificate(&self, name: &str) -> Result<Arc<Principal>, AuthError> {
        self.users
            .get(name)
            .cloned()
            .ok_or_else(|| AuthError::UnknownCertificateName(name.to_owned()))
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> StreamName {
        StreamName::new(text).expect("as set up")
    }

    fn user(grants: &[&str]) -> Principal {
        Principal {
            name: "u".into(),
            kind: PrincipalKind::User,
            grants: grants
                .iter()
                .map(|g| g.parse().expect("as set up"))
                .collect(),
            broker_id: None,
        }
    }

    #[test]
    fn grants_parse_and_print_back() {
        for text in [
            "publish:orders",
            "consume:orders-*",
            "admin:*",
            "describe:a.b",
            "cluster-admin",
        ] {
            assert_eq!(text.parse::<Grant>().expect("as set up").to_string(), text);
        }
        for bad in [
            "publish",
            "write:orders",
            "publish:",
            "publish:bad/name",
            "publish:a/*",
            "Cluster-Admin",
        ] {
            assert!(bad.parse::<Grant>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_grant_allows_its_action_and_describe_on_matching_streams_only() {
        let p = user(&["publish:orders", "consume:logs-*"]);
        assert!(p.may(Action::Publish, &name("orders")));
        assert!(p.may(Action::Describe, &name("orders")));
        assert!(!p.may(Action::Consume, &name("orders")));
        assert!(!p.may(Action::Publish, &name("orders2")));
        assert!(p.may(Action::Consume, &name("logs-a")));
        assert!(!p.may(Action::Consume, &name("log")));
        assert!(!p.may(Action::Admin, &name("logs-a")));
        assert!(user(&["cluster-admin"]).may(Action::Admin, &name("x")));
        assert!(user(&["admin:*"]).may(Action::Admin, &name("x")));
        assert!(!user(&[]).may(Action::Describe, &name("x")));
    }

    #[test]
    fn brokers_and_replicas_read_everything_and_write_nothing() {
        for kind in [PrincipalKind::Broker, PrincipalKind::ReadReplica] {
            let p = Principal {
                name: "b".into(),
                kind,
                grants: vec![],
                broker_id: None,
            };
            assert!(p.may(Action::Consume, &name("x")));
            assert!(p.may(Action::Describe, &name("x")));
            assert!(!p.may(Action::Publish, &name("x")));
            assert!(!p.may(Action::Admin, &name("x")));
        }
    }

    #[test]
    fn a_bound_broker_acts_for_its_own_id_only() {
        let broker = |bound: Option<u32>| Principal {
            name: "b".into(),
            kind: PrincipalKind::Broker,
            grants: vec![],
            broker_id: bound.map(crate::BrokerId::new),
        };
        let (one, two) = (crate::BrokerId::new(1), crate::BrokerId::new(2));
        assert!(broker(Some(1)).may_act_for(one));
        assert!(!broker(Some(1)).may_act_for(two));
        assert!(
            broker(None).may_act_for(two),
            "the shared bootstrap principal"
        );
        assert!(user(&["cluster-admin"]).may_act_for(two));
        assert!(!user(&["admin:*"]).may_act_for(one));
        let replica = Principal {
            kind: PrincipalKind::ReadReplica,
            ..broker(None)
        };
        assert!(!replica.may_act_for(one));
    }

    fn table(minted: &MintedToken) -> Credentials {
        Credentials::new(CredentialTable {
            version: 3,
            principals: vec![
                PrincipalCredentials {
                    principal: user(&["publish:orders"]),
                    keys: vec![minted.key.clone()],
                },
                PrincipalCredentials {
                    principal: Principal {
                        name: "admin".into(),
                        kind: PrincipalKind::User,
                        grants: vec![Grant::ClusterAdmin],
                        broker_id: None,
                    },
                    keys: vec![Credential::bootstrap("bootstrap-admin", "s3cret\n")],
                },
            ],
        })
    }

    #[test]
    fn minted_and_bootstrap_tokens_authenticate_and_others_do_not() {
        let minted = mint_token([7; 40]);
        assert!(minted.token.starts_with("floe_0707070707070707_"));
        let credentials = table(&minted);
        assert_eq!(credentials.version(), 3);
        let found = credentials
            .authenticate(Some(minted.token.as_bytes()))
            .expect("as set up");
        assert_eq!(found.name, "u");
        let admin = credentials
            .authenticate(Some(b"s3cret"))
            .expect("as set up");
        assert!(admin.is_cluster_admin());
        assert_eq!(credentials.authenticate(None), Err(AuthError::Missing));
        assert_eq!(
            credentials.authenticate(Some(b"s3cre")),
            Err(AuthError::Unknown)
        );
        // The right key id with another secret.
        let mut forged = minted.token.clone();
        forged.pop();
        forged.push('x');
        assert_eq!(
            credentials.authenticate(Some(forged.as_bytes())),
            Err(AuthError::Unknown)
        );
        let other = mint_token([8; 40]);
        assert_eq!(
            credentials.authenticate(Some(other.token.as_bytes())),
            Err(AuthError::Unknown)
        );
    }

    #[test]
    fn a_certificate_name_signs_in_only_a_user_principal() {
        let minted = mint_token([7; 40]);
        let mut with_broker = table(&minted);
        let brokers = Credentials::new(CredentialTable {
            version: 1,
            principals: vec![PrincipalCredentials {
                principal: Principal {
                    name: "brokers".into(),
                    kind: PrincipalKind::Broker,
                    grants: Vec::new(),
                    broker_id: None,
                },
                keys: Vec::new(),
            }],
        });
        assert_eq!(
            with_broker
                .authenticate_certificate("u")
                .expect("a user")
                .name,
            "u"
        );
        assert!(
            with_broker
                .authenticate_certificate("admin")
                .expect("a user")
                .is_cluster_admin()
        );
        assert_eq!(
            with_broker.authenticate_certificate("nobody"),
            Err(AuthError::UnknownCertificateName("nobody".into()))
        );
        assert_eq!(
            brokers.authenticate_certificate("brokers"),
            Err(AuthError::UnknownCertificateName("brokers".into()))
        );
        with_broker = Credentials::default();
        assert!(with_broker.authenticate_certificate("u").is_err());
    }

    #[test]
    fn the_table_round_trips_through_json_and_hides_nothing_secret() {
        let minted = mint_token([1; 40]);
        let table = CredentialTable {
            version: 1,
            principals: vec![PrincipalCredentials {
                principal: user(&["admin:x*"]),
                keys: vec![minted.key.clone()],
            }],
        };
        let json = serde_json::to_string(&table).expect("as set up");
        assert!(!json.contains(&minted.token[22..]), "{json}");
        assert_eq!(
            serde_json::from_str::<CredentialTable>(&json).expect("as set up"),
            table
        );
        assert!(!format!("{minted:?}").contains(&minted.token[22..]));
    }

    #[test]
    fn principal_names_are_checked() {
        assert!(check_principal_name("ci-bot.prod_1").is_ok());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_principal_name(bad).is_err(), "{bad}");
        }
    }
}

//! Who is calling: the tokens given at start, the principals in the store, and the table of
//! both that every REST call is checked against (and that brokers and read replicas fetch).
//!
//! The table is cached and compared with the store's principals version at most once a
//! second, and at once after this controlplane changed it: a revoked token stops working on
//! the controlplane within a second, and on brokers and read replicas within their polling
//! interval (see `docs/security.md`).

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use floe_wire::auth::{
    AuthError, Credential, CredentialTable, Credentials, Grant, Principal, PrincipalCredentials,
    PrincipalKind,
};
use tokio::sync::Mutex;

use crate::store::{PrincipalStore, StoreError, StoredPrincipal};

/// A secret from `file` (its content, trimmed), else from the environment `variable`'s
/// `value`; `None` when neither is given. `name` names the variable in errors.
pub fn read_secret(
    file: Option<&Path>,
    value: Option<String>,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let secret = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the secret file {}", path.display()))?,
        None => match value {
            Some(value) => value,
            None => return Ok(None),
        },
    };
    let secret = secret.trim().to_owned();
    if secret.is_empty() {
        anyhow::bail!(
            "{} is empty",
            file.map_or_else(|| name.to_owned(), |p| p.display().to_string())
        );
    }
    Ok(Some(secret))
}

/// Logs a warning now and every minute after: `what` serves without authentication.
pub async fn warn_insecure(what: &'static str) {
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        every.tick().await;
        tracing::warn!(
            "{what} runs WITHOUT AUTHENTICATION (--insecure-no-auth): anyone who reaches it \
             may read, write and delete every stream"
        );
    }
}

/// How stale the cached table may be before a call checks the store's version again.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// The tokens given to the controlplane at start: the first administrator, and the shared
/// tokens brokers and read replicas register with. Their principals are `admin`, `brokers`
/// and `read-replicas`; they live only in the configuration, never in the store.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapTokens {
    /// `cluster-admin`.
    pub admin: String,
    /// Of kind `broker`.
    pub broker: Option<String>,
    /// Of kind `read-replica`.
    pub read_replica: Option<String>,
}

impl fmt::Debug for BootstrapTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapTokens")
            .field("admin", &"<redacted>")
            .field("broker", &self.broker.as_ref().map(|_| "<redacted>"))
            .field(
                "read_replica",
                &self.read_replica.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The names of the bootstrap principals: no stored principal may take them.
pub(crate) const BOOTSTRAP_NAMES: [&str; 3] = ["admin", "brokers", "read-replicas"];

impl BootstrapTokens {
    /// The bootstrap principals alone, as a table (a broker without a controlplane checks
    /// its clients against its admin token this way).
    pub fn credential_table(&self) -> CredentialTable {
        credential_table(&self.principals(), 0, Vec::new())
    }

    fn principals(&self) -> Vec<PrincipalCredentials> {
        let entry = |name: &str, kind, grants, token: &str| PrincipalCredentials {
            principal: Principal {
                name: name.to_owned(),
                kind,
                grants,
                // `brokers` is shared by every broker: the bootstrap credential, bound to
                // none (docs/security.md).
                broker_id: None,
            },
            keys: vec![Credential::bootstrap(format!("bootstrap-{name}"), token)],
        };
        let mut principals = vec![entry(
            BOOTSTRAP_NAMES[0],
            PrincipalKind::User,
            vec![Grant::ClusterAdmin],
            &self.admin,
        )];
        if let Some(token) = &self.broker {
            principals.push(entry(
                BOOTSTRAP_NAMES[1],
                PrincipalKind::Broker,
                vec![],
                token,
            ));
        }
        if let Some(token) = &self.read_replica {
            principals.push(entry(
                BOOTSTRAP_NAMES[2],
                PrincipalKind::ReadReplica,
                vec![],
                token,
            ));
        }
        principals
    }
}

/// The principals a controlplane with authentication knows, cached.
#[derive(Debug)]
pub(crate) struct Auth {
    bootstrap: Vec<PrincipalCredentials>,
    cache: Mutex<Cached>,
}

#[derive(Debug)]
struct Cached {
    checked: Option<Instant>,
    table: Arc<CredentialTable>,
    credentials: Arc<Credentials>,
}

impl Auth {
    pub(crate) fn new(tokens: &BootstrapTokens) -> Auth {
        let bootstrap = tokens.principals();
        let table = CredentialTable {
            version: 0,
            principals: bootstrap.clone(),
        };
        Auth {
            bootstrap,
            cache: Mutex::new(Cached {
                checked: None,
                credentials: Arc::new(Credentials::new(table.clone())),
                table: Arc::new(table),
            }),
        }
    }

    /// The bootstrap principals, as `floe token list` shows them.
    pub(crate) fn bootstrap(&self) -> &[PrincipalCredentials] {
        &self.bootstrap
    }

    /// The principal `token` proves.
    pub(crate) async fn authenticate<S: PrincipalStore>(
        &self,
        store: &S,
        token: Option<&[u8]>,
    ) -> Result<Result<Arc<Principal>, AuthError>, StoreError> {
        let (_, credentials) = self.current(store).await?;
        Ok(credentials.authenticate(token))
    }

    /// The whole table, bootstrap principals included, at its current version.
    pub(crate) async fn table<S: PrincipalStore>(
        &self,
        store: &S,
    ) -> Result<Arc<CredentialTable>, StoreError> {
        Ok(self.current(store).await?.0)
    }

    /// Forgets the cache: the next call reads the store (after this controlplane wrote it).
    pub(crate) async fn invalidate(&self) {
        self.cache.lock().await.checked = None;
    }

    async fn current<S: PrincipalStore>(
        &self,
        store: &S,
    ) -> Result<(Arc<CredentialTable>, Arc<Credentials>), StoreError> {
        let mut cache = self.cache.lock().await;
        let fresh = cache
            .checked
            .is_some_and(|checked| checked.elapsed() < RECHECK_AFTER);
        if !fresh {
            let version = store.principals_version().await?;
            if cache.checked.is_none() || version != cache.table.version {
                let (version, stored) = store.principals().await?;
                let table = self.table_of(version, stored);
                cache.credentials = Arc::new(Credentials::new(table.clone()));
                cache.table = Arc::new(table);
            }
            cache.checked = Some(Instant::now());
        }
        Ok((cache.table.clone(), cache.credentials.clone()))
    }

    fn table_of(&self, version: u64, stored: Vec<StoredPrincipal>) -> CredentialTable {
        credential_table(&self.bootstrap, version, stored)
    }
}

/// The bootstrap principals and the stored ones, as one table at `version`.
pub(crate) fn credential_table(
    bootstrap: &[PrincipalCredentials],
    version: u64,
    stored: Vec<StoredPrincipal>,
) -> CredentialTable {
    let mut principals = bootstrap.to_vec();
    principals.extend(stored.into_iter().map(|entry| PrincipalCredentials {
        principal: entry.principal,
        keys: entry.tokens.into_iter().map(|token| token.key).collect(),
    }));
    CredentialTable {
        version,
        principals,
    }
}

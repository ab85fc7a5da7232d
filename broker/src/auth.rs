//! Who may use the client port: the credentials a broker or read replica checks callers
//! against, kept fresh from the controlplane, and the check of each request.
//!
//! A connection proves its principal once, in `Hello`; every later request is checked
//! against the principal as the current table has it, so a revoked token stops working on
//! open connections too, as soon as the table that no longer holds it arrives (within
//! [`REFRESH_EVERY`] of the revocation, plus one controlplane call).

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use floe_client::rest::Controlplane;
use floe_wire::StreamName;
use floe_wire::auth::{Action, AuthError, CredentialTable, Credentials, Principal};
use floe_wire::frame::{AuthToken, Message};
use tokio::sync::{Notify, watch};

/// How a broker or read replica checks the callers on its client port.
#[derive(Clone, PartialEq, Eq)]
pub enum ClientAuth {
    /// Not at all (`--insecure-no-auth`): anyone who reaches the port may do anything.
    Insecure,
    /// Against the principals the controlplane keeps (fetched with this server's own
    /// controlplane token).
    Controlplane,
    /// A broker without a controlplane: this one token, as a `cluster-admin` principal
    /// named `admin`.
    AdminToken(String),
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientAuth::Insecure => f.write_str("Insecure"),
            ClientAuth::Controlplane => f.write_str("Controlplane"),
            ClientAuth::AdminToken(_) => f.write_str("AdminToken(<redacted>)"),
        }
    }
}

impl Access {
    /// The access `auth` describes; a checked one starts empty until [`refresh`] fills it
    /// when the principals are the controlplane's.
    pub(crate) fn new(auth: &ClientAuth) -> Access {
        match auth {
            ClientAuth::Insecure => Access::Open,
            ClientAuth::Controlplane => Access::Checked(CredentialCell::new(None)),
            ClientAuth::AdminToken(token) => {
                let tokens = floe_controlplane::BootstrapTokens {
                    admin: token.clone(),
                    broker: None,
                    read_replica: None,
                };
                Access::Checked(CredentialCell::new(Some(tokens.credential_table())))
            }
        }
    }
}

/// How often the credential table is fetched again.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// How callers on the client port are checked.
#[derive(Debug)]
pub(crate) enum Access {
    /// Not at all (`--insecure-no-auth`): anyone may do anything.
    Open,
    /// Against a credential table: fixed (a broker without a controlplane and its admin
    /// token), or refreshed from the controlplane.
    Checked(CredentialCell),
}

/// The current credential table; `None` until the first arrives.
#[derive(Debug)]
pub(crate) struct CredentialCell {
    table: RwLock<Option<Arc<Credentials>>>,
    /// Asks the refresh task to fetch now (a token it does not know may have just been
    /// made).
    wanted: Notify,
    /// Counts the fetches attempted, so that a waiter knows when one happened.
    fetches: watch::Sender<u64>,
}

impl CredentialCell {
    pub(crate) fn new(table: Option<CredentialTable>) -> CredentialCell {
        CredentialCell {
            table: RwLock::new(table.map(|t| Arc::new(Credentials::new(t)))),
            wanted: Notify::new(),
            fetches: watch::Sender::new(0),
        }
    }

    fn current(&self) -> Option<Arc<Credentials>> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, table: CredentialTable) {
        *self.table.write().unwrap_or_else(PoisonError::into_inner) =
            Some(Arc::new(Credentials::new(table)));
    }

    /// Asks for a fetch and waits (at most [`FETCH_WAIT`]) until one was attempted.
    async fn fetch_now(&self) {
        let mut fetched = self.fetches.subscribe();
        fetched.mark_unchanged();
        self.wanted.notify_one();
        let _ = tokio::time::timeout(FETCH_WAIT, fetched.changed()).await;
    }
}

/// The longest a `Hello` with an unknown token waits for the table to be fetched again.
const FETCH_WAIT: Duration = Duration::from_secs(2);

/// The least time between two fetches: callers presenting unknown tokens cannot make the
/// broker ask the controlplane more often than this.
const MIN_FETCH_INTERVAL: Duration = Duration::from_millis(250);

/// Fetches the credential table from the controlplane every [`REFRESH_EVERY`] until
/// shutdown. A failed fetch keeps the last table (the controlplane being away does not lock
/// out every client) and is logged once until a fetch succeeds again.
pub(crate) async fn refresh(
    access: Arc<Access>,
    controlplane: Controlplane,
    mut shutdown: watch::Receiver<bool>,
) {
    let Access::Checked(cell) = access.as_ref() else {
        return;
    };
    let mut failing = false;
    loop {
        let started = tokio::time::Instant::now();
        match controlplane.credentials().await {
            Ok(table) => {
                if failing {
                    tracing::info!(version = table.version, "credentials fetched again");
                }
                failing = false;
                cell.replace(table);
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %floe_wire::ErrorChain(&e), "cannot fetch the credentials from the controlplane; keeping the last ones");
                }
                failing = true;
            }
        }
        cell.fetches.send_modify(|count| *count += 1);
        tokio::select! {
            _ = tokio::time::sleep(REFRESH_EVERY) => {}
            _ = cell.wanted.notified() => {
                tokio::time::sleep_until(started + MIN_FETCH_INTERVAL).await;
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Why a caller is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Denied {
    #[error("{0}")]
    Unauthorized(AuthError),
    #[error(
        "principal `{principal}` may not {action} stream `{stream}`: it needs the grant `{action}:{stream}`"
    )]
    Forbidden {
        principal: String,
        action: Action,
        stream: StreamName,
    },
    #[error("this server has not loaded its credentials from the controlplane yet; retry")]
    NotReady,
}

/// One connection's caller: the token its `Hello` presented, else the name its verified
/// client certificate carries, and the principal it proved under the table version it was
/// last checked against.
#[derive(Debug, Default)]
pub(crate) struct Caller {
    token: Option<AuthToken>,
    certificate_name: Option<String>,
    checked: Mutex<Option<(u64, Arc<Principal>)>>,
}

impl Caller {
    /// Authenticates a `Hello`'s token, else the connection's client certificate (the
    /// common name of one the TLS handshake verified against `--client-ca`); the connection
    /// is refused when this fails. A token or name the table does not hold may have been
    /// made since it was fetched: the table is fetched again (at most every
    /// [`MIN_FETCH_INTERVAL`]) before the caller is refused.
    pub(crate) async fn hello(
        access: &Access,
        token: Option<AuthToken>,
        certificate_name: Option<String>,
    ) -> Result<Caller, Denied> {
        let caller = Caller {
            token,
            certificate_name,
            checked: Mutex::new(None),
        };
        match caller.principal(access) {
            Err(
                Denied::Unauthorized(AuthError::Unknown | AuthError::UnknownCertificateName(_))
                | Denied::NotReady,
            ) => {
                if let Access::Checked(cell) = access {
                    cell.fetch_now().await;
                }
                caller.principal(access)?;
            }
            other => {
                other?;
            }
        }
        Ok(caller)
    }

    /// The token this caller presented, to forward as theirs (a caller known by its
    /// certificate has none: the controlplane cannot check a certificate it never saw).
    pub(crate) fn token(&self) -> Option<String> {
        self.token
            .as_ref()
            .map(|t| String::from_utf8_lossy(t.expose()).into_owned())
    }

    /// The caller's principal under the current table; `None` when access is open.
    fn principal(&self, access: &Access) -> Result<Option<Arc<Principal>>, Denied> {
        let Access::Checked(cell) = access else {
            return Ok(None);
        };
        let credentials = cell.current().ok_or(Denied::NotReady)?;
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((version, principal)) = checked.as_ref()
            && *version == credentials.version()
        {
            return Ok(Some(principal.clone()));
        }
        let principal = match (&self.token, &self.certificate_name) {
            (None, Some(name)) => credentials.authenticate_certificate(name),
            (token, _) => credentials.authenticate(token.as_ref().map(AuthToken::expose)),
        }
        .map_err(Denied::Unauthorized)?;
        *checked = Some((credentials.version(), principal.clone()));
        Ok(Some(principal))
    }

    /// Whether this caller may send `message` (for a metadata request: at all; which
    /// streams it may see is [`Caller::may`]'s).
    pub(crate) fn authorize(&self, access: &Access, message: &Message) -> Result<(), Denied> {
        let Some(principal) = self.principal(access)? else {
            return Ok(());
        };
        let (action, stream) = match message {
            Message::Produce(request) => (Action::Publish, &request.stream),
            Message::Fetch(request) => (Action::Consume, &request.stream),
            Message::CreateStream(request) => (Action::Admin, &request.name),
            Message::DeleteStream(request) => (Action::Admin, &request.name),
            Message::RepairPartition(request) => (Action::Admin, &request.stream),
            _ => return Ok(()),
        };
        if principal.may(action, stream) {
            return Ok(());
        }
        Err(Denied::Forbidden {
            principal: principal.name.clone(),
            action,
            stream: stream.clone(),
        })
    }

    /// Whether this caller may take `action` on `stream`; refused callers may nothing.
    pub(crate) fn may(&self, access: &Access, action: Action, stream: &StreamName) -> bool {
        match self.principal(access) {
            Ok(None) => true,
            Ok(Some(principal)) => principal.may(action, stream),
            Err(_) => false,
        }
    }
}

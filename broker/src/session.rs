//! The controlplane session of a managed broker: it registers (its id is kept in the data directory),
//! renews its lease with heartbeats that report the partitions it leads, and long-polls its
//! assignments, applying each version to its partitions.
//!
//! Applying never loses data on a guess. A stream missing from this broker's assignments is
//! deleted here only once the controlplane says the stream itself is gone (or was created
//! again, which a different creation time shows); a partition merely moved away is closed
//! and its files stay. A stream created again under a name whose objects are still being
//! deleted waits until they are, so it never adopts the old stream's history. The last
//! assignment applied is kept in the local catalog: a broker restarted while the
//! controlplane is down serves what it served before.

mod assignments;
mod heartbeat;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floe_client::rest::{Controlplane, RestError};
use floe_wire::admin::RegisterBrokerRequest;
use floe_wire::{BrokerId, Endpoint, LeaderEpoch};
use serde::Deserialize;
use tokio::sync::watch;

use crate::lease::Lease;
use crate::state_file::{StateFileError, write_atomically};

pub(crate) use assignments::{Holdings, follow_assignments};
pub(crate) use heartbeat::heartbeat;

/// Why the session could not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the controlplane URL")]
    Url(#[source] RestError),
    #[error("the peer address `{address}`")]
    PeerAddress {
        address: String,
        #[source]
        source: floe_wire::EndpointError,
    },
    #[error("cannot read the broker's identity {path}")]
    ReadIdentity {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a broker identity")]
    ParseIdentity {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    WriteIdentity(#[from] StateFileError),
    #[error("registering with the controlplane")]
    Register(#[source] RestError),
}

/// How this broker reaches its controlplane. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct ControlplaneSettings {
    /// Base URL of the REST API, e.g. `https://10.0.0.5:7300`.
    pub url: String,
    /// The PEM CA the controlplane's certificate chains to (`https` only); `None`: the
    /// system's roots.
    pub ca: Option<std::path::PathBuf>,
    /// The bearer token this broker calls the controlplane with: a principal of kind
    /// `broker` (e.g. the controlplane's `brokers` token).
    pub token: Option<String>,
    /// Failure domain reported at registration.
    pub zone: Option<String>,
    /// Where peers reach this broker; the client address until replication has its port.
    pub peer_endpoint: Option<String>,
}

impl std::fmt::Debug for ControlplaneSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlplaneSettings")
            .field("url", &self.url)
            .field("ca", &self.ca)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("zone", &self.zone)
            .field("peer_endpoint", &self.peer_endpoint)
            .finish()
    }
}

/// The longest an assignments long-poll waits before asking again.
const LONG_POLL: Duration = Duration::from_secs(30);
/// Pause after a failed call to the controlplane.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A managed broker's link to its controlplane, shared with the request handlers.
#[derive(Debug)]
pub(crate) struct Session {
    controlplane: Controlplane,
    broker_id: BrokerId,
    registration: RegisterBrokerRequest,
    /// The lease, and the epoch of every partition this broker leads from the assignments
    /// last received: what lets it write its partitions without replicas.
    lease: Arc<Lease>,
    /// The assignment version last applied in full; `None` before the first.
    applied: watch::Sender<Option<u64>>,
}

/// The broker's identity, kept in `<data-dir>/broker.json` once the controlplane gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Identity {
    broker_id: BrokerId,
}

impl Session {
    /// The broker's id: the one in the data directory, or on first start the one `named`
    /// (by the broker's own peer certificate) or else a new one from the controlplane
    /// (registering, retrying until it answers). `client_endpoint` is where clients reach
    /// this broker.
    pub(crate) async fn connect(
        settings: &ControlplaneSettings,
        data_dir: &Path,
        client_endpoint: Endpoint,
        named: Option<BrokerId>,
        lease: Arc<Lease>,
    ) -> Result<Session, SessionError> {
        let controlplane = Controlplane::with_ca(
            &settings.url,
            settings.token.clone(),
            settings.ca.as_deref(),
        )
        .map_err(SessionError::Url)?;
        let peer_endpoint = match &settings.peer_endpoint {
            Some(peer) => {
                Endpoint::new(peer.clone()).map_err(|source| SessionError::PeerAddress {
                    address: peer.clone(),
                    source,
                })?
            }
            None => client_endpoint.clone(),
        };
        let mut registration = RegisterBrokerRequest {
            broker_id: None,
            client_endpoint,
            peer_endpoint,
            zone: settings.zone.clone(),
            build: Some(floe_wire::admin::Build::current()),
        };
        let path = data_dir.join("broker.json");
        let broker_id = match std::fs::read(&path) {
            Ok(bytes) => {
                let identity: Identity = serde_json::from_slice(&bytes).map_err(|source| {
                    SessionError::ParseIdentity {
                        path: path.clone(),
                        source,
                    }
                })?;
                identity.broker_id
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                registration.broker_id = named;
                let id = register_until_answered(&controlplane, &registration).await?;
                let bytes = format!("{{\n  \"broker_id\": {}\n}}\n", id.get());
                write_atomically(&path, bytes.as_bytes())?;
                id
            }
            Err(source) => return Err(SessionError::ReadIdentity { path, source }),
        };
        registration.broker_id = Some(broker_id);
        let (applied, _) = watch::channel(None);
        Ok(Session {
            controlplane,
            broker_id,
            registration,
            lease,
            applied,
        })
    }

    /// The controlplane's REST client.
    pub(crate) fn controlplane(&self) -> &Controlplane {
        &self.controlplane
    }

    /// This broker's id, as the controlplane gave it.
    pub(crate) fn broker_id(&self) -> BrokerId {
        self.broker_id
    }

    /// Waits until `done` holds, checking it after every assignment version applied, for
    /// at most `timeout`; whether it holds.
    pub(crate) async fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let mut applied = self.applied.subscribe();
        let wait = async {
            while !done() {
                if applied.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        done()
    }

    /// Waits until a first version of the assignments is applied in full: until then the
    /// broker may not yet serve what the controlplane gave it.
    pub(crate) async fn first_applied(&self) {
        let mut applied = self.applied.subscribe();
        let _ = applied.wait_for(Option::is_some).await;
    }

    fn epoch(&self, stream: &str, partition: u32) -> Option<LeaderEpoch> {
        self.lease.epoch(stream, partition)
    }
}

async fn register_until_answered(
    controlplane: &Controlplane,
    registration: &RegisterBrokerRequest,
) -> Result<BrokerId, SessionError> {
    let mut warned = false;
    loop {
        match controlplane.register_broker(registration).await {
            Ok(answer) => {
                tracing::info!(
                    broker_id = answer.broker_id.get(),
                    controlplane = controlplane.url(),
                    "registered"
                );
                return Ok(answer.broker_id);
            }
            Err(e) if e.is_retryable() => {
                if !warned {
                    tracing::warn!(error = %e, "waiting for the controlplane to register");
                    warned = true;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(SessionError::Register(e)),
        }
    }
}

fn note_failure(failing: &mut bool, what: &str, error: &RestError) {
    if *failing {
        tracing::debug!(%error, "{what} failed again");
    } else {
        tracing::warn!(%error, "{what} failed; serving the last assignments meanwhile");
        *failing = true;
    }
}

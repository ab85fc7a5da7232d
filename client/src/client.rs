//! The connection to a broker: one QUIC connection, reconnected on demand, over which every
//! request travels on its own bidirectional stream.

mod admin;
mod connect;
mod exchange;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_wire::BrokerId;
use floe_wire::frame::{ConnectionLimits, Message, RequestId};

use crate::backoff::Backoff;
use crate::config::ClientConfig;
use crate::error::Error;
use connect::{Session, Transport};

/// A connection to a Floe broker, shared by clones.
///
/// `connect` dials the broker, checks its certificate against the configured CA and says
/// `Hello`; the limits the broker announces hold for the connection's life. Each request
/// opens its own QUIC stream, so a long-polling fetch never delays a publish. A request that
/// finds the connection lost reconnects first (with backoff, a bounded number of attempts);
/// a connection lost while a request is on it fails that request with
/// [`Error::ConnectionLost`], since its outcome is unknown — the [`Producer`](crate::Producer)
/// and [`Consumer`](crate::Consumer) retry such failures themselves.
///
/// ```no_run
/// use floe_client::{AckMode, Client, ClientConfig, StreamName, StreamSettings};
///
/// # async fn demo() -> Result<(), floe_client::Error> {
/// let client = Client::connect(ClientConfig::from_default_profile()?).await?;
/// let name = StreamName::new("orders").expect("a valid name");
/// client
///     .create_stream(&name, 3, AckMode::Leader, StreamSettings::default())
///     .await?;
/// let info = client.stream(&name).await?;
/// assert_eq!(info.partition_count, 3);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    transport: Transport,
    /// The live session, if any. Replaced, never mutated.
    current: Mutex<Option<Arc<Session>>>,
    /// Held while connecting, so that concurrent requests share one reconnection.
    reconnecting: tokio::sync::Mutex<()>,
    /// Request ids number from 1 and never repeat for this client.
    next_request_id: AtomicU64,
    closed: AtomicBool,
}

impl Client {
    /// Connects to the broker and completes the `Hello` exchange. One attempt: an unreachable
    /// broker fails here with [`Error::Connect`].
    pub async fn connect(config: ClientConfig) -> Result<Client, Error> {
        let remote = connect::resolve(&config.endpoint)
            .await
            .map_err(|reason| Error::Connect {
                endpoint: config.endpoint.clone(),
                reason,
            })?;
        let transport = Transport::new(&config, remote[0])?;
        let client = Client {
            inner: Arc::new(Inner {
                config,
                transport,
                current: Mutex::new(None),
                reconnecting: tokio::sync::Mutex::new(()),
                next_request_id: AtomicU64::new(1),
                closed: AtomicBool::new(false),
            }),
        };
        let session = client
            .inner
            .transport
            .establish(&client.inner.config, client.next_request_id())
            .await?;
        client.install(session);
        Ok(client)
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The limits the broker announced on the current connection (reconnecting if needed).
    pub async fn limits(&self) -> Result<ConnectionLimits, Error> {
        Ok(self.session().await?.limits)
    }

    /// The id of the broker on the current connection (reconnecting if needed).
    pub async fn broker_id(&self) -> Result<BrokerId, Error> {
        Ok(self.session().await?.broker_id)
    }

    /// Sends one request and returns the broker's answer, within the configured request
    /// timeout. An `Error` answer becomes [`Error::Broker`]; an answer of the wrong type or
    /// for another request is an [`Error::Protocol`].
    pub async fn request(&self, message: Message) -> Result<Message, Error> {
        self.request_within(&message, self.inner.config.request_timeout)
            .await
    }

    /// [`Client::request`] with an explicit timeout.
    pub(crate) async fn request_within(
        &self,
        request: &Message,
        timeout: Duration,
    ) -> Result<Message, Error> {
        self.open_request(timeout)
            .await?
            .exchange(request, timeout)
            .await
    }

    /// Opens the stream of one request (reconnecting once if the connection was lost). The
    /// broker applies a connection's produce requests in the order their streams were
    /// opened, so a caller that needs an order opens the streams in that order and may then
    /// run the exchanges concurrently.
    pub(crate) async fn open_request(&self, timeout: Duration) -> Result<OpenRequest, Error> {
        let mut reconnected = false;
        loop {
            let session = self.session().await?;
            let streams = match tokio::time::timeout(timeout, session.connection.open_bi()).await {
                Err(_) => {
                    return Err(Error::Timeout {
                        operation: "opening a request stream",
                        after: timeout,
                    });
                }
                Ok(Ok(streams)) => streams,
                // Nothing was sent, so trying again on a new connection is safe for any
                // request. `session()` reconnects because this one is now closed.
                Ok(Err(lost)) if !reconnected => {
                    tracing::debug!(error = %lost, "connection lost; reconnecting");
                    reconnected = true;
                    continue;
                }
                Ok(Err(lost)) => return Err(Error::ConnectionLost(lost)),
            };
            let id = self.next_request_id();
            // Requests leave in the order they were made: without priorities QUIC
            // interleaves the streams' data.
            let _ = streams.0.set_priority(request_priority(id));
            return Ok(OpenRequest {
                streams,
                session,
                id,
            });
        }
    }

    /// Closes the connection; later requests fail with [`Error::Closed`]. Waits briefly for
    /// the close to reach the broker.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        if let Some(session) = self.current() {
            session.connection.close(0u32.into(), b"client closed");
        }
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.inner.transport.endpoint.wait_idle(),
        )
        .await;
    }

    fn next_request_id(&self) -> RequestId {
        RequestId::new(self.inner.next_request_id.fetch_add(1, Ordering::Relaxed))
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.inner
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn install(&self, session: Session) -> Arc<Session> {
        let session = Arc::new(session);
        *self
            .inner
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(session.clone());
        session
    }

    /// The live session, reconnecting if the last one closed.
    async fn session(&self) -> Result<Arc<Session>, Error> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        match self.current() {
            Some(session) if session.is_open() => Ok(session),
            _ => self.reconnect().await,
        }
    }

    async fn reconnect(&self) -> Result<Arc<Session>, Error> {
        let _one_at_a_time = self.inner.reconnecting.lock().await;
        if let Some(session) = self.current().filter(|s| s.is_open()) {
            // Another request reconnected while this one waited.
            return Ok(session);
        }
        let config = &self.inner.config;
        let backoff = Backoff {
            base: config.reconnect_backoff,
            max: config.reconnect_backoff_max,
        };
        let mut last = Error::Closed;
        for attempt in 0..config.reconnect_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(backoff.delay(attempt - 1, None)).await;
            }
            if self.inner.closed.load(Ordering::SeqCst) {
                return Err(Error::Closed);
            }
            match self
                .inner
                .transport
                .establish(config, self.next_request_id())
                .await
            {
                Ok(session) => {
                    tracing::info!(endpoint = %config.endpoint, attempt, "reconnected");
                    return Ok(self.install(session));
                }
                Err(e) => {
                    tracing::debug!(endpoint = %config.endpoint, attempt, error = %e, "connection attempt failed");
                    last = e;
                }
            }
        }
        Err(last)
    }
}

/// A request stream's QUIC send priority: older requests first. Wraps every 2^31 requests,
/// where one request may be overtaken.
fn request_priority(id: RequestId) -> i32 {
    i32::MAX - (id.get() & 0x7fff_ffff) as i32
}

/// A request whose stream is open: [`OpenRequest::exchange`] sends it and reads the answer.
pub(crate) struct OpenRequest {
    streams: (quinn::SendStream, quinn::RecvStream),
    session: Arc<Session>,
    id: RequestId,
}

impl OpenRequest {
    pub(crate) async fn exchange(
        self,
        request: &Message,
        timeout: Duration,
    ) -> Result<Message, Error> {
        let limits = self.session.limits.frame_limits();
        let exchange = exchange::run(
            self.streams,
            request,
            self.session.version,
            self.id,
            &limits,
        );
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Timeout {
                operation: exchange::type_name(request.message_type()),
                after: timeout,
            }),
        }
    }
}

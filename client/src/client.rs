//! The connection to a broker: one QUIC connection, reconnected on demand, over which every
//! request travels on its own bidirectional stream.

mod admin;
mod connect;
mod exchange;
mod read_replicas;
mod routes;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_wire::frame::{ConnectionLimits, Fetch, FetchPosition, FetchResponse, Message, RequestId};
use floe_wire::{Backoff, BrokerId, Jitter, PartitionId, StreamName};

use crate::config::ClientConfig;
use crate::error::Error;
use connect::{Session, Transport};
use routes::Routes;

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
    /// The connection this handle's requests travel on.
    conn: Arc<Connection>,
    /// Every connection of this client, and which broker leads each partition; shared by
    /// every handle made from one [`Client::connect`].
    routes: Arc<Routes>,
}

/// One broker's connection: a QUIC connection, replaced when it is lost.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The client's configuration, with `endpoint` this broker's alone.
    config: ClientConfig,
    transport: Arc<Transport>,
    /// The live session, if any. Replaced, never mutated.
    current: Mutex<Option<Arc<Session>>>,
    /// Held while connecting, so that concurrent requests share one reconnection.
    reconnecting: tokio::sync::Mutex<()>,
    /// Request ids number from 1 and never repeat on this connection.
    next_request_id: AtomicU64,
    closed: Arc<AtomicBool>,
}

impl Client {
    /// Connects to the broker and completes the `Hello` exchange. `config.endpoint` may name
    /// several brokers of one cluster, separated by commas (`host1:7400,host2:7400`): they are
    /// tried in order, once each, and the first that answers serves metadata and
    /// administration; the others are asked where partitions are led when it cannot answer.
    /// When none answers this fails with [`Error::Connect`].
    pub async fn connect(config: ClientConfig) -> Result<Client, Error> {
        let endpoints = routes::split_endpoints(&config.endpoint);
        let first = endpoints.first().cloned().unwrap_or_default();
        let remote = connect::resolve(&first)
            .await
            .map_err(|reason| Error::Connect {
                endpoint: first.clone(),
                reason,
            })?;
        let transport = Arc::new(Transport::new(&config, remote[0])?);
        let mut routes = Routes::new(config.clone(), transport, &endpoints);
        if let Some(url) = &config.controlplane {
            let token = config.token.as_ref().map(|t| t.expose().to_owned());
            let rest = crate::rest::Controlplane::with_ca(url, token, Some(&config.ca_cert))
                .map_err(|e| {
                    Error::Config(crate::error::ConfigError::Invalid {
                        field: "controlplane",
                        reason: e.to_string(),
                    })
                })?;
            routes.read_replicas = Some(read_replicas::ReadReplicas::new(rest));
        }
        let routes = Arc::new(routes);
        let mut last = None;
        for endpoint in &endpoints {
            let conn = routes.connection(endpoint);
            match conn
                .transport
                .establish(&conn.config, conn.next_request_id())
                .await
            {
                Ok(session) => {
                    conn.install(session);
                    return Ok(Client { conn, routes });
                }
                Err(e) => {
                    tracing::debug!(%endpoint, error = %e, "bootstrap broker did not answer");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(Error::Connect {
            endpoint: String::new(),
            reason: crate::error::ConnectFailure::NoAddress,
        }))
    }

    /// The controlplane's REST API, when [`ClientConfig::controlplane`] names it.
    pub fn controlplane(&self) -> Option<&crate::rest::Controlplane> {
        self.routes.read_replicas.as_ref().map(|r| r.rest())
    }

    /// The configuration this client was made with (`endpoint`: the broker this handle
    /// talks to).
    pub fn config(&self) -> &ClientConfig {
        &self.conn.config
    }

    /// The limits the broker announced on the current connection (reconnecting if needed).
    pub async fn limits(&self) -> Result<ConnectionLimits, Error> {
        Ok(self.conn.session().await?.limits)
    }

    /// The id of the broker on the current connection (reconnecting if needed).
    pub async fn broker_id(&self) -> Result<BrokerId, Error> {
        Ok(self.conn.session().await?.broker_id)
    }

    /// Sends one request and returns the broker's answer, within the configured request
    /// timeout. An `Error` answer becomes [`Error::Broker`]; an answer of the wrong type or
    /// for another request is an [`Error::Protocol`].
    pub async fn request(&self, message: Message) -> Result<Message, Error> {
        self.request_within(&message, self.conn.config.request_timeout)
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
        self.conn.open_request(timeout).await
    }

    /// A handle on the connection to the broker that leads `partition` of `stream`, asking
    /// the brokers where it is led when that is not known. While no broker names a leader
    /// (an election is running) this fails with a retryable `NotLeader`.
    pub async fn for_partition(
        &self,
        stream: &StreamName,
        partition: PartitionId,
    ) -> Result<Client, Error> {
        let endpoint = self.routes.leader(self, stream, partition).await?;
        Ok(self.on(&endpoint))
    }

    /// Forgets where `partition` of `stream` is led, if this handle's broker was named:
    /// the broker refused as not the leader, or cannot be reached.
    pub fn forget_leader(&self, stream: &StreamName, partition: PartitionId) {
        self.routes
            .forget(stream, partition, &self.conn.config.endpoint);
    }

    /// Asks the brokers again where `partition` of `stream` is led; true when it is now
    /// known to be led elsewhere than this handle's broker (whose connection is then closed,
    /// so that requests still waiting on it fail at once and can be retried there).
    pub(crate) async fn leader_moved(&self, stream: &StreamName, partition: PartitionId) -> bool {
        let here = self.conn.config.endpoint.clone();
        self.routes.forget(stream, partition, &here);
        match self.routes.leader(self, stream, partition).await {
            Ok(endpoint) if endpoint != here => {
                tracing::info!(%stream, partition = partition.get(), from = %here, to = %endpoint, "partition leader moved");
                self.conn.drop_session("partition leader moved");
                true
            }
            _ => false,
        }
    }

    /// Sends `request` about `partition` of `stream` to its leader and returns the answer.
    /// While the answer is late (past `stall_after`, then every [`STALL_RECHECK`]) the
    /// brokers are asked whether the leader moved; if it did, the request is abandoned with
    /// [`Error::ConnectionLost`] (retryable) so the caller retries at the new leader, rather
    /// than waiting for a dead broker's connection to time out. An answer or a failure that
    /// says the leader is not there makes the client forget it.
    pub(crate) async fn request_partition(
        &self,
        stream: &StreamName,
        partition: PartitionId,
        request: &Message,
        timeout: Duration,
        stall_after: Duration,
    ) -> Result<Message, Error> {
        let leader = self.for_partition(stream, partition).await?;
        let opened = tokio::time::timeout(ROUTED_OPEN_WAIT, leader.open_request(timeout)).await;
        let opened = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                leader.forget_leader(stream, partition);
                return Err(e);
            }
            Err(_) => {
                leader.forget_leader(stream, partition);
                return Err(Error::Timeout {
                    operation: "connecting to the partition's leader",
                    after: ROUTED_OPEN_WAIT,
                });
            }
        };
        let answer = leader
            .watch_leader(
                stream,
                partition,
                opened.exchange(request, timeout),
                stall_after,
            )
            .await;
        if answer.as_ref().err().is_some_and(points_elsewhere) {
            leader.forget_leader(stream, partition);
        }
        answer
    }

    /// One fetch of whole stored batches from `partition`'s leader, as the broker answers
    /// it: for programs that relay batches unopened (a read replica following the tail).
    /// Applications read records with a [`Consumer`](crate::Consumer) instead. Fails as the
    /// broker refused; retrying is the caller's choice.
    pub async fn fetch_batches(
        &self,
        stream: &StreamName,
        partition: PartitionId,
        position: FetchPosition,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchResponse, Error> {
        let request = fetch_request(stream, partition, position, max_bytes, max_wait);
        let timeout = max_wait + self.conn.config.request_timeout;
        let stall = max_wait + STALL_RECHECK;
        match self
            .request_partition(stream, partition, &request, timeout, stall)
            .await?
        {
            Message::FetchResponse(response) => Ok(response),
            _ => Err(crate::error::ProtocolViolation::UnexpectedResponse {
                request: "Fetch",
                found: "another message",
            }
            .into()),
        }
    }

    /// Awaits `exchange`, a request on this handle's connection about `partition`; while it
    /// is late, asks whether the leader moved (and if so closes the connection, failing the
    /// exchange at once).
    pub(crate) async fn watch_leader(
        &self,
        stream: &StreamName,
        partition: PartitionId,
        exchange: impl std::future::Future<Output = Result<Message, Error>>,
        stall_after: Duration,
    ) -> Result<Message, Error> {
        tokio::pin!(exchange);
        let mut wait = stall_after;
        loop {
            tokio::select! {
                answer = &mut exchange => return answer,
                () = tokio::time::sleep(wait) => {
                    self.leader_moved(stream, partition).await;
                    wait = STALL_RECHECK;
                }
            }
        }
    }

    /// A handle on the read replica that serves `partition` of `stream`, when the
    /// controlplane is known and lists a live read replica this client has not seen fail
    /// lately.
    pub(crate) async fn read_replica_for(
        &self,
        stream: &StreamName,
        partition: PartitionId,
    ) -> Option<Client> {
        let read_replicas = self.routes.read_replicas.as_ref()?;
        let chosen = read_replicas.choose(stream, partition).await?;
        Some(self.on(&chosen.endpoint))
    }

    /// Sends `request` to this handle's read replica. A read replica that cannot be reached,
    /// or that does not answer within `timeout`, is passed over for a while, so the caller's
    /// retry goes to another read replica or to the leader.
    pub(crate) async fn request_read_replica(
        &self,
        request: &Message,
        timeout: Duration,
    ) -> Result<Message, Error> {
        let answer = match tokio::time::timeout(ROUTED_OPEN_WAIT, self.open_request(timeout)).await
        {
            Ok(Ok(opened)) => opened.exchange(request, timeout).await,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Timeout {
                operation: "connecting to a read replica",
                after: ROUTED_OPEN_WAIT,
            }),
        };
        let unhealthy = match &answer {
            Err(Error::Broker { code, .. }) => *code == floe_wire::frame::ErrorCode::ShuttingDown,
            Err(e) => points_elsewhere(e),
            Ok(_) => false,
        };
        // A request cut short because this client is closing says nothing of the replica.
        let closing = self.conn.closed.load(Ordering::SeqCst);
        if unhealthy
            && !closing
            && let Some(read_replicas) = &self.routes.read_replicas
        {
            tracing::info!(read_replica = %self.conn.config.endpoint, "read replica failed; reading elsewhere");
            read_replicas.suspect(&self.conn.config.endpoint);
        }
        answer
    }

    /// A handle on this client's connection to `endpoint`.
    pub(crate) fn on(&self, endpoint: &str) -> Client {
        Client {
            conn: self.routes.connection(endpoint),
            routes: self.routes.clone(),
        }
    }

    /// Closes every connection; later requests fail with [`Error::Closed`]. Waits briefly
    /// for the close to reach the brokers.
    pub async fn close(&self) {
        self.routes.close_all();
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.conn.transport.endpoint.wait_idle(),
        )
        .await;
    }
}

impl Connection {
    fn new(config: ClientConfig, transport: Arc<Transport>, closed: Arc<AtomicBool>) -> Connection {
        Connection {
            config,
            transport,
            current: Mutex::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
            next_request_id: AtomicU64::new(1),
            closed,
        }
    }

    async fn open_request(&self, timeout: Duration) -> Result<OpenRequest, Error> {
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

    /// Closes the current session, if any: requests on it fail with
    /// [`Error::ConnectionLost`], the next one reconnects.
    fn drop_session(&self, reason: &str) {
        if let Some(session) = self.current() {
            session.connection.close(0u32.into(), reason.as_bytes());
        }
    }

    fn next_request_id(&self) -> RequestId {
        RequestId::new(self.next_request_id.fetch_add(1, Ordering::Relaxed))
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn install(&self, session: Session) -> Arc<Session> {
        let session = Arc::new(session);
        *self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(session.clone());
        session
    }

    /// The live session, reconnecting if the last one closed.
    async fn session(&self) -> Result<Arc<Session>, Error> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        match self.current() {
            Some(session) if session.is_open() => Ok(session),
            _ => self.reconnect().await,
        }
    }

    async fn reconnect(&self) -> Result<Arc<Session>, Error> {
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(session) = self.current().filter(|s| s.is_open()) {
            // Another request reconnected while this one waited.
            return Ok(session);
        }
        let config = &self.config;
        let backoff = Backoff {
            initial: config.reconnect_backoff,
            max: config.reconnect_backoff_max,
        };
        let mut jitter = Jitter::unpredictable();
        let mut last = Error::Closed;
        for attempt in 0..config.reconnect_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(backoff.delay(attempt - 1, jitter.draw())).await;
            }
            if self.closed.load(Ordering::SeqCst) {
                return Err(Error::Closed);
            }
            match self
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

/// Longest wait to open a request at a partition's leader, connecting included: a leader
/// that died is not dialled for a whole connect timeout while the brokers already name its
/// successor.
pub(crate) const ROUTED_OPEN_WAIT: Duration = Duration::from_secs(2);

/// How often a late request asks again whether its partition's leader moved.
pub(crate) const STALL_RECHECK: Duration = Duration::from_secs(1);

/// Whether a failed request suggests its partition is led elsewhere, or that its broker is
/// unreachable: either way the leader must be looked up again.
/// A `Fetch` of `partition` from `position`, waiting at most `max_wait` at the broker.
pub(crate) fn fetch_request(
    stream: &StreamName,
    partition: PartitionId,
    position: FetchPosition,
    max_bytes: u32,
    max_wait: Duration,
) -> Message {
    Message::Fetch(Fetch {
        stream: stream.clone(),
        partition,
        position,
        max_bytes,
        max_wait_ms: u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX),
    })
}

pub(crate) fn points_elsewhere(error: &Error) -> bool {
    match error {
        Error::Broker { code, .. } => *code == floe_wire::frame::ErrorCode::NotLeader,
        Error::Connect { .. } | Error::ConnectionLost(_) | Error::Timeout { .. } => true,
        _ => false,
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

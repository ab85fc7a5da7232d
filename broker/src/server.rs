//! The QUIC server: accepts connections, reads one request frame per bidirectional stream,
//! answers it on the same stream.
//!
//! A connection must start with `Hello`; every later request goes on its own stream, so a
//! slow fetch never blocks a publish behind it. Memory per connection is bounded: QUIC limits
//! the concurrent streams, a semaphore bounds the request bytes being handled, and each fetch
//! response is at most the negotiated frame size — a consumer that stops reading stalls only
//! its own streams through QUIC flow control.

mod admin;
mod error_map;
pub(crate) mod fetch;
mod order;
pub(crate) mod payload;
mod produce;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use floe_wire::BrokerId;
use floe_wire::frame::{
    ConnectionLimits, ErrorCode, ErrorResponse, Frame, FrameHeader, FrameLimits, HEADER_LEN, Hello,
    HelloAck, Message, MessageType, ProtocolVersion, RequestId,
};
use tokio::sync::{Semaphore, watch};

use crate::metrics::{ErrorLabels, Metrics};
use crate::partitions::Partitions;
use crate::tiering::Tiering;

/// What every connection handler shares.
#[derive(Debug)]
pub struct BrokerState {
    pub partitions: Partitions,
    pub tiering: Tiering,
    /// Set while the disk is past its high-water mark: publishes are refused (retryable).
    pub disk_high_water: std::sync::atomic::AtomicBool,
    pub metrics: Arc<Metrics>,
    pub limits: ConnectionLimits,
    pub broker_id: BrokerId,
    /// The controlplane link, when one manages this broker.
    pub managed: Option<crate::managed::Managed>,
    /// The peer port and the controlplane, for replicated partitions (managed brokers with a
    /// peer port only).
    pub replication: Option<crate::replica::ReplicaContext>,
    /// `host:port` clients should use to reach this broker.
    pub advertised: floe_wire::Endpoint,
    /// Longest a fetch may wait on the tail, whatever the client asks.
    pub fetch_wait_max: Duration,
    /// Set when shutting down: new requests get `ShuttingDown`.
    pub shutdown: watch::Receiver<bool>,
    /// Bytes of fetch responses a connection may hold at once (read from the log and not yet
    /// handed to QUIC). A consumer that stops reading stalls at this bound.
    pub fetch_bytes_per_connection: u32,
    /// The cap on history reads, shared by every fetch.
    pub history_rate: crate::history_rate::HistoryRate,
}

/// What a QUIC server on the client protocol answers: a broker, or a read replica. The
/// connection handling (the `Hello` handshake, framing, memory bounds, shutdown) is the same
/// for both; only the answers differ.
pub(crate) trait Service: Send + Sync + Sized + 'static {
    fn limits(&self) -> ConnectionLimits;
    /// Bytes of fetch responses one connection may hold at once.
    fn fetch_bytes_per_connection(&self) -> u32;
    fn metrics(&self) -> &Metrics;
    /// The id announced in `HelloAck`.
    fn server_id(&self) -> BrokerId;
    /// Turns true when shutting down: new requests get `ShuttingDown`.
    fn shutdown(&self) -> &watch::Receiver<bool>;
    /// The answer to one request, after the handshake. A produce request comes with its
    /// turn: requests of one connection append in the order their streams were opened.
    fn answer(
        self: &Arc<Self>,
        message: Message,
        started: Instant,
        turn: Option<Turn<'_>>,
    ) -> impl std::future::Future<Output = Message> + Send;
}

pub(crate) use order::Turn;

impl Service for BrokerState {
    fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    fn fetch_bytes_per_connection(&self) -> u32 {
        self.fetch_bytes_per_connection
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn server_id(&self) -> BrokerId {
        self.broker_id
    }

    fn shutdown(&self) -> &watch::Receiver<bool> {
        &self.shutdown
    }

    async fn answer(
        self: &Arc<Self>,
        message: Message,
        started: Instant,
        turn: Option<Turn<'_>>,
    ) -> Message {
        let state: &BrokerState = self;
        match message {
            Message::MetadataRequest(request) => admin::metadata(state, request),
            Message::CreateStream(request) => admin::create_stream(state, *request).await,
            Message::DeleteStream(request) => admin::delete_stream(state, request).await,
            Message::Produce(request) => produce::produce(state, request, started, turn).await,
            Message::Fetch(request) => fetch::fetch(state, request, started).await,
            other => error(
                ErrorCode::InvalidRequest,
                format!("{:?} is not a request", other.message_type()),
            ),
        }
    }
}

/// Per-connection state.
#[derive(Debug)]
struct Connection {
    version: OnceLock<ProtocolVersion>,
    /// Request bytes being handled; a stream waits here before reading its payload.
    in_flight: Semaphore,
    /// Fetch response bytes being held; separate from `in_flight` so that a stalled consumer
    /// never blocks a producer sharing its connection.
    fetch_budget: Semaphore,
    /// Produce requests append in the order their streams were opened.
    order: order::RequestOrder,
}

/// Creates the QUIC endpoint with socket buffers large enough not to drop packets at speed.
///
/// `reset_key` signs stateless resets. Kept across restarts (see [`load_reset_key`]), it lets
/// a restarted broker tell clients at once that their old connection is gone, instead of
/// leaving them to wait for the idle timeout.
pub fn endpoint(
    listen: SocketAddr,
    config: quinn::ServerConfig,
    reset_key: &[u8],
) -> Result<quinn::Endpoint> {
    let socket = std::net::UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
    set_socket_buffers(&socket);
    let runtime = quinn::default_runtime().context("no async runtime")?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let endpoint_config =
        floe_client::datagrams::endpoint_config(quinn::EndpointConfig::new(Arc::new(key)));
    quinn::Endpoint::new(endpoint_config, Some(config), socket, runtime)
        .context("creating the QUIC endpoint")
}

/// The stateless-reset key in `data_dir/reset-key`, created (32 random bytes, mode 0600) when
/// missing.
pub fn load_reset_key(data_dir: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("reset-key");
    match std::fs::read(&path) {
        Ok(key) if key.len() == 32 => return Ok(key),
        Ok(key) => anyhow::bail!("{} holds {} bytes, not 32", path.display(), key.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let mut key = vec![0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| anyhow::anyhow!("no system randomness"))?;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(&key)?;
    file.sync_all()?;
    Ok(key)
}

/// Asks for 4 MiB socket buffers; the kernel may grant less (net.core.*mem_max).
pub fn set_socket_buffers(socket: &std::net::UdpSocket) {
    let socket = socket2_ref(socket);
    for result in [
        socket.set_recv_buffer_size(4 << 20),
        socket.set_send_buffer_size(4 << 20),
    ] {
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not enlarge the UDP socket buffers");
        }
    }
}

fn socket2_ref(socket: &std::net::UdpSocket) -> socket2::SockRef<'_> {
    socket2::SockRef::from(socket)
}

/// Accepts connections until `shutdown` turns true, then closes the endpoint.
pub async fn serve(endpoint: quinn::Endpoint, state: Arc<BrokerState>) {
    serve_with(endpoint, state).await;
}

/// Serves the client protocol for any [`Service`] until it shuts down.
pub(crate) async fn serve_with<S: Service>(endpoint: quinn::Endpoint, state: Arc<S>) {
    accept(endpoint, state, serve_connection::<S>).await;
}

/// Hands every connection `endpoint` accepts to `serve` on a task of its own, until the
/// service shuts down; then closes the endpoint.
pub(crate) async fn accept<S, F, Fut>(endpoint: quinn::Endpoint, state: Arc<S>, serve: F)
where
    S: Service,
    F: Fn(quinn::Connection, Arc<S>) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut shutdown = state.shutdown().clone();
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let state = state.clone();
                tokio::spawn(async move {
                    match incoming.await {
                        Ok(connection) => serve(connection, state).await,
                        Err(e) => tracing::debug!(error = %e, "handshake failed"),
                    }
                });
            }
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => break,
        }
    }
    endpoint.close(0u32.into(), b"shutting down");
}

async fn serve_connection<S: Service>(connection: quinn::Connection, state: Arc<S>) {
    let remote = connection.remote_address();
    tracing::debug!(%remote, "connection open");
    state.metrics().connections.inc();
    let conn = Arc::new(Connection {
        version: OnceLock::new(),
        in_flight: Semaphore::new(
            state.limits().max_in_flight_bytes.min(u64::from(u32::MAX)) as usize
        ),
        fetch_budget: Semaphore::new(state.fetch_bytes_per_connection() as usize),
        order: order::RequestOrder::new(),
    });
    let mut tickets = 0u64;
    loop {
        let (send, recv) = match connection.accept_bi().await {
            Ok(streams) => streams,
            Err(e) => {
                tracing::debug!(%remote, error = %e, "connection closed");
                break;
            }
        };
        let (state, conn) = (state.clone(), conn.clone());
        let ticket = tickets;
        tickets += 1;
        tokio::spawn(async move {
            if let Err(e) = serve_stream(&state, &conn, ticket, send, recv).await {
                tracing::debug!(%remote, error = %e, "stream ended with an error");
            }
        });
    }
    state.metrics().connections.dec();
}

async fn serve_stream<S: Service>(
    state: &Arc<S>,
    conn: &Connection,
    ticket: u64,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) -> Result<()> {
    let turn = order::Turn::new(&conn.order, ticket);
    let limits = state.limits().frame_limits();
    let mut head = [0u8; HEADER_LEN];
    recv.read_exact(&mut head).await?;
    let header = match FrameHeader::decode(&head, &limits) {
        Ok(Some(header)) => header,
        Ok(None) => anyhow::bail!("a whole header did not decode"),
        Err(e) => {
            // Framing is lost on this stream: answer once, then stop reading it.
            let error = ErrorResponse {
                code: e.error_code(),
                message: e.to_string(),
                details: None,
            };
            respond(
                state,
                &mut send,
                ProtocolVersion::V1,
                RequestId::new(0),
                Message::Error(error),
            )
            .await?;
            let _ = recv.stop(0u32.into());
            return Ok(());
        }
    };
    let turn = if header.message_type == MessageType::Produce {
        // Wait before reading the payload: QUIC keeps receiving it meanwhile, and no later
        // request can hold the byte budget an earlier one needs.
        turn.wait().await;
        Some(turn)
    } else {
        turn.finish();
        None
    };
    let started = Instant::now();
    let payload_len = header.payload_len as usize;
    let _permit = conn
        .in_flight
        .acquire_many(u32::try_from(payload_len).unwrap_or(u32::MAX))
        .await
        .context("connection closing")?;
    let payload = payload::read_payload(&mut recv, payload_len).await?;
    let frame = Frame { header, payload };
    let message = frame.message(&limits);
    // A fetch reserves its largest possible response before reading the log; the reservation
    // lasts until the response is handed to QUIC.
    let _fetch_permit = match &message {
        Ok(Message::Fetch(fetch)) => {
            let want = fetch.max_bytes.clamp(1, state.fetch_bytes_per_connection());
            Some(
                conn.fetch_budget
                    .acquire_many(want)
                    .await
                    .context("connection closing")?,
            )
        }
        _ => None,
    };
    let response = match message {
        Ok(Message::Fetch(mut fetch)) => {
            fetch.max_bytes = fetch.max_bytes.clamp(1, state.fetch_bytes_per_connection());
            handle(state, conn, Message::Fetch(fetch), started, None).await
        }
        Ok(message) => handle(state, conn, message, started, turn).await,
        Err(e) => error(e.error_code(), e.to_string()),
    };
    // Read after the request is handled: a `HelloAck` goes out in the version it negotiated.
    let version = conn
        .version
        .get()
        .copied()
        .unwrap_or(ProtocolVersion::OLDEST);
    respond(state, &mut send, version, header.request_id, response).await
}

/// Negotiates the connection's version, once: a repeated `Hello` is refused, and the
/// connection keeps the version it negotiated first.
fn answer_hello<S: Service>(state: &S, conn: &Connection, hello: &Hello) -> Message {
    let answered = || {
        error(
            ErrorCode::InvalidRequest,
            "Hello was already answered on this connection".into(),
        )
    };
    if conn.version.get().is_some() {
        return answered();
    }
    let version = match floe_wire::frame::negotiate(hello.min_version, hello.max_version) {
        Ok(version) => version,
        Err(e) => return error(ErrorCode::UnsupportedVersion, e.to_string()),
    };
    // Two Hellos racing on two streams: the first one's version stands.
    if conn.version.set(version).is_err() {
        return answered();
    }
    Message::HelloAck(HelloAck {
        version,
        broker_id: state.server_id(),
        limits: state.limits(),
    })
}

async fn handle<S: Service>(
    state: &Arc<S>,
    conn: &Connection,
    message: Message,
    started: Instant,
    turn: Option<order::Turn<'_>>,
) -> Message {
    if let Message::Hello(hello) = &message {
        return answer_hello(state.as_ref(), conn, hello);
    }
    if conn.version.get().is_none() {
        return error(ErrorCode::HandshakeRequired, "send Hello first".into());
    }
    if *state.shutdown().borrow() {
        return error(ErrorCode::ShuttingDown, "shutting down".into());
    }
    state.answer(message, started, turn).await
}

/// An `Error` message.
pub(crate) fn error(code: ErrorCode, message: String) -> Message {
    Message::Error(ErrorResponse {
        code,
        message,
        details: None,
    })
}

async fn respond<S: Service>(
    state: &Arc<S>,
    send: &mut quinn::SendStream,
    version: ProtocolVersion,
    request_id: RequestId,
    response: Message,
) -> Result<()> {
    if let Message::Error(e) = &response {
        state
            .metrics()
            .errors
            .get_or_create(&ErrorLabels {
                code: format!("{:?}", e.code),
            })
            .inc();
    }
    let encoded = match response.encode_chunks(version, request_id) {
        Ok(encoded) => encoded,
        Err(e) => {
            tracing::error!(error = %e, "could not encode a response");
            error(ErrorCode::Internal, "response encoding failed".into())
                .encode_chunks(version, request_id)
                .context("encoding an error response")?
        }
    };
    let mut chunks = encoded.into_chunks();
    send.write_all_chunks(&mut chunks).await?;
    send.finish()?;
    Ok(())
}

/// Frame limits the broker applies to requests.
pub fn frame_limits(limits: &ConnectionLimits) -> FrameLimits {
    limits.frame_limits()
}

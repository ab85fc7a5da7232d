//! The QUIC server: accepts connections, reads one request frame per bidirectional stream,
//! answers it on the same stream.
//!
//! A connection must start with `Hello`; every later request goes on its own stream, so a
//! slow fetch never blocks a publish behind it. Memory per connection is bounded: QUIC limits
//! the concurrent streams, a semaphore bounds the request bytes being handled, and each fetch
//! response is at most the negotiated frame size — a consumer that stops reading stalls only
//! its own streams through QUIC flow control.

mod admin;
mod broker;
mod error_map;
pub(crate) mod fetch;
mod order;
mod produce;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use floe_wire::BrokerId;
use floe_wire::frame::{
    ConnectionLimits, Frame, FrameHeader, FrameLimits, HEADER_LEN, Hello, HelloAck, Message,
    MessageType, PayloadError, ProtocolVersion, RequestId,
};
use tokio::sync::{Semaphore, SemaphorePermit, watch};

use crate::auth::{Access, Caller};
use crate::metrics::{ErrorLabels, Metrics};
use floe_wire::auth::Action;
use floe_wire::frame::MetadataResponse;

pub(crate) use broker::{Broker, BrokerParts};
pub(crate) use error_map::Refusal;

/// Why a request stream was dropped without an answer (logged at debug: the client sees its
/// stream reset or the connection gone).
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("cannot read the request")]
    Read(#[from] quinn::ReadExactError),
    #[error(transparent)]
    Payload(#[from] crate::quic::PayloadError),
    #[error("the connection is closing")]
    Closing,
    #[error("cannot encode the answer")]
    Encode(#[from] floe_wire::frame::EncodeError),
    #[error("cannot write the answer")]
    Write(#[from] quinn::WriteError),
    #[error("cannot finish the answer")]
    Finish(#[from] quinn::ClosedStream),
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
    /// How callers are checked.
    fn access(&self) -> &Access;
    /// The answer to one request, after the handshake and the caller's check. A produce
    /// request comes with its turn: requests of one connection append in the order their
    /// streams were opened.
    fn answer(
        self: &Arc<Self>,
        message: Message,
        caller: &Caller,
        started: Instant,
        turn: Option<Turn<'_>>,
    ) -> impl std::future::Future<Output = Message> + Send;
}

pub(crate) use order::Turn;

/// Per-connection state.
#[derive(Debug)]
struct Connection {
    /// Set by the first `Hello` whose token is accepted, before `version`.
    caller: OnceLock<Caller>,
    /// The principal the client's verified certificate names, if it showed one.
    certificate_name: Option<String>,
    version: OnceLock<ProtocolVersion>,
    /// Request bytes being handled; a stream waits here before reading its payload.
    in_flight: Semaphore,
    /// Fetch response bytes being held; separate from `in_flight` so that a stalled consumer
    /// never blocks a producer sharing its connection.
    fetch_budget: Semaphore,
    /// Produce requests append in the order their streams were opened.
    order: order::RequestOrder,
}

/// Serves the client protocol for any [`Service`] until it shuts down.
pub(crate) async fn serve<S: Service>(endpoint: quinn::Endpoint, state: Arc<S>) {
    let shutdown = state.shutdown().clone();
    crate::quic::accept(endpoint, shutdown, move |connection| {
        serve_connection(connection, state.clone())
    })
    .await;
}

async fn serve_connection<S: Service>(connection: quinn::Connection, state: Arc<S>) {
    let remote = connection.remote_address();
    tracing::debug!(%remote, "connection open");
    state.metrics().connections.inc();
    let conn = Arc::new(Connection {
        caller: OnceLock::new(),
        certificate_name: crate::tls::client_certificate_name(&connection),
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
                tracing::debug!(%remote, error = %floe_wire::ErrorChain(&e), "stream ended with an error");
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
) -> Result<(), ExchangeError> {
    let turn = order::Turn::new(&conn.order, ticket);
    let limits = state.limits().frame_limits();
    let Some(header) = read_header(state, &limits, &mut send, &mut recv).await? else {
        return Ok(());
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
        .map_err(|_| ExchangeError::Closing)?;
    let payload = crate::quic::read_payload(&mut recv, payload_len).await?;
    let frame = Frame { header, payload };
    let message = frame.message(&limits);
    // A fetch reserves its largest possible response before reading the log; the reservation
    // lasts until the response is handed to QUIC.
    let _fetch_permit = reserve_fetch(state, conn, &message).await?;
    let response = match message {
        Ok(Message::Fetch(mut fetch)) => {
            fetch.max_bytes = fetch.max_bytes.clamp(1, state.fetch_bytes_per_connection());
            handle(state, conn, Message::Fetch(fetch), started, None).await
        }
        Ok(message) => handle(state, conn, message, started, turn).await,
        Err(e) => Refusal::Payload(e).into(),
    };
    // Read after the request is handled: a `HelloAck` goes out in the version it negotiated.
    let version = conn
        .version
        .get()
        .copied()
        .unwrap_or(ProtocolVersion::OLDEST);
    respond(state, &mut send, version, header.request_id, response).await
}

/// Reads a request's frame header; `None` when the stream ends without a request to
/// answer.
async fn read_header<S: Service>(
    state: &Arc<S>,
    limits: &FrameLimits,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
) -> Result<Option<FrameHeader>, ExchangeError> {
    let mut head = [0u8; HEADER_LEN];
    recv.read_exact(&mut head).await?;
    match FrameHeader::decode(&head, limits) {
        Ok(Some(header)) => Ok(Some(header)),
        // A whole header always decodes to a header or an error.
        Ok(None) => Ok(None),
        Err(e) => {
            // Framing is lost on this stream: answer once, then stop reading it.
            let refusal = Message::from(Refusal::Frame(e));
            respond(state, send, ProtocolVersion::V1, RequestId::new(0), refusal).await?;
            let _ = recv.stop(0u32.into());
            Ok(None)
        }
    }
}

/// For a fetch, reserves the connection's fetch budget for the largest response it may get.
async fn reserve_fetch<'c, S: Service>(
    state: &Arc<S>,
    conn: &'c Connection,
    message: &Result<Message, PayloadError>,
) -> Result<Option<SemaphorePermit<'c>>, ExchangeError> {
    Ok(match message {
        Ok(Message::Fetch(fetch)) => {
            let want = fetch.max_bytes.clamp(1, state.fetch_bytes_per_connection());
            Some(
                conn.fetch_budget
                    .acquire_many(want)
                    .await
                    .map_err(|_| ExchangeError::Closing)?,
            )
        }
        _ => None,
    })
}

/// Negotiates the connection's version, once: a repeated `Hello` is refused, and the
/// connection keeps the version it negotiated first.
async fn answer_hello<S: Service>(state: &S, conn: &Connection, hello: &Hello) -> Message {
    let answered = || Message::from(Refusal::HelloRepeated);
    if conn.version.get().is_some() {
        return answered();
    }
    let version = match floe_wire::frame::negotiate(hello.min_version, hello.max_version) {
        Ok(version) => version,
        Err(e) => return Refusal::Version(e).into(),
    };
    let caller = match Caller::hello(
        state.access(),
        hello.auth_token.clone(),
        conn.certificate_name.clone(),
    )
    .await
    {
        Ok(caller) => caller,
        Err(denied) => {
            tracing::debug!(client = %hello.client_name, error = %denied, "Hello refused");
            return Refusal::Denied(denied).into();
        }
    };
    // Two Hellos racing on two streams: the first one's caller and version stand.
    if conn.caller.set(caller).is_err() || conn.version.set(version).is_err() {
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
        return answer_hello(state.as_ref(), conn, hello).await;
    }
    let (Some(caller), Some(_)) = (conn.caller.get(), conn.version.get()) else {
        return Refusal::HandshakeRequired.into();
    };
    if *state.shutdown().borrow() {
        return Refusal::ShuttingDown.into();
    }
    if let Err(denied) = caller.authorize(state.access(), &message) {
        return Refusal::Denied(denied).into();
    }
    let asked_all = matches!(&message, Message::MetadataRequest(r) if r.streams.is_empty());
    let answer = state.answer(message, caller, started, turn).await;
    match answer {
        Message::MetadataResponse(response) => {
            Message::MetadataResponse(visible(state.access(), caller, response, asked_all))
        }
        other => other,
    }
}

/// The part of a metadata answer the caller may see: a stream it may not describe is left
/// out of a listing of every stream, and answered `Forbidden` when asked for by name.
fn visible(
    access: &Access,
    caller: &Caller,
    mut response: MetadataResponse,
    asked_all: bool,
) -> MetadataResponse {
    if asked_all {
        response
            .streams
            .retain(|stream| caller.may(access, Action::Describe, &stream.name));
    } else {
        for stream in &mut response.streams {
            if !caller.may(access, Action::Describe, &stream.name) {
                stream.result = Err(floe_wire::ErrorCode::Forbidden);
            }
        }
    }
    response
}

async fn respond<S: Service>(
    state: &Arc<S>,
    send: &mut quinn::SendStream,
    version: ProtocolVersion,
    request_id: RequestId,
    response: Message,
) -> Result<(), ExchangeError> {
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
            Message::from(Refusal::Encoding).encode_chunks(version, request_id)?
        }
    };
    let mut chunks = encoded.into_chunks();
    send.write_all_chunks(&mut chunks).await?;
    send.finish()?;
    Ok(())
}

/// The connection limits a broker announces by default.
pub fn default_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_frame_bytes: 16 * 1024 * 1024,
        max_batch_bytes: 8 * 1024 * 1024,
        max_list_entries: 10_000,
        max_in_flight_bytes: 64 * 1024 * 1024,
        // Every batch a producer may have in flight is one whose retry the log recognises.
        max_in_flight_batches: floe_hot_log::PRODUCER_BATCHES_REMEMBERED as u16,
    }
}

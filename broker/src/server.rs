//! The QUIC server: accepts connections, reads one request frame per bidirectional stream,
//! answers it on the same stream.
//!
//! A connection must start with `Hello`; every later request goes on its own stream, so a
//! slow fetch never blocks a publish behind it. Memory per connection is bounded: QUIC limits
//! the concurrent streams, a semaphore bounds the request bytes being handled, and each fetch
//! response is at most the negotiated frame size — a consumer that stops reading stalls only
//! its own streams through QUIC flow control. Across connections, [`admission`] bounds how
//! many are open and the request bytes they hold together.
//!
//! Until its `Hello` is accepted a connection gets almost nothing: a QUIC receive window of
//! [`crate::tls::PRE_HELLO_RECEIVE_WINDOW`], one `Hello` of at most [`HELLO_FRAME_MAX`]
//! bytes read at a time, every other request refused from its header alone, and
//! [`ClientLimits::hello_timeout`] before it is closed.

mod admin;
pub(crate) mod admission;
mod broker;
mod error_map;
pub(crate) mod fetch;
mod order;
mod produce;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use floe_wire::BrokerId;
use floe_wire::ErrorCode;
use floe_wire::frame::{
    ConnectionLimits, Frame, FrameError, FrameHeader, FrameLimits, HEADER_LEN, Hello, HelloAck,
    Message, MessageType, PayloadError, ProtocolVersion, RequestId,
};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Semaphore, SemaphorePermit, watch};

pub use admission::ClientLimits;
use admission::{Admission, RequestBytes};

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
    fn metrics(&self) -> &Arc<Metrics>;
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

/// The largest `Hello` frame a broker reads: its two strings at their longest, and room for
/// the fixed fields.
pub(crate) const HELLO_FRAME_MAX: u32 = 2 * 65_535 + 1024;

/// Per-connection state.
#[derive(Debug)]
struct Connection {
    quic: quinn::Connection,
    admission: Arc<Admission>,
    /// Set while a `Hello` is being read or answered: one at a time.
    hello_reading: AtomicBool,
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

/// Serves the client protocol for any [`Service`] until it shuts down, within `limits`
/// (see [`admission`]).
pub(crate) async fn serve<S: Service>(
    endpoint: quinn::Endpoint,
    state: Arc<S>,
    limits: ClientLimits,
) {
    let shutdown = state.shutdown().clone();
    let admission = Admission::new(limits, state.metrics().clone());
    crate::quic::accept(endpoint, shutdown, move |connection| {
        serve_connection(connection, state.clone(), admission.clone())
    })
    .await;
}

async fn serve_connection<S: Service>(
    connection: quinn::Connection,
    state: Arc<S>,
    admission: Arc<Admission>,
) {
    let remote = connection.remote_address();
    let _slot = match admission.admit(remote.ip()) {
        Ok(slot) => slot,
        Err(refused) => {
            tracing::debug!(%remote, error = %refused, "connection refused");
            let code = ErrorCode::TooManyConnections.as_u16().into();
            connection.close(code, refused.to_string().as_bytes());
            return;
        }
    };
    tracing::debug!(%remote, "connection open");
    let hello_timeout = admission.limits().hello_timeout;
    let conn = Arc::new(Connection {
        quic: connection.clone(),
        admission,
        hello_reading: AtomicBool::new(false),
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
    let hello_deadline = tokio::time::sleep(hello_timeout);
    tokio::pin!(hello_deadline);
    loop {
        let accepted = tokio::select! {
            accepted = connection.accept_bi() => accepted,
            () = &mut hello_deadline, if conn.version.get().is_none() => {
                close_without_hello(state.as_ref(), &connection, hello_timeout);
                break;
            }
        };
        let (send, recv) = match accepted {
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
}

/// Closes a connection whose `Hello` was not accepted within `timeout`: an anonymous client
/// may not keep a place among the broker's connections.
fn close_without_hello<S: Service>(state: &S, connection: &quinn::Connection, timeout: Duration) {
    let reason = format!("no Hello accepted within {timeout:?}");
    tracing::debug!(remote = %connection.remote_address(), "{reason}");
    state
        .metrics()
        .connections_refused
        .get_or_create(&crate::metrics::ReasonLabels { reason: "hello" })
        .inc();
    let code = ErrorCode::HandshakeRequired.as_u16().into();
    connection.close(code, reason.as_bytes());
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
    let _hello = match before_hello(conn, &header) {
        Ok(hello) => hello,
        Err(refusal) => {
            // Refused from the header alone: the payload is never read.
            let _ = recv.stop(0u32.into());
            let version = ProtocolVersion::OLDEST;
            return respond(state, &mut send, version, header.request_id, refusal.into()).await;
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
    let (payload, _held) = match read_request_payload(conn, &header, &mut recv).await? {
        Ok(read) => read,
        Err(refusal) => {
            let _ = recv.stop(0u32.into());
            let version = conn
                .version
                .get()
                .copied()
                .unwrap_or(ProtocolVersion::OLDEST);
            return respond(state, &mut send, version, header.request_id, refusal.into()).await;
        }
    };
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

/// Before the connection's `Hello` is accepted, only a `Hello` is read, one at a time, and
/// at most [`HELLO_FRAME_MAX`] bytes of it; the guard it returns lets the next one in.
fn before_hello<'c>(
    conn: &'c Connection,
    header: &FrameHeader,
) -> Result<Option<HelloGate<'c>>, Refusal> {
    if conn.version.get().is_some() {
        return Ok(None);
    }
    if header.message_type != MessageType::Hello {
        return Err(Refusal::HandshakeRequired);
    }
    let frame_len = HEADER_LEN as u64 + u64::from(header.payload_len);
    if frame_len > u64::from(HELLO_FRAME_MAX) {
        return Err(Refusal::Frame(FrameError::FrameTooLarge {
            frame_len,
            limit: HELLO_FRAME_MAX,
        }));
    }
    if conn.hello_reading.swap(true, Ordering::AcqRel) {
        return Err(Refusal::HelloPending);
    }
    Ok(Some(HelloGate(&conn.hello_reading)))
}

/// A `Hello` being read or answered; dropping it lets another one be read.
struct HelloGate<'c>(&'c AtomicBool);

impl Drop for HelloGate<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The bytes a request holds while it is read and handled: its connection's and the
/// broker's.
struct Held<'c> {
    _connection: SemaphorePermit<'c>,
    _broker: RequestBytes<'c>,
}

/// Reads a request's payload within the byte budgets: nothing is reserved until its first
/// bytes arrive; then the connection's budget, then the broker's (waiting at most
/// `request_wait`), then the rest must arrive within `payload_timeout`. A `Hello`, small
/// and alone on its connection (see [`before_hello`]), reserves nothing. The inner error is
/// the refusal to answer with.
async fn read_request_payload<'c>(
    conn: &'c Connection,
    header: &FrameHeader,
    recv: &mut quinn::RecvStream,
) -> Result<Result<(bytes::Bytes, Option<Held<'c>>), Refusal>, ExchangeError> {
    let len = header.payload_len as usize;
    if len == 0 || header.message_type == MessageType::Hello {
        return Ok(Ok((crate::quic::read_payload(recv, len).await?, None)));
    }
    let first = crate::quic::first_chunk(recv, len).await?;
    let connection = conn
        .in_flight
        .acquire_many(header.payload_len)
        .await
        .map_err(|_| ExchangeError::Closing)?;
    let admission = conn.admission.as_ref();
    let limits = admission.limits();
    let Some(broker) = admission.reserve(header.payload_len).await else {
        return Ok(Err(Refusal::RequestBytes {
            limit: limits.request_bytes,
            waited: limits.request_wait,
        }));
    };
    let rest = crate::quic::read_rest(first, recv, len);
    match tokio::time::timeout(limits.payload_timeout, rest).await {
        Ok(payload) => Ok(Ok((
            payload?,
            Some(Held {
                _connection: connection,
                _broker: broker,
            }),
        ))),
        Err(_) => Ok(Err(Refusal::PayloadTimeout {
            len: header.payload_len,
            waited: limits.payload_timeout,
        })),
    }
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
    // Now the client may send what its connection's budget allows.
    conn.quic.set_receive_window(quinn::VarInt::from_u32(
        crate::tls::CONNECTION_RECEIVE_WINDOW,
    ));
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

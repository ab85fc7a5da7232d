//! The peer port: brokers send each other replication messages over QUIC with mutual TLS,
//! on a port of their own, apart from clients.
//!
//! Each broker keeps one outgoing connection per peer it talks to, with one unidirectional
//! stream carrying its messages in order; the answers come back on the peer's own outgoing
//! connection. A stream starts with a `Hello` whose name is `floe-peer <broker id>`, which
//! tells the receiver who sends; then `ReplicaAppend`, `ReplicaAck`, `ReplicaMismatch` and
//! `ReplicaStale` frames follow (see `docs/protocol.md`). Delivery is best effort: a full
//! queue or a broken connection drops messages, and the replication protocol resends what
//! matters.
//!
//! Only certificates signed by the cluster's CA are accepted, in both directions, and a
//! broker is the broker its certificate names ([`crate::peer_identity`]): a connection whose
//! certificate names none, or with a stream whose `Hello` claims another broker, is closed
//! with [`IDENTITY_REFUSED`] and counted; a dialed peer whose certificate names another broker
//! fails its handshake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_client::rest::Controlplane;
use floe_replication::WireBatch;
use floe_wire::frame::{
    EncodeError, Frame, FrameError, FrameHeader, FrameLimits, HEADER_LEN, Hello, Message,
    MessageType, PayloadError, ProtocolVersion, RequestId,
};
use floe_wire::{BrokerId, Endpoint, PartitionId, StreamName};
use tokio::sync::{mpsc, watch};

use crate::budget::ByteBudget;
use crate::peer_identity::{IDENTITY_REFUSED, MismatchCounter, MismatchReason};
use floe_wire::ErrorChain;

/// The `Hello` name prefix that identifies a sending broker.
const PEER_NAME: &str = "floe-peer ";
/// Frames queued for one peer before new ones are dropped.
const QUEUE_FRAMES: usize = 1024;
/// Bytes of frames queued for one peer (not yet handed to QUIC) before new frames larger
/// than [`SMALL_FRAME`] are dropped: appends of up to a megabyte would otherwise let the
/// frame count alone hold a gigabyte behind a slow link.
const QUEUE_BYTES: usize = 64 << 20;
/// Frames up to this size (acks, heartbeats, mismatches) are never dropped for bytes.
const SMALL_FRAME: usize = 4096;
/// Pause before connecting to a peer again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// Why a peer could not be reached, or a peer stream was dropped. Logged, never sent: the
/// replication protocol resends what matters.
#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("no peer address for broker {0}")]
    NoAddress(u32),
    #[error("cannot resolve {address}")]
    Resolve {
        address: Endpoint,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} resolves to nothing")]
    NoSocketAddress(Endpoint),
    #[error("cannot connect to {address}")]
    Connect {
        address: Endpoint,
        #[source]
        source: quinn::ConnectError,
    },
    #[error("the connection to a peer failed")]
    Connection(#[from] quinn::ConnectionError),
    #[error("cannot write to a peer")]
    Write(#[from] quinn::WriteError),
    #[error("cannot encode the peer Hello")]
    Encode(#[from] EncodeError),
    #[error("cannot read a peer stream")]
    Read(#[from] quinn::ReadExactError),
    #[error(transparent)]
    Payload(#[from] crate::quic::PayloadError),
    #[error("a malformed frame header")]
    Header(#[from] FrameError),
    #[error("a malformed frame payload")]
    Message(#[from] PayloadError),
    #[error("a peer stream from `{0}`, which names no broker")]
    NotAPeer(String),
    #[error("a peer whose certificate names broker {certified} claims to be broker {claimed}")]
    Impostor { claimed: u32, certified: u32 },
    #[error("a peer stream starting with {0:?}")]
    NoHello(MessageType),
    #[error("not a replication message: {0:?}")]
    NotReplication(floe_replication::PeerError),
}

/// One peer's queue: its frames, and the bytes they hold.
#[derive(Debug, Clone)]
struct Queue {
    frames: mpsc::Sender<Vec<Bytes>>,
    budget: Arc<ByteBudget>,
}

fn frame_len(frame: &[Bytes]) -> usize {
    frame.iter().map(Bytes::len).sum()
}

/// This broker's side of the peer port.
#[derive(Debug)]
pub(crate) struct Peers {
    me: BrokerId,
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    controlplane: Controlplane,
    /// Peer addresses, as the controlplane lists them.
    addresses: Mutex<HashMap<BrokerId, Endpoint>>,
    /// Client endpoints of the same brokers, learnt with the peer addresses: a replica that
    /// does not lead names its leader's to clients.
    client_endpoints: Mutex<HashMap<BrokerId, Endpoint>>,
    /// Each peer's queue of encoded frames (as chunks).
    queues: Mutex<HashMap<BrokerId, Queue>>,
    shutdown: watch::Receiver<bool>,
}

impl Peers {
    pub(crate) fn new(
        me: BrokerId,
        endpoint: quinn::Endpoint,
        client: quinn::ClientConfig,
        controlplane: Controlplane,
        shutdown: watch::Receiver<bool>,
    ) -> Peers {
        Peers {
            me,
            endpoint,
            client,
            controlplane,
            addresses: Mutex::new(HashMap::new()),
            client_endpoints: Mutex::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            shutdown,
        }
    }

    /// Queues `message` for `to`; dropped when the peer's queue is full.
    pub(crate) fn send(self: &Arc<Self>, to: BrokerId, message: &Message) {
        // As chunks: the record batches go to QUIC as the log read them, uncopied.
        let frame = match message.encode_chunks(ProtocolVersion::V1, RequestId::new(0)) {
            Ok(frame) => frame.into_chunks(),
            Err(e) => {
                tracing::error!(error = %e, "could not encode a peer message");
                return;
            }
        };
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            queues
                .entry(to)
                .or_insert_with(|| {
                    let (frames, rx) = mpsc::channel(QUEUE_FRAMES);
                    let budget = Arc::new(ByteBudget::new(QUEUE_BYTES, SMALL_FRAME));
                    tokio::spawn(send_loop(self.clone(), to, rx, budget.clone()));
                    Queue { frames, budget }
                })
                .clone()
        };
        let len = frame_len(&frame);
        match queue.budget.try_take(len) {
            Ok(_) => {
                if queue.frames.try_send(frame).is_err() {
                    queue.budget.release(len);
                    tracing::trace!(peer = to.get(), "peer queue full (frames); message dropped");
                }
            }
            Err(held) => {
                tracing::trace!(
                    peer = to.get(),
                    held,
                    "peer queue full (bytes); message dropped"
                );
            }
        }
    }

    /// Where `peer` listens, from the controlplane's broker list (refreshed on a miss).
    async fn address(&self, peer: BrokerId) -> Option<Endpoint> {
        if let Some(known) = self.known(peer) {
            return Some(known);
        }
        self.refresh().await;
        self.known(peer)
    }

    /// Where clients reach broker `id`, if known. Peer traffic learns every broker's
    /// endpoints; an unknown id only happens for a broker this one has not exchanged with.
    pub(crate) fn client_endpoint(&self, id: BrokerId) -> Option<Endpoint> {
        let endpoints = self
            .client_endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        endpoints.get(&id).cloned()
    }

    /// Reads every broker's endpoints from the controlplane.
    async fn refresh(&self) {
        match self.controlplane.brokers().await {
            Ok(list) => {
                let mut addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
                let mut clients = self
                    .client_endpoints
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                for broker in list.brokers {
                    addresses.insert(broker.broker_id, broker.peer_endpoint);
                    clients.insert(broker.broker_id, broker.client_endpoint);
                }
            }
            Err(e) => tracing::debug!(error = %e, "listing brokers for their endpoints"),
        }
    }

    fn known(&self, peer: BrokerId) -> Option<Endpoint> {
        let addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        addresses.get(&peer).cloned()
    }

    fn forget(&self, peer: BrokerId) {
        let mut addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        addresses.remove(&peer);
    }
}

/// Carries `peer`'s queue to it, connecting (again) as needed, until shutdown.
async fn send_loop(
    peers: Arc<Peers>,
    peer: BrokerId,
    mut queue: mpsc::Receiver<Vec<Bytes>>,
    budget: Arc<ByteBudget>,
) {
    let mut shutdown = peers.shutdown.clone();
    loop {
        let connected = tokio::select! {
            connected = connect(&peers, peer) => connected,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match connected {
            Ok(mut stream) => loop {
                let frame = tokio::select! {
                    frame = queue.recv() => frame,
                    _ = shutdown.wait_for(|s| *s) => return,
                };
                let Some(mut frame) = frame else { return };
                let len = frame_len(&frame);
                let written = stream.write_all_chunks(&mut frame).await;
                budget.release(len);
                if let Err(e) = written {
                    tracing::debug!(peer = peer.get(), error = %e, "peer stream broke; reconnecting");
                    break;
                }
            },
            Err(e) => {
                tracing::debug!(peer = peer.get(), error = %ErrorChain(&e), "cannot reach peer");
                peers.forget(peer);
            }
        }
        // Whatever queued meanwhile is stale by the time a connection is back.
        while let Ok(frame) = queue.try_recv() {
            budget.release(frame_len(&frame));
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

async fn connect(peers: &Peers, peer: BrokerId) -> Result<quinn::SendStream, PeerError> {
    let address = peers
        .address(peer)
        .await
        .ok_or(PeerError::NoAddress(peer.get()))?;
    let socket = tokio::net::lookup_host(address.as_str())
        .await
        .map_err(|source| PeerError::Resolve {
            address: address.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| PeerError::NoSocketAddress(address.clone()))?;
    // The peer's certificate must name the broker dialed; host names play no part.
    let connection = peers
        .endpoint
        .connect_with(
            peers.client.clone(),
            socket,
            &crate::peer_identity::server_name(peer),
        )
        .map_err(|source| PeerError::Connect {
            address: address.clone(),
            source,
        })?
        .await?;
    let mut stream = connection.open_uni().await?;
    let hello = Message::Hello(Hello {
        min_version: 1,
        max_version: 1,
        client_name: format!("{PEER_NAME}{}", peers.me.get()),
        auth_token: None,
    });
    let mut frame = BytesMut::new();
    hello.encode(ProtocolVersion::V1, RequestId::new(0), &mut frame)?;
    stream.write_all(&frame).await?;
    tracing::debug!(peer = peer.get(), %address, "peer connection open");
    Ok(stream)
}

/// Where the peer port hands the replication messages it receives: the replicas of the
/// partitions they name.
pub(crate) trait Inbox: Send + Sync + 'static {
    fn deliver(
        &self,
        from: BrokerId,
        stream: &StreamName,
        partition: PartitionId,
        message: floe_replication::Message<WireBatch>,
    );
}

/// Accepts peer connections until `shutdown`; every stream's messages go to `inbox`.
/// Peers refused for their identity are counted in `mismatches`.
pub(crate) async fn serve<I: Inbox>(
    endpoint: quinn::Endpoint,
    limits: FrameLimits,
    inbox: Arc<I>,
    mismatches: MismatchCounter,
    shutdown: watch::Receiver<bool>,
) {
    crate::quic::accept(endpoint, shutdown, move |connection| {
        serve_connection(connection, limits, inbox.clone(), mismatches.clone())
    })
    .await;
}

async fn serve_connection<I: Inbox>(
    connection: quinn::Connection,
    limits: FrameLimits,
    inbox: Arc<I>,
    mismatches: MismatchCounter,
) {
    let remote = connection.remote_address();
    let certified = match crate::peer_identity::broker_of_connection(&connection) {
        Ok(id) => id,
        Err(e) => {
            mismatches(MismatchReason::NoIdentity);
            tracing::warn!(%remote, error = %e, "peer refused: its certificate names no broker");
            connection.close(IDENTITY_REFUSED.into(), b"the certificate names no broker");
            return;
        }
    };
    while let Ok(stream) = connection.accept_uni().await {
        let (inbox, connection, mismatches) =
            (inbox.clone(), connection.clone(), mismatches.clone());
        tokio::spawn(async move {
            match serve_stream(stream, &limits, inbox.as_ref(), certified).await {
                Ok(()) => {}
                Err(e @ PeerError::Impostor { .. }) => {
                    mismatches(MismatchReason::Claim);
                    tracing::warn!(%remote, error = %e, "peer refused: it claims another broker");
                    connection.close(IDENTITY_REFUSED.into(), b"not the broker named");
                }
                Err(e) => {
                    tracing::debug!(%remote, error = %ErrorChain(&e), "peer stream ended");
                }
            }
        });
    }
}

/// Delivers a stream's messages as sent by `certified`, the broker the connection's
/// certificate names, once its `Hello` claims the same.
async fn serve_stream<I: Inbox>(
    mut stream: quinn::RecvStream,
    limits: &FrameLimits,
    inbox: &I,
    certified: BrokerId,
) -> Result<(), PeerError> {
    let claimed = match read_message(&mut stream, limits).await? {
        Some(Message::Hello(hello)) => {
            sender(&hello.client_name).ok_or(PeerError::NotAPeer(hello.client_name))?
        }
        Some(other) => return Err(PeerError::NoHello(other.message_type())),
        None => return Ok(()),
    };
    if claimed != certified {
        return Err(PeerError::Impostor {
            claimed: claimed.get(),
            certified: certified.get(),
        });
    }
    let from = certified;
    while let Some(message) = read_message(&mut stream, limits).await? {
        match floe_replication::from_wire(message) {
            Ok((stream_name, partition, message)) => {
                inbox.deliver(from, &stream_name, partition, message);
            }
            Err(e) => return Err(PeerError::NotReplication(e)),
        }
    }
    Ok(())
}

/// The broker id in a peer stream's `Hello` name.
fn sender(name: &str) -> Option<BrokerId> {
    name.strip_prefix(PEER_NAME)?
        .parse()
        .ok()
        .map(BrokerId::new)
}

/// The next whole message on `stream`, or `None` at its clean end.
async fn read_message(
    stream: &mut quinn::RecvStream,
    limits: &FrameLimits,
) -> Result<Option<Message>, PeerError> {
    let mut head = [0u8; HEADER_LEN];
    match stream.read_exact(&mut head).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // A whole header always decodes to a header or an error.
    let Some(header) = FrameHeader::decode(&head, limits)? else {
        return Ok(None);
    };
    let payload = crate::quic::read_payload(stream, header.payload_len as usize).await?;
    let frame = Frame { header, payload };
    Ok(Some(frame.message(limits)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sender_is_named_in_the_hello() {
        assert_eq!(sender("floe-peer 7"), Some(BrokerId::new(7)));
        assert_eq!(sender("floe-peer x"), None);
        assert_eq!(sender("floe-cli"), None);
    }
}

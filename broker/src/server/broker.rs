//! The broker's answers on the client port: the handles a request may use, and which
//! request goes where (produce, fetch, metadata, stream administration).

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_wire::frame::{ConnectionLimits, Message};
use floe_wire::{BrokerId, Endpoint};
use tokio::sync::watch;

use super::{Refusal, Service, Turn, admin, fetch, produce};
use crate::auth::{Access, Caller};
use crate::disk::DiskWatch;
use crate::history_read_cap::HistoryReadCap;
use crate::metrics::Metrics;
use crate::partitions::Partitions;
use crate::replication::Replication;
use crate::session::Session;
use crate::tiering::Tiering;

/// A broker's client-port service: the handles its requests use, and its limits.
#[derive(Debug)]
pub(crate) struct Broker {
    pub(super) partitions: Arc<Partitions>,
    pub(super) tiering: Arc<Tiering>,
    /// Publishes are refused (retryable) while the disk is past its high-water mark.
    pub(super) disk: Arc<DiskWatch>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: ConnectionLimits,
    pub(super) broker_id: BrokerId,
    /// The controlplane session, when one manages this broker: creates and deletes go to it.
    pub(super) session: Option<Arc<Session>>,
    /// Replicated partitions' drivers and peers (managed brokers with a peer port only).
    pub(super) replication: Option<Replication>,
    /// `host:port` clients should use to reach this broker.
    pub(super) advertised: Endpoint,
    /// Longest a fetch may wait on the tail, whatever the client asks.
    pub(super) fetch_wait_max: Duration,
    /// Set when shutting down: new requests get `ShuttingDown`.
    pub(super) shutdown: watch::Receiver<bool>,
    /// Bytes of fetch responses a connection may hold at once (read from the log and not yet
    /// handed to QUIC). A consumer that stops reading stalls at this bound.
    pub(super) fetch_bytes_per_connection: u32,
    /// The cap on history reads, shared by every fetch.
    pub(super) history_cap: HistoryReadCap,
    /// How callers are checked.
    pub(super) access: Arc<Access>,
}

/// What a [`Broker`] is made of.
#[derive(Debug)]
pub(crate) struct BrokerParts {
    pub partitions: Arc<Partitions>,
    pub tiering: Arc<Tiering>,
    pub disk: Arc<DiskWatch>,
    pub metrics: Arc<Metrics>,
    pub limits: ConnectionLimits,
    pub broker_id: BrokerId,
    pub session: Option<Arc<Session>>,
    pub replication: Option<Replication>,
    pub advertised: Endpoint,
    pub fetch_wait_max: Duration,
    pub shutdown: watch::Receiver<bool>,
    pub fetch_bytes_per_connection: u32,
    pub history_cap: HistoryReadCap,
    pub access: Arc<Access>,
}

impl Broker {
    pub(crate) fn new(parts: BrokerParts) -> Broker {
        Broker {
            partitions: parts.partitions,
            tiering: parts.tiering,
            disk: parts.disk,
            metrics: parts.metrics,
            limits: parts.limits,
            broker_id: parts.broker_id,
            session: parts.session,
            replication: parts.replication,
            advertised: parts.advertised,
            fetch_wait_max: parts.fetch_wait_max,
            shutdown: parts.shutdown,
            fetch_bytes_per_connection: parts.fetch_bytes_per_connection.max(1),
            history_cap: parts.history_cap,
            access: parts.access,
        }
    }
}

impl Service for Broker {
    fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    fn fetch_bytes_per_connection(&self) -> u32 {
        self.fetch_bytes_per_connection
    }

    fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn server_id(&self) -> BrokerId {
        self.broker_id
    }

    fn shutdown(&self) -> &watch::Receiver<bool> {
        &self.shutdown
    }

    fn access(&self) -> &Access {
        &self.access
    }

    async fn answer(
        self: &Arc<Self>,
        message: Message,
        caller: &Caller,
        started: Instant,
        turn: Option<Turn<'_>>,
    ) -> Message {
        let broker: &Broker = self;
        match message {
            Message::MetadataRequest(request) => admin::metadata(broker, request),
            Message::CreateStream(request) => admin::create_stream(broker, caller, *request).await,
            Message::DeleteStream(request) => admin::delete_stream(broker, caller, request).await,
            Message::RepairPartition(request) => admin::repair_partition(broker, request).await,
            Message::Produce(request) => produce::produce(broker, request, started, turn).await,
            Message::Fetch(request) => fetch::fetch(broker, request, started).await,
            other => Refusal::NotARequest(other.message_type()).into(),
        }
    }
}

//! `floe-broker`: the broker process, and the read replica. It assembles the hot log, the
//! tier and replication behind QUIC servers.
//!
//! Layers, bottom up; a module imports only from layers below its own:
//!
//! 1. The ground: [`quic`] (endpoints, the accept loop), [`tls`], [`peer_identity`] (the
//!    broker a peer's certificate names, and this broker's own), [`metrics`], [`catalog`]
//!    (the local list of streams), [`disk`] (the high-water mark), the clock and byte budgets.
//! 2. The partition: one partition's log, tier uploader and the producer's and consumer's
//!    side of its replica (`partition`), and every partition held here ([`partitions`]).
//! 3. Services, each behind a narrow handle: the replication drivers (`replication`, with
//!    the peer port's transport `peer`), tiering ([`tiering`]), the controlplane session
//!    ([`session`]) and the cap on history reads ([`history_read_cap`]).
//! 4. The QUIC server on the client protocol (`server`): connections, framing, and the
//!    broker's answers to produce, fetch, metadata and administration.
//! 5. Assembly: [`run`] (start and stop a broker), [`read_replica`], [`dev`] (the
//!    zero-configuration embedded default).

pub mod auth;
mod budget;
pub mod catalog;
mod clock;
pub mod dev;
pub mod disk;
pub mod history_read_cap;
mod lease;
pub mod metrics;
pub mod operators;
mod partition;
pub mod partitions;
mod peer;
pub mod peer_identity;
pub mod quic;
pub mod read_replica;
mod replication;
pub mod run;
mod server;
pub mod session;
mod state_file;
pub mod tiering;
pub mod tls;

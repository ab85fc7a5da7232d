//! `floe-controlplane`: Floe's controlplane — the REST API under `/v1`, the metadata store
//! (SQLite embedded, PostgreSQL in production), placement of partition replicas across
//! brokers, broker leases, elections of replicated partitions' leaders, and leader election
//! among several controlplanes.
//!
//! [`Controlplane::start`] runs one in the current tokio runtime (the `floe-controlplane`
//! binary, or `floe-broker dev` in-process) and returns a [`Running`] handle. The request and
//! response types are in [`floe_wire::admin`]. See `docs/controlplane.md`.

mod api;
mod cluster;
mod config;
mod election;
mod partition_election;
pub mod placement;
mod reconcile;
mod running;
pub mod store;

pub use config::{Config, Database};
pub use running::{Controlplane, Running, StartError};

//! `floe-controlplane`: Floe's controlplane — the REST API under `/v1`, the metadata store
//! (SQLite embedded, PostgreSQL in production), placement of partition replicas across
//! brokers, broker leases, elections of replicated partitions' leaders, leader election
//! among several controlplanes, and the autoscaler of read replicas with its drivers.
//!
//! [`Controlplane::start`] runs one in the current tokio runtime (the `floe-controlplane`
//! binary, or `floe-broker dev` in-process) and returns a [`Running`] handle. The request and
//! response types are in [`floe_wire::admin`]. See `docs/controlplane.md`.

mod api;
pub mod auth;
pub mod autoscale;
mod autoscale_loop;
mod cluster;
mod config;
pub mod config_file;
pub mod driver;
mod election;
mod groups;
pub mod logging;
mod metrics;
mod partition_election;
pub mod peer_ca;
pub mod placement;
mod reconcile;
mod running;
pub mod store;
pub mod tls;

pub use auth::BootstrapTokens;
pub use config::{Config, Database};
pub use driver::ReadReplicaDriverConfig;
pub use metrics::BuildLabels;
pub use running::{Controlplane, Running, StartError};
pub use tls::TlsFiles;

//! `floe-broker`: the broker process. It assembles the hot log and the tier behind a QUIC
//! server.
//!
//! Layers, bottom up: [`partitions`] (one hot log and tier uploader per partition, from the
//! local [`catalog`]), [`tiering`] (object storage, uploads, tiered reads), [`server`] (QUIC:
//! one request per stream), [`run`] (start and stop), [`dev`] (the zero-configuration
//! embedded default).

mod budget;
pub mod catalog;
pub mod dev;
pub mod history_rate;
pub mod managed;
pub mod metrics;
pub mod partitions;
pub mod peer;
pub mod read_replica;
pub mod replica;
pub mod run;
pub mod server;
pub mod tiering;
pub mod tls;

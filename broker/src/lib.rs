//! `floe-broker`: the broker process. It assembles the hot log behind a QUIC server.

pub mod catalog;
pub mod metrics;
pub mod tls;

//! `floe-client`: the Rust client library of Floe. A library only: the `floe` command-line
//! tool is the `floe-cli` package (`cli/`), built on this crate.
//!
//! - [`Client`]: one QUIC connection to a broker (TLS trusting one CA, `Hello`, reconnection
//!   on demand), requests one per stream, and stream administration.
//! - [`Producer`]: batching, idempotent, ordered publishing with retries and bounded memory.
//! - [`Consumer`]: ordered, validated, long-polling reads of one partition that resume
//!   without gap or duplicate after a lost connection.
//! - [`rest::Controlplane`]: the controlplane's REST API.
//!
//! The library depends on `floe-wire` alone among Floe's crates: every byte it sends or
//! reads is encoded and decoded there, and every retry waits `floe_wire::Backoff`'s
//! exponential backoff with full jitter. Pure logic (batching, sequence windows,
//! partitioning, decoding fetched records) is kept apart from the code that touches sockets
//! and clocks, and is tested without either.
//!
//! ```no_run
//! use floe_client::{AckMode, Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition};
//! use floe_client::{PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName, StreamSettings};
//!
//! # async fn demo() -> Result<(), floe_client::Error> {
//! let client = Client::connect(ClientConfig::from_default_profile()?).await?;
//! let stream = StreamName::new("demo").expect("a valid name");
//! client.create_stream(&stream, 1, AckMode::Leader, StreamSettings::default()).await?;
//!
//! let producer = Producer::new(&client, stream.clone(), ProducerConfig::default()).await?;
//! let offset = producer.send(ProducerRecord::new("hello")).await?.await?;
//!
//! let mut consumer = Consumer::new(
//!     client.clone(),
//!     stream,
//!     PartitionId::new(0),
//!     FetchPosition::Offset(offset),
//!     ConsumerConfig::default(),
//! );
//! assert_eq!(&consumer.next().await?.value[..], b"hello");
//! # Ok(()) }
//! ```

mod client;
mod config;
mod consumer;
pub mod datagrams;
mod error;
mod group;
mod producer;
mod record;
pub mod rest;

pub use client::Client;
pub use config::{
    ClientCertificate, ClientConfig, ProfileLocation, current_profile, default_profile_path,
    read_profile, resolve_profile,
};
pub use consumer::{Consumer, ConsumerConfig};
pub use error::{ConfigError, ConnectFailure, Error, ProtocolViolation};
pub use floe_wire::admin::GroupPartition;
pub use group::{GroupConfig, GroupConsumer, GroupRecord};
pub use producer::{
    DEFAULT_IN_FLIGHT_BATCHES, Deliveries, Delivery, MAX_IN_FLIGHT_BATCHES, Producer,
    ProducerConfig, TimedDeliveries, TimedDelivery, partition_for_key,
};
pub use record::{ConsumedRecord, ProducerRecord};

pub use floe_wire::frame::{
    ConnectionLimits, DamagedRange, ErrorCode, ErrorDetails, FetchPosition, PartitionMetadata,
    RepairPartitionResponse, RetryClass, StreamInfo, StreamMetadata, StreamSettings, UploadBacklog,
};
pub use floe_wire::{AckMode, Offset, PartitionId, StreamName, StreamNameError};

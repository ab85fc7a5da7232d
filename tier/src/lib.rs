//! `floe-tier`: offload of sealed segments to object storage, the tier manifest, and cached
//! ranged reads of tiered data.
//!
//! - [`TierStore`]: the object store (local directory or S3-compatible) and a key prefix.
//! - [`segment`]: the segment object format (data, footer, trailer) and its upload.
//! - [`manifest`]: the manifest log in the bucket, committed with put-if-absent.
//!
//! The crate knows nothing of the broker or sockets; a stream is just the string it is given.
//! Layouts are documented in `docs/tiering.md`.

mod error;
mod layout;
pub mod manifest;
mod metrics;
pub mod segment;
mod store;

pub use error::{CorruptReason, TierError};
pub use layout::{PartitionPath, SegmentName};
pub use metrics::{TierMetrics, TierMetricsSnapshot};
pub use store::{CreateOutcome, ListedObject, MultipartWriter, S3Settings, TierStore};

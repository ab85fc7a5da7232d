//! `floe-tier`: offload of sealed segments to object storage, the tier manifest, and cached
//! ranged reads of tiered data.
//!
//! - [`TierStore`]: the object store (local directory or S3-compatible) and a key prefix.
//! - [`segment`]: the segment object format (data, footer, trailer) and its upload.
//! - [`manifest`]: the manifest log in the bucket, committed with put-if-absent.
//! - [`Uploader`]: uploads what the hot log sealed below the high watermark, then commits.
//! - [`retention`] and [`Collector`]: removal by bytes and age, and deletion of unreferenced
//!   objects after a grace period.
//! - [`TierReader`]: reads whole batches from the tier through a chunk cache.
//!
//! The crate knows nothing of the broker or sockets; a stream is just the string it is given.
//! Layouts are documented in `docs/tiering.md`.

mod direct;
mod error;
mod layout;
pub mod manifest;
mod metrics;
pub mod segment;
mod store;

pub use direct::DirectObject;
pub use error::{CorruptReason, TierError};
pub use layout::{PartitionPath, SegmentName};
pub use metrics::{RequestKind, RequestObserver, TierMetrics, TierMetricsSnapshot};
pub use store::{
    CreateOutcome, ListedObject, MultipartWriter, S3Settings, TierStore, request_retry,
};

mod collector;
pub mod reader;
pub mod retention;
mod retry;
mod uploader;

pub use collector::{CollectReport, Collector, delete_stream};
pub use reader::{DiskCacheConfig, ReaderConfig, TierRead, TierReader};
pub use retention::{TierRetention, apply_tier_retention, plan_removal};
pub use retry::RetryPolicy;
pub use segment::{UploadSettings, YieldToSyncs};
pub use uploader::{
    Backlog, BeforeCommit, COMMIT_WINDOW_MS_DEFAULT, Fence, PlannedUpload, UploadClock,
    UploadReport, Uploader, UploaderConfig, plan_uploads,
};

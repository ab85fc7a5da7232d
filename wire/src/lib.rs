//! `floe-wire`: the single source of truth for every format that crosses a process boundary.
//!
//! Today that is the record-batch format ([`batch`]): the unit producers send, the log stores,
//! replication ships and tiering uploads — the same bytes all the way; and the QUIC client
//! protocol ([`frame`]): frames, messages and error codes, with the names they carry
//! ([`StreamName`], [`PartitionId`], [`Endpoint`], …); and the JSON types of the controlplane's
//! REST API ([`admin`]). Pure: no I/O, no clock, no allocation
//! beyond what an encoder is asked to produce or a decoder's input justifies. The
//! [`BufferPool`] lets producers and brokers reuse the allocations of batches and payloads.
//! [`Backoff`] is the one retry schedule (exponential, full jitter) of the client and the
//! tier: it lives here, pure like the rest, because both depend on this crate.

mod ack_mode;
pub mod admin;
pub mod auth;
mod backoff;
pub mod batch;
mod broker_id;
mod buffer_pool;
mod endpoint;
pub mod frame;
mod leader_epoch;
mod offset;
mod partition_id;
pub mod profile;
mod report;
mod stream_name;
pub mod units;

pub use ack_mode::{AckMode, UnknownAckMode};
pub use backoff::{Backoff, Jitter};
pub use batch::{
    BatchBuilder, BatchError, BatchHeader, ControlKind, Record, RecordBatch, RecordFault,
};
pub use broker_id::BrokerId;
pub use buffer_pool::BufferPool;
pub use endpoint::{Endpoint, EndpointError};
pub use frame::{ErrorCode, Frame, FrameError, FrameLimits, Message, RetryClass};
pub use leader_epoch::{EpochOutOfRange, LeaderEpoch};
pub use offset::Offset;
pub use partition_id::PartitionId;
pub use profile::ClientProfile;
pub use report::ErrorChain;
pub use stream_name::{StreamName, StreamNameError};

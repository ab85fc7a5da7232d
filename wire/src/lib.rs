//! `floe-wire`: the single source of truth for every format that crosses a process boundary.
//!
//! Today that is the record-batch format ([`batch`]): the unit producers send, the log stores,
//! replication ships and tiering uploads — the same bytes all the way. Pure: no I/O, no clock,
//! no allocation beyond what an encoder is asked to produce.

pub mod batch;
mod offset;
pub mod profile;

pub use batch::{BatchBuilder, BatchError, BatchHeader, Record, RecordBatch, RecordFault};
pub use offset::Offset;
pub use profile::ClientProfile;

//! Floe's quorum replication: the sans-IO state machine of one partition replica
//! ([`Replica`]), its peer messages ([`Message`]) and what it asks of its driver
//! ([`Output`]). `docs/replication.md` states the protocol and why it is safe; the seeded
//! simulator in `tests/simulator/` checks it under loss, reordering, partitions and
//! crashes.

mod history;
mod log_binding;
mod machine;
mod message;
mod peer;

pub use history::{EpochStart, LogView};
pub use log_binding::{WireBatch, log_view, split_batches};
pub use machine::{Config, Replica};
pub use message::{Batch, Message, Output, ReadLog, ReplicaId};
pub use peer::{PeerError, from_wire, to_wire};

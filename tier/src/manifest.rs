//! The tier manifest: a log of versions in the bucket saying which segment objects hold a
//! partition's tiered data. [`ManifestState`] is the pure core (what a change does, and
//! whether it may); [`ManifestLog`] reads and writes the versions and checkpoints.

mod file;
mod log;
mod state;

pub use log::{CHECKPOINT_INTERVAL_DEFAULT, ManifestLog};
pub use state::{
    Change, ChangeError, MANIFEST_FORMAT, ManifestState, PENDING_DELETION_KEEP_MS, PendingDeletion,
    TieredSegment,
};

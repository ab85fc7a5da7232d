//! A tiered segment object: the segment's batches exactly as stored, then a footer that
//! indexes them, then a fixed-size trailer. Layout in `docs/tiering.md`.

pub(crate) mod footer;
pub(crate) mod upload;

pub use footer::{FOOTER_VERSION, Footer, FooterEntry, TRAILER_LEN, TRAILER_MAGIC};
pub use upload::{UploadSettings, UploadedSegment, YieldToSyncs, upload_segment};

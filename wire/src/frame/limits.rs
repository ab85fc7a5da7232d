//! Limits that bound what a peer may make us buffer and allocate.
//!
//! [`FrameLimits`] is what a decoder enforces on every frame it reads; [`ConnectionLimits`]
//! is what a broker announces in `HelloAck`, and what both sides then enforce for the rest of
//! the connection.

use crate::batch;

use super::header::MAX_FRAME_BYTES;

/// Room a frame needs around one batch of `max_batch_bytes`: the frame header and the
/// largest Produce or FetchResponse fields that precede the batches, with margin. A
/// connection's `max_frame_bytes` must leave this much room above its `max_batch_bytes`, so
/// the largest allowed batch always fits in a frame.
pub const FRAME_OVERHEAD_BYTES: u32 = 1024;

/// What a decoder accepts. Every value is also capped by the format's own maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest frame, header included. Checked from the header alone, before the payload is
    /// read or any buffer is sized for it. Capped at [`MAX_FRAME_BYTES`].
    pub max_frame_bytes: u32,
    /// Largest record batch a Produce may carry. Capped at [`batch::MAX_BATCH_BYTES`].
    pub max_batch_bytes: u32,
    /// Most entries any list in a payload may declare (stream names, partitions, batches,
    /// results). Bounds the memory a decoded message takes beyond its wire bytes.
    pub max_list_entries: u32,
}

impl FrameLimits {
    /// The format's own maxima: the most any decoder will ever accept.
    pub const FORMAT_MAX: FrameLimits = FrameLimits {
        max_frame_bytes: MAX_FRAME_BYTES,
        max_batch_bytes: batch::MAX_BATCH_BYTES,
        max_list_entries: MAX_FRAME_BYTES,
    };

    /// The frame limit after the format's cap.
    pub fn frame_bytes(&self) -> u32 {
        self.max_frame_bytes.min(MAX_FRAME_BYTES)
    }

    /// The batch limit after the format's cap.
    pub fn batch_bytes(&self) -> u32 {
        self.max_batch_bytes.min(batch::MAX_BATCH_BYTES)
    }
}

/// The limits a broker announces in `HelloAck`. Both directions of the connection obey them
/// from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Largest frame either side may send, header included.
    pub max_frame_bytes: u32,
    /// Largest record batch a Produce may carry.
    pub max_batch_bytes: u32,
    /// Most entries any list in a payload may hold.
    pub max_list_entries: u32,
    /// Most bytes of requests a client may have sent and not yet seen answered. Past it the
    /// broker stops reading the connection (backpressure) rather than buffering.
    pub max_in_flight_bytes: u64,
    /// Most batches one idempotent producer may have sent to one partition and not yet seen
    /// acknowledged: the broker remembers that many of each producer's latest batches, so a
    /// retry of any of them is answered with its original offsets.
    pub max_in_flight_batches: u16,
}

impl ConnectionLimits {
    /// The limits a decoder enforces under these connection limits.
    pub fn frame_limits(&self) -> FrameLimits {
        FrameLimits {
            max_frame_bytes: self.max_frame_bytes,
            max_batch_bytes: self.max_batch_bytes,
            max_list_entries: self.max_list_entries,
        }
    }

    /// Checks that the limits can work together; returns what is wrong otherwise.
    ///
    /// A frame must hold the header plus one batch of the largest allowed size with its
    /// message fields, at least one batch header must fit, lists may not be empty, and at
    /// least one whole frame and one batch per producer must be allowed in flight.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.max_frame_bytes > MAX_FRAME_BYTES {
            return Err("max_frame_bytes exceeds the format maximum");
        }
        if self.max_batch_bytes > batch::MAX_BATCH_BYTES {
            return Err("max_batch_bytes exceeds the batch format maximum");
        }
        if self.max_batch_bytes < batch::HEADER_LEN as u32 {
            return Err("max_batch_bytes is smaller than a batch header");
        }
        if u64::from(self.max_batch_bytes) + u64::from(FRAME_OVERHEAD_BYTES)
            > u64::from(self.max_frame_bytes)
        {
            return Err("max_frame_bytes leaves no room for a batch of max_batch_bytes");
        }
        if self.max_list_entries == 0 {
            return Err("max_list_entries is zero");
        }
        if self.max_in_flight_bytes < u64::from(self.max_frame_bytes) {
            return Err("max_in_flight_bytes is smaller than one frame");
        }
        if self.max_in_flight_batches == 0 {
            return Err("max_in_flight_batches is zero");
        }
        Ok(())
    }
}

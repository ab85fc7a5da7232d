//! The state machine over Floe's real log: record batches as [`Batch`]es, and a
//! `floe-hot-log` [`Log`] as the leader's [`ReadLog`].

use bytes::Bytes;
use floe_hot_log::Log;
use floe_wire::{BatchHeader, LeaderEpoch, Offset};

use crate::message::{Batch, ReadLog};

/// One stamped record batch, exactly as stored and shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireBatch {
    bytes: Bytes,
    base: u64,
    end: u64,
    epoch: LeaderEpoch,
}

impl WireBatch {
    /// Parses the header of a stamped batch (the bytes are not copied). The record count
    /// bounds the end; the checksum is the log's to check when the batch is appended.
    pub fn parse(bytes: Bytes) -> Result<WireBatch, floe_wire::BatchError> {
        let header = BatchHeader::parse(&bytes)?;
        let base = header.base_offset.get();
        Ok(WireBatch {
            base,
            end: base + u64::from(header.record_count),
            epoch: header.leader_epoch,
            bytes,
        })
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

impl Batch for WireBatch {
    fn base(&self) -> u64 {
        self.base
    }
    fn end(&self) -> u64 {
        self.end
    }
    fn epoch(&self) -> LeaderEpoch {
        self.epoch
    }
    fn size(&self) -> usize {
        self.bytes.len()
    }
}

/// Splits concatenated stored batches, as [`Log::read`] returns them.
pub fn split_batches(mut bytes: Bytes) -> Result<Vec<WireBatch>, floe_wire::BatchError> {
    let mut batches = Vec::new();
    while !bytes.is_empty() {
        let header = BatchHeader::parse(&bytes)?;
        let len = (header.batch_length as usize).min(bytes.len());
        batches.push(WireBatch::parse(bytes.split_to(len))?);
    }
    Ok(batches)
}

impl ReadLog<WireBatch> for Log {
    fn read(&self, from: u64, max_bytes: usize) -> Vec<WireBatch> {
        // A read that fails (the range moved under retention, an I/O error) ships nothing;
        // the leader retries on its next tick.
        let Ok(read) = Log::read(self, Offset::new(from), max_bytes, self.log_end()) else {
            return Vec::new();
        };
        split_batches(read.bytes)
            .unwrap_or_default()
            .into_iter()
            .skip_while(|b| b.base < from)
            .collect()
    }
}

/// The state machine's view of a real log: bounds, durable end and epoch history. The log's
/// history may reach below its start (retention keeps it whole, and a reset records the
/// epoch below the new start): the epoch in force just below the start becomes the view's
/// base epoch, and the view's history starts at the log start.
pub fn log_view(log: &Log) -> crate::LogView {
    let start = log.log_start();
    let end = log.log_end();
    let history = log.epoch_history();
    let entries = history.entries();
    let below = entries.partition_point(|e| e.start_offset < start);
    let base_epoch = below
        .checked_sub(1)
        .filter(|_| start.get() > 0)
        .map_or(LeaderEpoch::ZERO, |i| entries[i].epoch);
    let mut epochs: Vec<crate::EpochStart> = Vec::new();
    if end > start
        && let Some(i) = below.checked_sub(1)
        && entries
            .get(below)
            .is_none_or(|next| next.start_offset > start)
    {
        // The epoch in force at the start began below it.
        epochs.push(crate::EpochStart {
            epoch: entries[i].epoch,
            start: start.get(),
        });
    }
    epochs.extend(
        entries[below..]
            .iter()
            .filter(|e| e.start_offset < end)
            .map(|e| crate::EpochStart {
                epoch: e.epoch,
                start: e.start_offset.get(),
            }),
    );
    crate::LogView {
        start: start.get(),
        end: end.get(),
        synced: log.synced_end().get(),
        epochs,
        base_epoch,
    }
}

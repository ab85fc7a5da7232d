//! Appending: a producer's batch stamped by the leader, a control batch of the leader's own,
//! or a batch a follower stores as its leader stamped it. Validation (checksum included)
//! happens before the writer lock; the write is not durable until the syncer's next sync.

use std::time::Instant;

use floe_wire::batch::{self, BatchHeader};
use floe_wire::{LeaderEpoch, Offset};

use super::{Appended, Log, Shared, Writer};
use crate::LogError;
use crate::producer_state::ProducerCheck;
use crate::segment::Segment;

/// Batches up to this size are stamped in a copy and written in one piece; larger ones are
/// written as a stamped copy of their header followed by the rest, uncopied.
const STAMP_BY_COPY_MAX: usize = 64 * 1024;

/// Who stamped the batch being appended.
enum Stamp {
    /// The leader assigns offsets and stamps its epoch; `control` when the leader writes a
    /// control batch of its own (producers may not).
    Leader { epoch: LeaderEpoch, control: bool },
    /// A follower stores the leader's stamp as is.
    Replica,
}

impl Log {
    /// Appends a producer's batch as the leader of `leader_epoch`: validates it, assigns and
    /// stamps its offsets, writes it. Not yet durable: see [`Log::wait_synced`]. A control
    /// batch is refused ([`LogError::ControlBatch`]): only the leader writes those.
    pub fn append(&self, batch: &[u8], leader_epoch: LeaderEpoch) -> Result<Appended, LogError> {
        self.append_stamped(
            batch,
            Stamp::Leader {
                epoch: leader_epoch,
                control: false,
            },
        )
    }

    /// Appends a control batch of `kind` as the leader of `leader_epoch`, at `timestamp`
    /// (ms); returns where it went and its bytes (before stamping, as [`Log::append`] takes
    /// them).
    pub fn append_control(
        &self,
        kind: batch::ControlKind,
        leader_epoch: LeaderEpoch,
        timestamp: i64,
    ) -> Result<(Appended, bytes::Bytes), LogError> {
        let batch = batch::control_batch(kind, timestamp);
        let appended = self.append_stamped(
            &batch,
            Stamp::Leader {
                epoch: leader_epoch,
                control: true,
            },
        )?;
        Ok((appended, batch))
    }

    /// Appends a batch stamped by the leader (replication). It must start at the log end.
    pub fn append_replicated(&self, batch: &[u8]) -> Result<Appended, LogError> {
        self.append_stamped(batch, Stamp::Replica)
    }

    fn append_stamped(&self, bytes: &[u8], stamp: Stamp) -> Result<Appended, LogError> {
        // Validation (checksum included) happens before taking the lock.
        let mut header = self.validate_batch(bytes, &stamp)?;
        let shared = &self.shared;
        let mut w = shared.writer();
        shared.check_writable(&w)?;
        let end = w.active.state().next_offset;
        let epoch = match stamp {
            Stamp::Leader { epoch, .. } => epoch,
            Stamp::Replica => header.leader_epoch,
        };
        if let Some(latest) = w.epochs.latest().filter(|l| epoch < l.epoch) {
            return Err(LogError::StaleEpoch {
                epoch,
                latest: latest.epoch,
            });
        }
        match stamp {
            Stamp::Leader { .. } => {
                if let ProducerCheck::Duplicate {
                    base_offset,
                    last_offset,
                } = w.producers.check(&header)?
                {
                    return Ok(Appended {
                        base_offset,
                        last_offset,
                        duplicate: true,
                    });
                }
            }
            Stamp::Replica if header.base_offset != end => {
                return Err(LogError::NonContiguous {
                    expected: end,
                    found: header.base_offset,
                });
            }
            Stamp::Replica => {}
        }
        if end.checked_add(u64::from(header.record_count)).is_none() {
            return Err(LogError::OffsetOutOfRange {
                requested: end,
                log_start: self.log_start(),
                log_end: end,
            });
        }
        let result = self.write_stamped(&mut w, bytes, &mut header, end, epoch);
        match &result {
            // Undone: the log is as it was, and the producer may retry.
            Err(LogError::DiskFull { .. }) => {}
            Err(e) => shared.fail(e),
            Ok(_) => {}
        }
        result
    }

    /// Checks a batch as a whole before the writer lock is taken: its size, its checksum, its
    /// declared length, and that only the leader's own batches are control batches.
    fn validate_batch(&self, bytes: &[u8], stamp: &Stamp) -> Result<BatchHeader, LogError> {
        let max = self.shared.config.batch_bytes_max;
        if bytes.len() > max as usize {
            return Err(LogError::BatchTooLarge {
                size: bytes.len(),
                max,
            });
        }
        let header = batch::validate(bytes)?;
        if bytes.len() != header.batch_length as usize {
            return Err(floe_wire::BatchError::LengthMismatch {
                declared: header.batch_length,
                available: bytes.len(),
            }
            .into());
        }
        if let Stamp::Leader { control, .. } = *stamp
            && header.is_control() != control
        {
            // Never from a producer; and the leader's own is always one.
            return Err(LogError::ControlBatch);
        }
        Ok(header)
    }

    fn write_stamped(
        &self,
        w: &mut Writer,
        bytes: &[u8],
        header: &mut BatchHeader,
        end: Offset,
        epoch: LeaderEpoch,
    ) -> Result<Appended, LogError> {
        let shared = &self.shared;
        if w.epochs.assign(epoch, end)
            && let Err(e) = shared.write_epochs(&w.epochs)
        {
            // The new epoch starts at the log end: forgetting it undoes the assignment.
            w.epochs.truncate_from(end);
            return Err(e);
        }
        let (size, aged) = {
            let st = w.active.state();
            (
                st.size,
                w.active_since.elapsed() >= w.segment_limits.age_max,
            )
        };
        let full = size + bytes.len() as u64 > w.segment_limits.bytes_max;
        if size > 0 && (full || aged) {
            shared.roll(w)?;
        }
        header.base_offset = end;
        header.leader_epoch = epoch;
        // Stamping changes only the header's base offset and epoch (outside the checksum). A
        // large batch goes to the file as its stamped header and then the rest as given,
        // sparing a copy of every byte; a small one is copied whole to stay one write.
        if bytes.len() <= STAMP_BY_COPY_MAX {
            let mut scratch = std::mem::take(&mut w.scratch);
            scratch.clear();
            scratch.extend_from_slice(bytes);
            batch::stamp(&mut scratch, end, epoch)?;
            let written = shared.write_batch(w, &[&scratch], header);
            w.scratch = scratch;
            written?;
        } else {
            let (head, rest) = bytes.split_at(batch::HEADER_LEN);
            let mut stamped = [0u8; batch::HEADER_LEN];
            stamped.copy_from_slice(head);
            batch::stamp(&mut stamped, end, epoch)?;
            shared.write_batch(w, &[&stamped, rest], header)?;
        }
        Ok(Appended {
            base_offset: end,
            last_offset: header.last_offset(),
            duplicate: false,
        })
    }
}

impl Shared {
    /// Writes a stamped batch, given as consecutive `pieces`, at the end of the active
    /// segment and publishes it. On a full disk the bytes written are cut off again and the
    /// log is as before ([`LogError::DiskFull`]).
    fn write_batch(
        &self,
        w: &mut Writer,
        pieces: &[&[u8]],
        header: &BatchHeader,
    ) -> Result<(), LogError> {
        let segment = w.active.clone();
        let position = segment.state().size;
        let mut at = position;
        for piece in pieces {
            if let Err(source) = segment.file.write_all_at(piece, at) {
                return Err(self.undo_write(&segment, position, source));
            }
            at += piece.len() as u64;
        }
        {
            let mut st = segment.state_mut();
            let rel = header.base_offset.distance_from(segment.base) as u32;
            st.index.on_append(
                rel,
                position as u32,
                header.batch_length,
                header.max_timestamp,
                self.config.index_interval_bytes,
            );
            st.size += u64::from(header.batch_length);
            st.next_offset = header.next_offset();
            st.max_timestamp = st.max_timestamp.max(header.max_timestamp);
        }
        w.producers.record(header, self.config.producers_max);
        // The end moves before the syncer can learn of the batch: a sync may complete at any
        // moment after that, and the synced end must never pass the log end (a reader
        // bounded by the synced end would otherwise be sent past the end).
        self.end_tx.send_replace(header.next_offset());
        {
            let mut s = self.sync_state();
            s.written = header.next_offset();
            s.written_bytes = at;
            s.pending.bytes += u64::from(header.batch_length);
            s.pending.oldest.get_or_insert_with(Instant::now);
        }
        self.work.notify_one();
        Ok(())
    }

    /// The error of a batch write to `segment` at `position` that failed with `source`. A
    /// full disk is undone: what part of the batch reached the file is cut off (it is not
    /// synced yet, and no sync failed), so the log ends where it did and takes the retry.
    fn undo_write(&self, segment: &Segment, position: u64, source: std::io::Error) -> LogError {
        let error = LogError::undone_write("write", &segment.path)(source);
        if !matches!(error, LogError::DiskFull { .. }) {
            return error;
        }
        match segment.file.set_len(position) {
            Ok(()) => error,
            Err(source) => LogError::Io {
                op: "cut a failed write from",
                path: segment.path.clone(),
                source,
            },
        }
    }
}

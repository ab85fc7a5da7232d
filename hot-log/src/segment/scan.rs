//! Walking the batches of a segment file: validation for recovery and index rebuilds, and,
//! where the batches stop being valid, telling a torn tail from damaged data.
//!
//! # A torn tail or rot
//!
//! A crash can leave only one kind of damage in a segment: its end. Floe never preallocates
//! or reuses a segment file: each is created empty and only ever appended to, and bytes cut
//! from its end (truncation, recovery) are cut durably (`set_len`, then `fdatasync`) before
//! anything is appended there again. So after a crash, what follows the last synced byte is
//! a prefix of what was appended since, perhaps ending in zeros (the length reached the disk,
//! the data did not) — never an older batch. Nothing valid can follow torn bytes.
//!
//! Damage that a valid batch of the same log follows is therefore rot (a flipped bit, a bad
//! sector), and what follows it was written, synced and perhaps acknowledged: it must never
//! be cut as a torn tail. [`after_damage`] looks for such a batch, byte by byte from the
//! damage to the end of the file. A batch at byte `q` counts only if
//!
//! - its header is well formed, it lies wholly inside the file and its CRC-32C holds (the
//!   checksum covers everything but the leader's stamp: base offset and leader epoch);
//! - its offsets continue the log's: it starts after the offset `n` the damaged batch should
//!   have started at, and no further than the records that fit in the damaged bytes allow
//!   (`n < base ≤ n + (q - p) / MIN_RECORD_LEN`, `p` the damaged byte). A record embedded
//!   whole in another's value, or a stale block a file system exposed after a crash, rarely
//!   carries such offsets;
//! - or it is the damaged batch itself, whole and checksummed, with only its base offset
//!   (outside the checksum) changed: no crash writes a batch with the wrong offset.
//!
//! What this cannot tell apart: damage to the last batch of the file (nothing follows it),
//! which is cut like a torn tail; and, after a power loss, a write-back that reached the disk
//! out of order, leaving a hole of zeros in the unsynced appends with a later batch intact
//! after it — none of it acknowledged, but reported as damage, never cut. That errs towards
//! an operator's look, never towards losing data.
//!
//! The search reads a chunk at a time and checksums at most [`CHECKED_BYTES_MAX`] bytes of
//! candidates, so a hostile file costs bounded time; past that the damage is reported
//! unresolved, which is refused like rot.

use floe_wire::Offset;
use floe_wire::batch::{self, BatchHeader, HEADER_LEN, MIN_RECORD_LEN};

use crate::storage::StorageFile;

/// Bytes read from the file at a time while scanning.
const SCAN_CHUNK: usize = 1024 * 1024;

/// Bytes of candidate batches [`after_damage`] checksums at most before it gives up.
const CHECKED_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Where and why a scan stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanStop {
    pub position: u64,
    pub reason: String,
}

/// The result of scanning a segment.
#[derive(Debug, Clone)]
pub(crate) struct ScanOutcome {
    /// Bytes of valid, contiguous batches from the start.
    pub valid_bytes: u64,
    /// The offset after the last valid batch.
    pub next_offset: Offset,
    /// Why the scan stopped early, if it did.
    pub stop: Option<ScanStop>,
}

/// Reads and fully validates (checksums included) every batch of `file` from position 0 up to
/// `len`, calling `visit(header, position)` for each valid one. Batches must start at `base`
/// and continue without gaps. Stops at the first invalid batch; memory is bounded by the
/// larger of the read chunk and one batch.
pub(crate) fn scan_batches(
    file: &dyn StorageFile,
    len: u64,
    base: Offset,
    mut visit: impl FnMut(&BatchHeader, u64),
) -> std::io::Result<ScanOutcome> {
    let mut chunks = Chunks {
        file,
        len,
        buf: Vec::new(),
        start: 0,
    };
    let mut position = 0u64;
    let mut next_offset = base;
    while position < len {
        match next_batch(&mut chunks, position, next_offset)? {
            Ok(header) => {
                visit(&header, position);
                next_offset = header.next_offset();
                position += u64::from(header.batch_length);
            }
            Err(reason) => {
                return Ok(ScanOutcome {
                    valid_bytes: position,
                    next_offset,
                    stop: Some(ScanStop { position, reason }),
                });
            }
        }
    }
    Ok(ScanOutcome {
        valid_bytes: position,
        next_offset,
        stop: None,
    })
}

/// What follows damaged bytes of a segment (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterDamage {
    /// No batch continuing the log: a torn tail, which a crash leaves and which may be cut.
    Nothing,
    /// A valid batch continuing the log starts at byte `position`: the damage is rot.
    ValidBatch { position: u64, base_offset: Offset },
    /// The checking budget ran out at byte `position` before the end of the file.
    Unresolved { position: u64 },
}

/// Looks from byte `damage` (where a scan stopped, expecting a batch starting at offset
/// `expected`) to `len` for a valid batch that continues the log.
pub(crate) fn after_damage(
    file: &dyn StorageFile,
    len: u64,
    damage: u64,
    expected: Offset,
) -> std::io::Result<AfterDamage> {
    let mut chunks = Chunks {
        file,
        len,
        buf: Vec::new(),
        start: 0,
    };
    let mut budget = CHECKED_BYTES_MAX;
    let mut position = damage;
    while position + HEADER_LEN as u64 <= len {
        if let Some(header) = candidate(&mut chunks, position, damage, expected)? {
            let batch_len = u64::from(header.batch_length);
            let Some(left) = budget.checked_sub(batch_len) else {
                return Ok(AfterDamage::Unresolved { position });
            };
            budget = left;
            let bytes = chunks.at(position, batch_len as usize)?;
            if batch::validate(&bytes[..batch_len as usize]).is_ok() {
                return Ok(AfterDamage::ValidBatch {
                    position,
                    base_offset: header.base_offset,
                });
            }
        }
        position += 1;
    }
    Ok(AfterDamage::Nothing)
}

/// The header at `position` when a batch starting there, wholly inside the file, would
/// prove the damage at `damage` rot if its checksum holds: its offsets continue the log
/// past the damaged bytes, or it is the damaged batch itself with another base offset.
fn candidate(
    chunks: &mut Chunks<'_>,
    position: u64,
    damage: u64,
    expected: Offset,
) -> std::io::Result<Option<BatchHeader>> {
    let Ok(header) = BatchHeader::parse(chunks.at(position, HEADER_LEN)?) else {
        return Ok(None);
    };
    if position + u64::from(header.batch_length) > chunks.len {
        return Ok(None);
    }
    let continues = if position == damage {
        header.base_offset != expected
    } else {
        let room = (position - damage) / MIN_RECORD_LEN as u64;
        header.base_offset > expected && header.base_offset.distance_from(expected) <= room
    };
    Ok(continues.then_some(header))
}

/// Reads and fully validates the batch at `position`, which must start at `next_offset`.
/// The inner `Err` says why no valid batch is there; the outer one is a failed read.
fn next_batch(
    chunks: &mut Chunks<'_>,
    position: u64,
    next_offset: Offset,
) -> std::io::Result<Result<BatchHeader, String>> {
    let remaining = chunks.len - position;
    if remaining < HEADER_LEN as u64 {
        return Ok(Err(format!(
            "{remaining} bytes left, too few for a batch header"
        )));
    }
    let header = match BatchHeader::parse(chunks.at(position, HEADER_LEN)?) {
        Ok(h) => h,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let batch_len = u64::from(header.batch_length);
    if position + batch_len > u64::from(u32::MAX) {
        let reason = "segment grows past 4 GiB, more than its index can address".to_string();
        return Ok(Err(reason));
    }
    if batch_len > remaining {
        let reason = format!("batch of {batch_len} bytes runs past the end ({remaining} left)");
        return Ok(Err(reason));
    }
    let bytes = chunks.at(position, batch_len as usize)?;
    if let Err(e) = batch::validate(&bytes[..batch_len as usize]) {
        return Ok(Err(e.to_string()));
    }
    if header.base_offset != next_offset {
        let reason = format!(
            "batch starts at offset {}, expected {next_offset}",
            header.base_offset
        );
        return Ok(Err(reason));
    }
    Ok(Ok(header))
}

/// The file being scanned, read a chunk at a time into one buffer.
struct Chunks<'a> {
    file: &'a dyn StorageFile,
    /// Bytes of the file to scan.
    len: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    start: u64,
}

impl Chunks<'_> {
    /// The bytes from file position `position` to the end of the buffer, at least `need` of
    /// them (or up to `len`).
    fn at(&mut self, position: u64, need: usize) -> std::io::Result<&[u8]> {
        let buf_end = self.start + self.buf.len() as u64;
        if position < self.start || position + need as u64 > buf_end {
            let want = need.max(SCAN_CHUNK).min((self.len - position) as usize);
            self.buf.resize(want, 0);
            crate::storage::read_exact_at(self.file, &mut self.buf, position)?;
            self.start = position;
        }
        Ok(&self.buf[(position - self.start) as usize..])
    }
}

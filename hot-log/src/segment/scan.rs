//! Walking the batches of a segment file: validation for recovery and index rebuilds.

use floe_wire::Offset;
use floe_wire::batch::{self, BatchHeader, HEADER_LEN};

use crate::storage::StorageFile;

/// Bytes read from the file at a time while scanning.
const SCAN_CHUNK: usize = 1024 * 1024;

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
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = 0u64; // file position of buf[0]
    let mut position = 0u64;
    let mut next_offset = base;
    let stop = |position: u64, reason: String| ScanStop { position, reason };
    loop {
        if position == len {
            return Ok(ScanOutcome {
                valid_bytes: position,
                next_offset,
                stop: None,
            });
        }
        let remaining = len - position;
        if remaining < HEADER_LEN as u64 {
            let reason = format!("{remaining} bytes left, too few for a batch header");
            return Ok(ScanOutcome {
                valid_bytes: position,
                next_offset,
                stop: Some(stop(position, reason)),
            });
        }
        fill(file, &mut buf, &mut buf_start, position, HEADER_LEN, len)?;
        let at = (position - buf_start) as usize;
        let header = match BatchHeader::parse(&buf[at..]) {
            Ok(h) => h,
            Err(e) => {
                return Ok(ScanOutcome {
                    valid_bytes: position,
                    next_offset,
                    stop: Some(stop(position, e.to_string())),
                });
            }
        };
        let batch_len = u64::from(header.batch_length);
        if position + batch_len > u64::from(u32::MAX) {
            let reason = "segment grows past 4 GiB, more than its index can address".to_string();
            return Ok(ScanOutcome {
                valid_bytes: position,
                next_offset,
                stop: Some(stop(position, reason)),
            });
        }
        if batch_len > remaining {
            let reason = format!("batch of {batch_len} bytes runs past the end ({remaining} left)");
            return Ok(ScanOutcome {
                valid_bytes: position,
                next_offset,
                stop: Some(stop(position, reason)),
            });
        }
        fill(
            file,
            &mut buf,
            &mut buf_start,
            position,
            batch_len as usize,
            len,
        )?;
        let at = (position - buf_start) as usize;
        if let Err(e) = batch::validate(&buf[at..at + batch_len as usize]) {
            return Ok(ScanOutcome {
                valid_bytes: position,
                next_offset,
                stop: Some(stop(position, e.to_string())),
            });
        }
        if header.base_offset != next_offset {
            let reason = format!(
                "batch starts at offset {}, expected {next_offset}",
                header.base_offset
            );
            return Ok(ScanOutcome {
                valid_bytes: position,
                next_offset,
                stop: Some(stop(position, reason)),
            });
        }
        visit(&header, position);
        next_offset = header.next_offset();
        position += batch_len;
    }
}

/// Makes `buf` hold at least `need` bytes from file position `position` (or up to `len`).
fn fill(
    file: &dyn StorageFile,
    buf: &mut Vec<u8>,
    buf_start: &mut u64,
    position: u64,
    need: usize,
    len: u64,
) -> std::io::Result<()> {
    let buf_end = *buf_start + buf.len() as u64;
    if position >= *buf_start && position + need as u64 <= buf_end {
        return Ok(());
    }
    let want = need.max(SCAN_CHUNK).min((len - position) as usize);
    buf.resize(want, 0);
    crate::storage::read_exact_at(file, buf, position)?;
    *buf_start = position;
    Ok(())
}

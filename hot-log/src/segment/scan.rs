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

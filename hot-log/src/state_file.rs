//! Small state files (leader-epoch history, high watermark, producer snapshots, indexes),
//! written atomically and framed with a checksum.
//!
//! Write: temp file, `fdatasync`, rename over the target, `fsync` the directory. A crash at
//! any point leaves either the old file or the new one, never a mix.
//!
//! ```text
//! framed file := [4] magic | u8 version (1) | 3 × u8 zero | u32 payload_length
//!              | payload | u32 crc32c (of everything before it)
//! ```

use std::path::Path;

use crate::LogError;
use crate::storage::{Storage, read_exact_at};

/// Suffix of a file being written; leftovers are removed when the log opens.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";
const FRAME_VERSION: u8 = 1;
const FRAME_HEADER_LEN: usize = 12;
/// Largest state file the log will read; anything bigger is corrupt.
pub(crate) const STATE_FILE_MAX: u64 = 256 * 1024 * 1024;

/// Replaces `dir/name` with `bytes` atomically and durably. A full disk before the rename
/// is [`LogError::DiskFull`]: the target is untouched, and the temp file is rewritten from
/// scratch by the next attempt.
pub(crate) fn write_atomically(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(), LogError> {
    let temp = dir.join(format!("{name}{TEMP_SUFFIX}"));
    let target = dir.join(name);
    let file = storage
        .open(&temp, true)
        .map_err(LogError::undone_write("create", &temp))?;
    file.set_len(0)
        .map_err(LogError::undone_write("truncate", &temp))?;
    file.write_all_at(bytes, 0)
        .map_err(LogError::undone_write("write", &temp))?;
    // A failed sync of the temp file loses nothing: it is never renamed, and rewritten.
    file.sync_data()
        .map_err(LogError::undone_write("fdatasync", &temp))?;
    storage
        .rename(&temp, &target)
        .map_err(LogError::io("rename", &target))?;
    storage
        .sync_dir(dir)
        .map_err(LogError::io("fsync directory", dir))?;
    Ok(())
}

/// Frames `payload` with `magic` and replaces `dir/name` with it atomically and durably.
pub(crate) fn write_framed(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    magic: [u8; 4],
    payload: &[u8],
) -> Result<(), LogError> {
    write_atomically(storage, dir, name, &frame(magic, payload))
}

/// Reads a whole file, or `None` when it does not exist.
pub(crate) fn read_file(storage: &dyn Storage, path: &Path) -> Result<Option<Vec<u8>>, LogError> {
    let file = match storage.open(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io("open", path)(e)),
    };
    let len = file.len().map_err(LogError::io("stat", path))?;
    if len > STATE_FILE_MAX {
        return Err(LogError::Corrupt {
            file: path.to_path_buf(),
            position: 0,
            reason: format!("{len} bytes is more than any state file holds"),
        });
    }
    let mut bytes = vec![0u8; len as usize];
    read_exact_at(file.as_ref(), &mut bytes, 0).map_err(LogError::io("read", path))?;
    Ok(Some(bytes))
}

/// Frames `payload` with `magic`, a length and a checksum.
pub(crate) fn frame(magic: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len() + 4);
    out.extend_from_slice(&magic);
    out.extend_from_slice(&[FRAME_VERSION, 0, 0, 0]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks a framed file and returns its payload, or the reason it cannot be trusted.
pub(crate) fn unframe(magic: [u8; 4], bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.len() < FRAME_HEADER_LEN + 4 {
        return Err(format!("{} bytes is shorter than the frame", bytes.len()));
    }
    if bytes[..4] != magic {
        return Err("wrong magic".into());
    }
    if bytes[4] != FRAME_VERSION || bytes[5..8] != [0, 0, 0] {
        return Err(format!("unsupported version {}", bytes[4]));
    }
    let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if bytes.len() != FRAME_HEADER_LEN + len + 4 {
        return Err(format!(
            "payload length {len} does not match the file's {} bytes",
            bytes.len()
        ));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32c::crc32c(body) != stored {
        return Err("checksum mismatch".into());
    }
    Ok(&body[FRAME_HEADER_LEN..])
}

/// Reads and unframes a state file; a file that fails its checks is reported as corrupt.
pub(crate) fn read_framed(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    magic: [u8; 4],
) -> Result<Option<Vec<u8>>, LogError> {
    let path = dir.join(name);
    let Some(bytes) = read_file(storage, &path)? else {
        return Ok(None);
    };
    match unframe(magic, &bytes) {
        Ok(payload) => Ok(Some(payload.to_vec())),
        Err(reason) => Err(LogError::Corrupt {
            file: path,
            position: 0,
            reason,
        }),
    }
}

/// A little-endian reader for state payloads; every read is bounds-checked.
#[derive(Debug)]
pub(crate) struct PayloadReader<'a> {
    bytes: &'a [u8],
}

impl<'a> PayloadReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        PayloadReader { bytes }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.bytes.len() < N {
            return Err("payload ends early".into());
        }
        let (head, tail) = self.bytes.split_at(N);
        self.bytes = tail;
        let mut out = [0u8; N];
        out.copy_from_slice(head);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, String> {
        self.take::<1>().map(|b| b[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        self.take().map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        self.take().map(u32::from_le_bytes)
    }
    pub fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        self.take().map(u64::from_le_bytes)
    }
    pub fn i64(&mut self) -> Result<i64, String> {
        self.take().map(i64::from_le_bytes)
    }
    /// Checks that a count of `item_len`-byte items fits in what is left.
    pub fn count(&mut self, item_len: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_len) > self.bytes.len() {
            return Err(format!("count {n} exceeds the payload"));
        }
        Ok(n)
    }
    pub fn finish(self) -> Result<(), String> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.bytes.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trips_and_every_flipped_bit_is_caught() {
        let framed = frame(*b"TEST", b"hello state");
        assert_eq!(unframe(*b"TEST", &framed).ok(), Some(&b"hello state"[..]));
        assert!(unframe(*b"OTHR", &framed).is_err());
        for i in 0..framed.len() {
            for bit in 0..8 {
                let mut bad = framed.clone();
                bad[i] ^= 1 << bit;
                assert!(unframe(*b"TEST", &bad).is_err(), "flip {i}:{bit} accepted");
            }
        }
        assert!(unframe(*b"TEST", &framed[..framed.len() - 1]).is_err());
    }
}

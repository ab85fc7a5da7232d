//! The narrow interface between the log and durable storage.
//!
//! Everything the log does to a disk goes through [`Storage`] and [`StorageFile`]: a handful
//! of positional reads and writes, `fdatasync`, and directory operations whose durability
//! needs a directory sync. [`FsStorage`] is the real file system; [`CrashStorage`] keeps the
//! written and the durable image apart so tests can see exactly what a crash leaves.

mod crash;
mod fs;

pub use crash::{CrashImage, CrashStorage, SyncPoint};
pub use fs::FsStorage;

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory tree of files. Creating, renaming and removing a file or a directory is
/// durable only after [`Storage::sync_dir`] on its parent directory returns.
pub trait Storage: Send + Sync + Debug + 'static {
    /// Creates a directory and its missing parents; returns the directories it created,
    /// outermost first. Each is durable only once its parent is synced.
    fn create_dir_all(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// Names of the files directly in `dir`, in no particular order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens a file for reading and writing; with `create`, makes it if missing.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Atomically replaces `to` with `from` (same directory).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries durable (`fsync` on the directory).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// One open file, used from many threads with positional I/O.
#[allow(clippy::len_without_is_empty)] // a file's length is what the log needs
pub trait StorageFile: Send + Sync + Debug {
    /// Reads up to `buf.len()` bytes at `position`; returns how many (0 at the end).
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `position`.
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()>;
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes written data and the length durable (`fdatasync`). Never retried after a failure:
    /// the caller must treat the file's unsynced contents as lost.
    fn sync_data(&self) -> io::Result<()>;
    /// Hints that `len` bytes at `position`, written and synced, will not be read soon: the
    /// operating system may drop them from its page cache. Reads still return them (from
    /// the disk). A storage without a cache ignores it.
    fn release_cache(&self, _position: u64, _len: u64) {}
    /// Reads up to `buf.len()` bytes at `position` around the page cache (`O_DIRECT`): the
    /// disk's data goes straight into `buf`, and no page-cache page is allocated or
    /// filled. `position`, `buf`'s address and its length must be multiples of
    /// [`DIRECT_ALIGN`]. Returns `None` where this storage cannot (no such reads here, or
    /// the file system refuses them); the caller then reads with [`StorageFile::read_at`].
    /// The data is what a [`StorageFile::read_at`] would return, written but unsynced bytes
    /// included: the kernel writes dirty pages of the range back before reading it.
    fn read_uncached_at(&self, _buf: &mut [u8], _position: u64) -> Option<io::Result<usize>> {
        None
    }
}

/// The alignment of [`StorageFile::read_uncached_at`]'s position, buffer and length: the
/// page size, a multiple of every common logical block size.
pub const DIRECT_ALIGN: usize = 4096;

/// A zeroed buffer with room for `len` bytes from an address aligned to [`DIRECT_ALIGN`],
/// and the index they start at: `buf[at..at + len]`, fit for
/// [`read_exact_uncached_at`]. (Moving the `Vec` does not move its memory.)
pub fn aligned_buffer(len: usize) -> (Vec<u8>, usize) {
    let buf = vec![0u8; len + DIRECT_ALIGN];
    let at = buf.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
    (buf, at)
}

/// Reads exactly `buf.len()` bytes at `position`, around the page cache where the storage,
/// the position and the buffer allow it: the aligned whole blocks directly, the rest (an
/// unaligned tail, or everything when `position` and `buf` are not aligned alike) through
/// the page cache. For data read once, such as a sealed segment on its way to object
/// storage.
pub fn read_exact_uncached_at(
    file: &dyn StorageFile,
    buf: &mut [u8],
    position: u64,
) -> io::Result<()> {
    let mut done = 0;
    if position.is_multiple_of(DIRECT_ALIGN as u64) && buf.as_ptr().align_offset(DIRECT_ALIGN) == 0
    {
        let whole_blocks = buf.len() / DIRECT_ALIGN * DIRECT_ALIGN;
        while done < whole_blocks {
            match file.read_uncached_at(&mut buf[done..whole_blocks], position + done as u64) {
                None | Some(Ok(0)) => break,
                Some(Ok(n)) => done += n,
                Some(Err(e)) => return Err(e),
            }
            // A short read at the file's end leaves an unaligned position: the rest, if
            // there is any, goes through the page cache and reports the end there.
            if !done.is_multiple_of(DIRECT_ALIGN) {
                break;
            }
        }
    }
    read_exact_at(file, &mut buf[done..], position + done as u64)
}

/// Reads exactly `buf.len()` bytes at `position` through the page cache, or fails with
/// `UnexpectedEof`.
pub fn read_exact_at(file: &dyn StorageFile, buf: &mut [u8], position: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], position + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read at {}", position + done as u64),
            ));
        }
        done += n;
    }
    Ok(())
}

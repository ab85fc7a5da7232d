//! [`DirectObject`]: an object of a `file://` store written straight to disk, around the page
//! cache.
//!
//! A tiered segment is cold data: the hot log still holds it in the page cache, and readers
//! of the tier come later, if at all. Writing the object through the page cache would copy
//! every byte into freshly allocated cache pages and push hot pages out, only to `fsync`
//! them all at the end, which queues a whole segment's worth of writeback ahead of the
//! hot log's own small syncs. Instead the object is written with `O_DIRECT` from one
//! reused, aligned buffer: the disk reads it by DMA, the final sync only has metadata
//! left to flush, and memory stays bounded by the buffer whatever the object's size.
//!
//! The unaligned tail (under one block) goes through the page cache, and a filesystem that
//! refuses `O_DIRECT` (tmpfs on older kernels, some network filesystems) gets buffered writes
//! throughout. Either way the object is durable when [`DirectObject::finish`] returns: it is
//! written beside its key as `{file}#{n}` (the name the store's listing skips and its own
//! staging uses), synced, renamed into place, and its directory synced.

use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use floe_hot_log::storage::aligned_buffer;

/// Alignment of `O_DIRECT` offsets, lengths and memory: 4 KiB covers 512-byte and 4 KiB
/// logical blocks alike. The same as the hot log's, so that a segment read around the page
/// cache can land straight in an object's buffer.
const ALIGN: usize = floe_hot_log::storage::DIRECT_ALIGN;

/// An object being written; removed again unless [`DirectObject::finish`] succeeds.
#[derive(Debug)]
pub struct DirectObject {
    dest: PathBuf,
    staged: PathBuf,
    /// The staged file opened with `O_DIRECT`, or `None` where the filesystem refuses it.
    direct: Option<File>,
    /// The same file, buffered: the unaligned tail, and everything where `direct` is `None`.
    plain: File,
    /// Backing memory; `buf[start..start + capacity]` is aligned to [`ALIGN`].
    buf: Vec<u8>,
    start: usize,
    capacity: usize,
    /// Bytes filled in the aligned window, not yet written.
    filled: usize,
    /// File offset of the window's first byte.
    written: u64,
    finished: bool,
}

impl DirectObject {
    /// Creates the staged file for `dest` (and any missing parent directory, synced) with a
    /// write buffer of `buffer_bytes` rounded up to whole blocks.
    pub fn create(dest: &Path, buffer_bytes: usize) -> io::Result<DirectObject> {
        let parent = dest
            .parent()
            .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "object path has no parent"))?;
        create_dirs_synced(parent)?;
        let (plain, staged) = create_staged(dest)?;
        let direct = match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&staged)
        {
            Ok(file) => Some(file),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => {
                let _ignored = std::fs::remove_file(&staged);
                return Err(e);
            }
        };
        let capacity = buffer_bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let (buf, start) = aligned_buffer(capacity);
        Ok(DirectObject {
            dest: dest.to_path_buf(),
            staged,
            direct,
            plain,
            buf,
            start,
            capacity,
            filled: 0,
            written: 0,
            finished: false,
        })
    }

    /// Whether the bytes bypass the page cache (false where the filesystem refused it).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The free part of the buffer, never empty: fill a prefix, then [`DirectObject::commit`]
    /// it. Reading straight into it saves a copy.
    pub fn spare(&mut self) -> &mut [u8] {
        let window = self.start..self.start + self.capacity;
        &mut self.buf[window][self.filled..]
    }

    /// Counts `n` bytes of [`DirectObject::spare`] as part of the object, writing the buffer
    /// out once it is full.
    pub fn commit(&mut self, n: usize) -> io::Result<()> {
        assert!(
            n <= self.capacity - self.filled,
            "committed beyond the buffer"
        );
        self.filled += n;
        if self.filled == self.capacity {
            self.write_out(self.capacity)?;
        }
        Ok(())
    }

    /// Appends `data` to the object.
    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let spare = self.spare();
            let n = spare.len().min(data.len());
            spare[..n].copy_from_slice(&data[..n]);
            self.commit(n)?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Bytes appended so far.
    pub fn len(&self) -> u64 {
        self.written + self.filled as u64
    }

    /// Whether nothing was appended yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the rest, syncs the file, renames it to its key and syncs the directory: the
    /// object is durable and visible, whole, when this returns. Returns its size.
    pub fn finish(mut self) -> io::Result<u64> {
        let aligned = self.filled / ALIGN * ALIGN;
        if aligned > 0 {
            self.write_out(aligned)?;
        }
        if self.filled > 0 {
            let window = self.start..self.start + self.filled;
            self.plain.write_all_at(&self.buf[window], self.written)?;
            self.written += self.filled as u64;
            self.filled = 0;
        }
        self.plain.sync_all()?;
        std::fs::rename(&self.staged, &self.dest)?;
        self.finished = true;
        sync_dir(self.dest.parent().unwrap_or(Path::new(".")))?;
        Ok(self.written)
    }

    /// Writes the first `n` (a multiple of [`ALIGN`]) buffered bytes at the file's end and
    /// moves the rest to the buffer's start.
    fn write_out(&mut self, n: usize) -> io::Result<()> {
        debug_assert_eq!(n % ALIGN, 0);
        let window = self.start..self.start + n;
        let mut done = false;
        if let Some(direct) = &self.direct {
            match direct.write_all_at(&self.buf[window.clone()], self.written) {
                Ok(()) => done = true,
                // Some filesystems accept the open and refuse the write; go on buffered.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.direct = None,
                Err(e) => return Err(e),
            }
        }
        if !done {
            self.plain.write_all_at(&self.buf[window], self.written)?;
        }
        self.written += n as u64;
        let rest = self.start + n..self.start + self.filled;
        self.buf.copy_within(rest, self.start);
        self.filled -= n;
        Ok(())
    }
}

impl Drop for DirectObject {
    fn drop(&mut self) {
        if !self.finished {
            let _ignored = std::fs::remove_file(&self.staged);
        }
    }
}

/// Creates `{dest}#{n}` for the first free `n`.
fn create_staged(dest: &Path) -> io::Result<(File, PathBuf)> {
    for n in 1u32.. {
        let mut name = dest.as_os_str().to_owned();
        name.push(format!("#{n}"));
        let staged = PathBuf::from(name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staged)
        {
            Ok(file) => return Ok((file, staged)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free staging name"))
}

/// Creates `dir` and its missing ancestors, syncing each new entry's parent.
fn create_dirs_synced(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = Some(dir);
    while let Some(d) = current {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d);
        current = d.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    for created in missing.iter().rev() {
        sync_dir(created.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// Deletes the staging files under `dir` (at any depth) last modified before `before_ms`.
pub(crate) fn sweep_staging(dir: &Path, before_ms: i64) -> io::Result<usize> {
    use io::ErrorKind::NotFound;
    let mut deleted = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                // Finished (renamed into place) or removed since the listing.
                Err(e) if e.kind() == NotFound => continue,
                Err(e) => return Err(e),
            };
            if metadata.is_dir() {
                dirs.push(entry.path());
                continue;
            }
            if !entry.file_name().to_str().is_some_and(is_staging_name) {
                continue;
            }
            let modified_ms = metadata
                .modified()?
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            if modified_ms >= before_ms {
                continue; // maybe a write still in progress
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(deleted)
}

/// Whether a local file name is a staging file's: `{name}#{digits}`.
fn is_staging_name(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(stem, suffix)| {
        !stem.is_empty() && !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit())
    })
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Aligned buffers of direct reads that nothing refers to any more, kept for the next read:
/// a chunk cache full of chunks lets go of one buffer for each chunk it takes in, so a
/// sequential cold read reuses the same few allocations instead of zero-filling (and
/// faulting in) 4 MiB of fresh memory per chunk.
static READ_BUFFERS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Buffers [`READ_BUFFERS`] keeps at most.
const READ_BUFFERS_IDLE_MAX: usize = 4;

/// A buffer from [`READ_BUFFERS`] with room for `room` bytes from an aligned offset (and
/// not more than twice that, so a small read does not hold a large allocation), or a new
/// one. Returns the buffer and where its aligned room starts.
fn take_read_buffer(room: usize) -> (Vec<u8>, usize) {
    let fits = |buf: &Vec<u8>| {
        let at = buf.as_ptr().align_offset(ALIGN);
        buf.len() >= at.saturating_add(room) && buf.len() <= 2 * (room + ALIGN)
    };
    let mut idle = READ_BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = idle.iter().rposition(fits) {
        let buf = idle.swap_remove(i);
        let at = buf.as_ptr().align_offset(ALIGN);
        return (buf, at);
    }
    drop(idle);
    aligned_buffer(room)
}

/// The bytes of a direct read, owning the buffer they are in; it goes back to
/// [`READ_BUFFERS`] when the last reference to the bytes is dropped.
struct DirectRead {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl AsRef<[u8]> for DirectRead {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }
}

impl Drop for DirectRead {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut idle = READ_BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < READ_BUFFERS_IDLE_MAX {
            idle.push(buf);
        }
    }
}

/// Bytes `range` of the file at `path` (shorter if the file ends first), read with
/// `O_DIRECT` into an aligned buffer (reused from an earlier read when one is free), or
/// `None` where that cannot be done: `range.start` not aligned, the file missing or refusing
/// `O_DIRECT`, or `range.start` past its end. The caller then reads through the page cache,
/// which also reports the right error.
///
/// A cold read of a tiered chunk is copied into the chunk cache and never read from the
/// file again soon; a buffered read would first fill a new page-cache page for every 4 KiB.
pub(crate) fn read_range(path: &Path, range: std::ops::Range<u64>) -> io::Result<Option<Bytes>> {
    if !range.start.is_multiple_of(ALIGN as u64) || range.end <= range.start {
        return Ok(None);
    }
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    else {
        return Ok(None);
    };
    let size = file.metadata()?.len();
    if range.start >= size {
        return Ok(None);
    }
    let len = usize::try_from(range.end.min(size) - range.start).map_err(io::Error::other)?;
    let room = len.div_ceil(ALIGN) * ALIGN;
    let (mut buf, at) = take_read_buffer(room);
    let mut done = 0;
    while done < len {
        match file.read_at(&mut buf[at + done..at + room], range.start + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if !done.is_multiple_of(ALIGN) {
            break; // the file's end
        }
    }
    if done < len {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            format!(
                "{} ended at {} while read",
                path.display(),
                range.start + done as u64
            ),
        ));
    }
    Ok(Some(Bytes::from_owner(DirectRead { buf, at, len })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_directly_match_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("object");
        let data = pattern(5 * ALIGN + 123);
        std::fs::write(&path, &data).expect("write");
        let len = data.len() as u64;
        let a = ALIGN as u64;
        for range in [0..len, 0..a, a..3 * a, 2 * a..len + 9999, 5 * a..len] {
            let got = read_range(&path, range.clone())
                .expect("read")
                .expect("aligned ranges read directly");
            let end = range.end.min(len) as usize;
            assert!(got == data[range.start as usize..end], "{range:?}");
        }
        // What the page cache path must serve (and whose errors it must report).
        for range in [1..a, len + 1..len + 2, 6 * a..7 * a, 0..0] {
            assert!(
                read_range(&path, range.clone()).expect("read").is_none(),
                "{range:?}"
            );
        }
        assert!(
            read_range(&dir.path().join("missing"), 0..a)
                .expect("read")
                .is_none()
        );
    }

    #[test]
    fn reused_read_buffers_hold_only_the_new_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let long = dir.path().join("long");
        let short = dir.path().join("short");
        let long_data = pattern(8 * ALIGN);
        let short_data: Vec<u8> = pattern(2 * ALIGN + 77).iter().map(|b| !b).collect();
        std::fs::write(&long, &long_data).expect("write");
        std::fs::write(&short, &short_data).expect("write");
        for _ in 0..8 {
            // A full buffer, dropped, then reads of fewer bytes that may land in it.
            let got = read_range(&long, 0..8 * ALIGN as u64).expect("read");
            assert!(got.expect("direct") == long_data[..]);
            let got = read_range(&short, 0..8 * ALIGN as u64).expect("read");
            assert!(
                got.expect("direct") == short_data[..],
                "the short file, whole"
            );
            let tail = read_range(&short, 2 * ALIGN as u64..8 * ALIGN as u64).expect("read");
            assert!(
                tail.expect("direct") == short_data[2 * ALIGN..],
                "its last 77 bytes"
            );
        }
        // Bytes still referred to keep their buffer: later reads do not overwrite them.
        let kept = read_range(&long, 0..8 * ALIGN as u64)
            .expect("read")
            .expect("direct");
        for _ in 0..8 {
            let _other = read_range(&short, 0..4 * ALIGN as u64).expect("read");
        }
        assert!(kept == long_data[..]);
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn objects_of_every_alignment_come_out_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        for len in [
            0,
            1,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            3 * ALIGN,
            16 * ALIGN - 7,
            16 * ALIGN,
            40_000,
        ] {
            let dest = dir.path().join(format!("a/b/object-{len}"));
            let data = pattern(len);
            // A buffer of 4 blocks: several write-outs for the larger objects.
            let mut object = DirectObject::create(&dest, 4 * ALIGN).expect("create");
            // Mix both ways of appending, in uneven pieces.
            let (head, tail) = data.split_at(len / 3);
            let mut head = head;
            while !head.is_empty() {
                let spare = object.spare();
                let n = spare.len().min(head.len()).min(1000);
                spare[..n].copy_from_slice(&head[..n]);
                object.commit(n).expect("io");
                head = &head[n..];
            }
            for piece in tail.chunks(3000) {
                object.write(piece).expect("io");
            }
            assert_eq!(object.len(), len as u64);
            assert_eq!(object.finish().expect("io"), len as u64);
            assert_eq!(
                std::fs::read(&dest).expect("io"),
                data,
                "object of {len} bytes"
            );
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("a/b"))
            .expect("io")
            .map(|e| e.expect("io").file_name().into_string().expect("io"))
            .filter(|name| name.contains('#'))
            .collect();
        assert!(leftovers.is_empty(), "staged files left: {leftovers:?}");
    }

    #[test]
    fn an_unfinished_object_is_never_visible_and_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dest = dir.path().join("object");
        let mut object = DirectObject::create(&dest, ALIGN).expect("create");
        object.write(&pattern(3 * ALIGN + 5)).expect("io");
        assert!(!dest.exists());
        drop(object);
        assert!(!dest.exists());
        assert_eq!(std::fs::read_dir(dir.path()).expect("io").count(), 0);
    }

    #[test]
    fn a_finished_object_replaces_an_older_one_and_racers_get_their_own_staging_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dest = dir.path().join("object");
        std::fs::write(&dest, b"old").expect("io");
        let mut first = DirectObject::create(&dest, ALIGN).expect("create");
        let mut second = DirectObject::create(&dest, ALIGN).expect("create");
        first.write(b"first").expect("io");
        second.write(b"second").expect("io");
        assert_eq!(std::fs::read(&dest).expect("io"), b"old");
        second.finish().expect("io");
        first.finish().expect("io");
        assert_eq!(std::fs::read(&dest).expect("io"), b"first");
    }

    #[test]
    fn the_disk_is_written_around_the_page_cache_where_the_filesystem_allows() {
        // The test directory is on the disk the tests run from; tmpfs may refuse O_DIRECT,
        // in which case the object must still come out whole (checked above), buffered.
        let dir = tempfile::tempdir().expect("tempdir");
        let object = DirectObject::create(&dir.path().join("object"), ALIGN).expect("create");
        let on_tmpfs = std::process::Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(dir.path())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("tmpfs"))
            .unwrap_or(true);
        if !on_tmpfs {
            assert!(object.is_direct());
        }
    }

    #[test]
    fn staging_names_are_a_stem_a_hash_and_digits() {
        for name in ["x.seg#1", "00000000000000000009.json#27", "a#b#3"] {
            assert!(is_staging_name(name), "{name}");
        }
        for name in ["x.seg", "x.seg#", "#1", "x.seg#1a", "x#-1", "x.seg#one"] {
            assert!(!is_staging_name(name), "{name}");
        }
    }
}

//! [`Storage`] on the real file system.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Storage, StorageFile};

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

impl Storage for FsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.is_dir())
            .collect();
        let mut created = Vec::with_capacity(missing.len());
        for made in missing.into_iter().rev() {
            match std::fs::create_dir(made) {
                // Made by another at the same moment, perhaps not durably yet: this caller
                // makes it durable too.
                Ok(()) => created.push(made.to_path_buf()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && made.is_dir() => {
                    created.push(made.to_path_buf())
                }
                Err(e) => return Err(e),
            }
        }
        Ok(created)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(FsFile(file)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[derive(Debug)]
struct FsFile(File);

impl StorageFile for FsFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        self.0.read_at(buf, position)
    }

    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.0.write_all_at(buf, position)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn read_uncached_at(&self, buf: &mut [u8], position: u64) -> Option<io::Result<usize>> {
        use rustix::fs::{Mode, OFlags};
        // A second open file description of the same file, the one that reads directly.
        // Opened through /proc rather than by path: a segment file may have been renamed.
        let path = format!("/proc/self/fd/{}", self.0.as_raw_fd());
        let flags = OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC;
        let direct = File::from(rustix::fs::open(path.as_str(), flags, Mode::empty()).ok()?);
        match direct.read_at(buf, position) {
            // The file system or device refuses this alignment: read through the cache.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => None,
            result => Some(result),
        }
    }

    fn release_cache(&self, position: u64, len: u64) {
        if let Some(len) = std::num::NonZeroU64::new(len) {
            // Advice only: a file system that cannot drop pages keeps them.
            let _ = rustix::fs::fadvise(&self.0, position, Some(len), rustix::fs::Advice::DontNeed);
        }
    }
}

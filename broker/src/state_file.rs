//! Small state files replaced atomically: temp file, fsync, rename, fsync the directory, so
//! that a crash leaves either the old content or the new, never a mix or nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a state file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {path}")]
pub struct StateFileError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl StateFileError {
    /// A full disk (or a spent quota) before the rename: the old content is untouched, and
    /// the next attempt writes the temp file afresh.
    pub fn is_disk_full(&self) -> bool {
        use std::io::ErrorKind;
        matches!(
            self.source.kind(),
            ErrorKind::StorageFull | ErrorKind::QuotaExceeded
        ) && matches!(self.op, OP_CREATE | OP_WRITE | OP_SYNC)
    }
}

/// The steps before the rename, named in [`StateFileError::op`].
const OP_CREATE: &str = "create";
const OP_WRITE: &str = "write";
const OP_SYNC: &str = "sync";

fn failed(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StateFileError + use<> {
    let path = path.to_path_buf();
    move |source| StateFileError { op, path, source }
}

/// Replaces `path` with `bytes`: temp file, fsync, rename, fsync the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StateFileError> {
    write_with_mode(path, bytes, 0o666)
}

/// [`write_atomically`] for a secret: readable and writable by the owner only, from the
/// moment the file exists.
pub fn write_secret_atomically(path: &Path, bytes: &[u8]) -> Result<(), StateFileError> {
    write_with_mode(path, bytes, 0o600)
}

fn write_with_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateFileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let temp = path.with_extension("tmp");
    // A temp file left by a crash may have another mode: start afresh.
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .map_err(failed(OP_CREATE, &temp))?;
    file.write_all(bytes).map_err(failed(OP_WRITE, &temp))?;
    file.sync_all().map_err(failed(OP_SYNC, &temp))?;
    std::fs::rename(&temp, path).map_err(failed("rename a file to", path))?;
    sync_dir(dir).map_err(failed("sync the directory", dir))
}

/// Creates `dir` and its missing parents, each durable (its parent synced) when it returns.
pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    use floe_hot_log::Storage;
    for made in floe_hot_log::FsStorage.create_dir_all(dir)? {
        if let Some(parent) = made.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Makes `dir`'s entries (files created, renamed or removed in it) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

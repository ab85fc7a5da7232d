//! [`CrashStorage`]: an in-memory [`Storage`] that keeps what was written apart from what is
//! durable, and produces the image a crash at any moment would leave behind.
//!
//! The model, deliberately pessimistic:
//! - a file's data and length are durable only up to its last [`StorageFile::sync_data`];
//!   after a crash a file that was only appended to since then holds its durable bytes plus
//!   any prefix of the newer ones, possibly ending in zeros (length reached the disk, data
//!   did not); a file truncated or overwritten since holds either its old or its new bytes;
//! - creating, renaming and removing names in a directory — files and directories alike — is
//!   durable only after [`Storage::sync_dir`] on that directory; after a crash any prefix of
//!   each directory's pending operations survives, and a directory that does not survive
//!   takes everything under it along (a root, which has no parent, is durable at once).
//!
//! Faults can be injected: a write budget after which writes fail as a full disk would
//! (writing what fits first), a failing next `sync_data`, and slow syncs of some files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Storage, StorageFile};

/// Where a crash image was taken: just before the `index`-th sync took effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPoint {
    /// 0 for the first sync of this storage's life.
    pub index: u64,
    /// The file or directory being synced.
    pub path: PathBuf,
}

type SyncHook = Arc<dyn Fn(SyncPoint, CrashImage) + Send + Sync>;

/// In-memory storage with crash images. Clones share the same state.
#[derive(Clone, Default)]
pub struct CrashStorage {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for CrashStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashStorage").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    files: HashMap<u64, FileData>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    pending: BTreeMap<PathBuf, Vec<DirOp>>,
    dirs: BTreeSet<PathBuf>,
    durable_dirs: BTreeSet<PathBuf>,
    write_budget: Option<u64>,
    fail_next_sync: bool,
    sync_count: u64,
    hook: Option<SyncHook>,
    /// Syncs of paths ending with this take this long (before they take effect).
    slow: Option<(String, Duration)>,
}

#[derive(Clone, Default)]
struct FileData {
    written: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Clone, Debug)]
enum DirOp {
    Create { name: PathBuf, id: u64 },
    CreateDir { name: PathBuf },
    Remove { name: PathBuf },
    Rename { from: PathBuf, to: PathBuf },
}

/// A frozen state from which concrete post-crash storages are drawn.
#[derive(Clone)]
pub struct CrashImage {
    files: HashMap<u64, FileData>,
    durable_names: BTreeMap<PathBuf, u64>,
    durable_dirs: BTreeSet<PathBuf>,
    pending: BTreeMap<PathBuf, Vec<DirOp>>,
}

impl fmt::Debug for CrashImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashImage")
            .field(
                "durable_names",
                &self.durable_names.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl CrashImage {
    /// One storage a crash could leave; `seed` picks which unsynced writes and directory
    /// operations survive. The result has everything durable.
    pub fn restore(&self, seed: u64) -> CrashStorage {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut names = self.durable_names.clone();
        let mut dirs = self.durable_dirs.clone();
        for ops in self.pending.values() {
            let keep = rng.random_range(0..=ops.len());
            for op in &ops[..keep] {
                apply(&mut names, &mut dirs, op);
            }
        }
        self.materialize(names, dirs, |data| surviving_bytes(data, &mut rng))
    }

    /// The storage if every pending write and directory operation happened to survive.
    pub fn restore_everything(&self) -> CrashStorage {
        let mut names = self.durable_names.clone();
        let mut dirs = self.durable_dirs.clone();
        for op in self.pending.values().flatten() {
            apply(&mut names, &mut dirs, op);
        }
        self.materialize(names, dirs, |data| data.written.clone())
    }

    /// A storage holding `names` in `dirs`, each file with the bytes `survive` picks, all
    /// durable. What lies in a directory that did not survive is gone with it.
    fn materialize(
        &self,
        mut names: BTreeMap<PathBuf, u64>,
        mut dirs: BTreeSet<PathBuf>,
        mut survive: impl FnMut(&FileData) -> Vec<u8>,
    ) -> CrashStorage {
        // Outermost first, so a directory is judged after its parent.
        let all: Vec<PathBuf> = dirs.iter().cloned().collect();
        for dir in all {
            if !in_surviving_dir(&dir, &dirs) {
                dirs.remove(&dir);
            }
        }
        names.retain(|name, _| in_surviving_dir(name, &dirs));
        let empty = FileData::default();
        let files = names
            .values()
            .map(|id| {
                let bytes = survive(self.files.get(id).unwrap_or(&empty));
                (
                    *id,
                    FileData {
                        written: bytes.clone(),
                        durable: bytes,
                    },
                )
            })
            .collect();
        let inner = Inner {
            next_id: self.files.keys().max().map_or(0, |m| m + 1),
            files,
            durable_names: names.clone(),
            names,
            durable_dirs: dirs.clone(),
            dirs,
            ..Inner::default()
        };
        CrashStorage {
            inner: Arc::new(Mutex::new(inner)),
        }
    }
}

/// Whether `path`'s parent is in `dirs`; a path without one (a root) always is.
fn in_surviving_dir(path: &Path, dirs: &BTreeSet<PathBuf>) -> bool {
    path.parent()
        .is_none_or(|p| p.as_os_str().is_empty() || dirs.contains(p))
}

fn surviving_bytes(data: &FileData, rng: &mut SmallRng) -> Vec<u8> {
    let (written, durable) = (&data.written, &data.durable);
    if written.len() >= durable.len() && written.starts_with(durable) {
        let extra = written.len() - durable.len();
        let kept = rng.random_range(0..=extra);
        let mut out = written[..durable.len() + kept].to_vec();
        if kept > 0 && rng.random_bool(0.25) {
            // The length reached the disk but the last blocks of data did not.
            let zeroed = rng.random_range(1..=kept);
            let len = out.len();
            out[len - zeroed..].fill(0);
        }
        out
    } else if rng.random_bool(0.5) {
        durable.clone()
    } else {
        written.clone()
    }
}

fn apply(names: &mut BTreeMap<PathBuf, u64>, dirs: &mut BTreeSet<PathBuf>, op: &DirOp) {
    match op {
        DirOp::Create { name, id } => {
            names.insert(name.clone(), *id);
        }
        DirOp::CreateDir { name } => {
            dirs.insert(name.clone());
        }
        DirOp::Remove { name } => {
            names.remove(name);
        }
        DirOp::Rename { from, to } => {
            if let Some(id) = names.remove(from) {
                names.insert(to.clone(), id);
            }
        }
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{}", path.display()))
}

impl CrashStorage {
    /// A new, empty storage.
    pub fn new() -> CrashStorage {
        CrashStorage::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock already failed the test; keep the state usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The image a crash right now would leave.
    pub fn crash_image(&self) -> CrashImage {
        self.lock().image()
    }

    /// Calls `hook` with a crash image just before every sync takes effect. The hook runs
    /// with the storage locked, so that the image and whatever the hook reads of the
    /// program's progress are of the same moment: it must not call the storage.
    pub fn on_sync(&self, hook: impl Fn(SyncPoint, CrashImage) + Send + Sync + 'static) {
        self.lock().hook = Some(Arc::new(hook));
    }

    /// Number of syncs (file or directory) so far.
    pub fn sync_count(&self) -> u64 {
        self.lock().sync_count
    }

    /// After `bytes` more bytes, writes fail with `StorageFull` (a full disk).
    pub fn fail_writes_after(&self, bytes: u64) {
        self.lock().write_budget = Some(bytes);
    }

    /// Lifts a write budget set by [`Self::fail_writes_after`].
    pub fn allow_writes(&self) {
        self.lock().write_budget = None;
    }

    /// Syncs of files or directories whose path ends with `suffix` take `delay` (a slow
    /// disk), spent before the sync takes effect and without holding the storage.
    pub fn slow_syncs(&self, suffix: &str, delay: Duration) {
        self.lock().slow = Some((suffix.to_string(), delay));
    }

    /// Waits as [`Self::slow_syncs`] asks for a sync of `path`.
    fn before_sync(&self, path: &Path) {
        let delay = self
            .lock()
            .slow
            .as_ref()
            .filter(|(suffix, _)| path.to_string_lossy().ends_with(suffix.as_str()))
            .map(|(_, delay)| *delay);
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
    }

    /// The next `sync_data` fails with an I/O error and makes nothing durable.
    pub fn fail_next_sync(&self) {
        self.lock().fail_next_sync = true;
    }

    /// The current (written) contents of a file, for test inspection.
    pub fn contents(&self, path: &Path) -> io::Result<Vec<u8>> {
        let inner = self.lock();
        let id = inner.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(inner.files[id].written.clone())
    }

    /// Replaces a file's contents, durably, bypassing the log (to corrupt data in tests).
    pub fn replace_contents(&self, path: &Path, bytes: Vec<u8>) -> io::Result<()> {
        let mut inner = self.lock();
        let id = *inner.names.get(path).ok_or_else(|| not_found(path))?;
        let file = inner.files.entry(id).or_default();
        file.written = bytes.clone();
        file.durable = bytes;
        Ok(())
    }
}

impl Inner {
    fn image(&self) -> CrashImage {
        CrashImage {
            files: self.files.clone(),
            durable_names: self.durable_names.clone(),
            durable_dirs: self.durable_dirs.clone(),
            pending: self.pending.clone(),
        }
    }

    fn sync_point(&mut self, path: &Path) -> Option<(SyncHook, SyncPoint, CrashImage)> {
        let index = self.sync_count;
        self.sync_count += 1;
        let hook = self.hook.clone()?;
        let point = SyncPoint {
            index,
            path: path.to_path_buf(),
        };
        Some((hook, point, self.image()))
    }
}

impl Storage for CrashStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut inner = self.lock();
        let mut created = Vec::new();
        let ancestors: Vec<&Path> = dir.ancestors().collect();
        for made in ancestors.into_iter().rev() {
            if made.as_os_str().is_empty() || !inner.dirs.insert(made.to_path_buf()) {
                continue;
            }
            match made.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => {
                    let op = DirOp::CreateDir {
                        name: made.to_path_buf(),
                    };
                    inner
                        .pending
                        .entry(parent.to_path_buf())
                        .or_default()
                        .push(op);
                }
                _ => {
                    inner.durable_dirs.insert(made.to_path_buf());
                }
            }
            created.push(made.to_path_buf());
        }
        Ok(created)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let inner = self.lock();
        if !inner.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(inner
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut inner = self.lock();
        let id = match inner.names.get(path) {
            Some(id) => *id,
            None if create => {
                if !inner.dirs.contains(&parent(path)) {
                    return Err(not_found(&parent(path)));
                }
                let id = inner.next_id;
                inner.next_id += 1;
                inner.files.insert(id, FileData::default());
                inner.names.insert(path.to_path_buf(), id);
                let op = DirOp::Create {
                    name: path.to_path_buf(),
                    id,
                };
                inner.pending.entry(parent(path)).or_default().push(op);
                id
            }
            None => return Err(not_found(path)),
        };
        Ok(Arc::new(CrashFile {
            storage: self.clone(),
            id,
            path: path.to_path_buf(),
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut inner = self.lock();
        inner.names.remove(path).ok_or_else(|| not_found(path))?;
        let op = DirOp::Remove {
            name: path.to_path_buf(),
        };
        inner.pending.entry(parent(path)).or_default().push(op);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut inner = self.lock();
        let id = inner.names.remove(from).ok_or_else(|| not_found(from))?;
        inner.names.insert(to.to_path_buf(), id);
        let op = DirOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        };
        inner.pending.entry(parent(to)).or_default().push(op);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.before_sync(dir);
        let mut inner = self.lock();
        if let Some((hook, point, image)) = inner.sync_point(dir) {
            hook(point, image);
        }
        let ops = inner.pending.remove(dir).unwrap_or_default();
        let Inner {
            durable_names,
            durable_dirs,
            ..
        } = &mut *inner;
        for op in &ops {
            apply(durable_names, durable_dirs, op);
        }
        Ok(())
    }
}

#[derive(Debug)]
struct CrashFile {
    storage: CrashStorage,
    id: u64,
    path: PathBuf,
}

impl StorageFile for CrashFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        let inner = self.storage.lock();
        let data = &inner.files[&self.id].written;
        let start = (position as usize).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        let mut inner = self.storage.lock();
        let allowed = match inner.write_budget {
            Some(budget) => budget.min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        if let Some(budget) = inner.write_budget.as_mut() {
            *budget -= allowed as u64;
        }
        let data = &mut inner
            .files
            .get_mut(&self.id)
            .ok_or_else(|| not_found(&self.path))?;
        let start = position as usize;
        let end = start + allowed;
        if data.written.len() < end {
            data.written.resize(end, 0);
        }
        data.written[start..end].copy_from_slice(&buf[..allowed]);
        if allowed < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "no space left on device",
            ));
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.storage.lock().files[&self.id].written.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut inner = self.storage.lock();
        let data = inner
            .files
            .get_mut(&self.id)
            .ok_or_else(|| not_found(&self.path))?;
        data.written.resize(len as usize, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.storage.before_sync(&self.path);
        let mut inner = self.storage.lock();
        if let Some((hook, point, image)) = inner.sync_point(&self.path) {
            hook(point, image);
        }
        if std::mem::take(&mut inner.fail_next_sync) {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        let data = inner
            .files
            .get_mut(&self.id)
            .ok_or_else(|| not_found(&self.path))?;
        data.durable = data.written.clone();
        Ok(())
    }
}

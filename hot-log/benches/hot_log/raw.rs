//! The disk's own limits: sequential `write` + `fdatasync` on a plain file, with no log.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::{BenchResult, Throughput, sys};

fn create_fresh(path: &Path) -> BenchResult<File> {
    Ok(OpenOptions::new().write(true).create_new(true).open(path)?)
}

/// Appends a fixed buffer (`copies` batches) to a fresh file, each write followed by
/// `fdatasync`; keeps the totals of its timed runs.
pub struct RawAppender {
    file: File,
    buf: Vec<u8>,
    total: Throughput,
}

impl RawAppender {
    pub fn create(path: &Path, batch: &[u8], copies: usize) -> BenchResult<RawAppender> {
        Ok(RawAppender {
            file: create_fresh(path)?,
            buf: batch.repeat(copies),
            total: Throughput::default(),
        })
    }

    /// One write of the buffer, durable on return.
    pub fn append_synced(&mut self) -> BenchResult<()> {
        self.file.write_all(&self.buf)?;
        self.file.sync_data()?;
        Ok(())
    }

    /// `writes` appends, timed.
    pub fn run(&mut self, writes: u64) -> BenchResult<Throughput> {
        let cpu = sys::cpu_time();
        let start = Instant::now();
        for _ in 0..writes {
            self.append_synced()?;
        }
        let run = Throughput {
            bytes: writes * self.buf.len() as u64,
            elapsed: start.elapsed(),
            syncs: writes,
            cpu: sys::cpu_time().saturating_sub(cpu),
        };
        self.total.add(&run);
        Ok(run)
    }

    pub fn total(&self) -> Throughput {
        self.total
    }
}

/// The floor of any design with a syncer thread: the caller writes, hands the `fdatasync` to
/// a second thread and sleeps until it is done (one wake-up each way, as in the log).
pub struct HelperSyncer {
    file: Arc<File>,
    position: u64,
    shared: Arc<HelperShared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct HelperShared {
    state: Mutex<HelperState>,
    requested: Condvar,
    done: Condvar,
}

#[derive(Default)]
struct HelperState {
    /// Syncs asked for so far.
    requested: u64,
    /// Requests covered by a finished sync.
    done: u64,
    stop: bool,
    failed: bool,
}

impl HelperShared {
    fn lock(&self) -> MutexGuard<'_, HelperState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl HelperSyncer {
    pub fn create(path: &Path) -> BenchResult<HelperSyncer> {
        let file = Arc::new(create_fresh(path)?);
        let shared = Arc::new(HelperShared::default());
        let (for_thread, file_for_thread) = (shared.clone(), file.clone());
        let thread = std::thread::Builder::new()
            .name("bench-helper-sync".into())
            .spawn(move || helper_loop(&for_thread, &file_for_thread))?;
        Ok(HelperSyncer {
            file,
            position: 0,
            shared,
            thread: Some(thread),
        })
    }

    /// Writes `batch` here, has the helper thread sync it, returns once it has.
    pub fn append_synced(&mut self, batch: &[u8]) -> BenchResult<()> {
        self.file.write_all_at(batch, self.position)?;
        self.position += batch.len() as u64;
        let mut state = self.shared.lock();
        state.requested += 1;
        let want = state.requested;
        self.shared.requested.notify_one();
        while state.done < want && !state.failed {
            state = self
                .shared
                .done
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        if state.failed {
            return Err("the helper thread's fdatasync failed".into());
        }
        Ok(())
    }
}

impl Drop for HelperSyncer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.requested.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn helper_loop(shared: &HelperShared, file: &File) {
    let mut state = shared.lock();
    loop {
        while state.requested == state.done && !state.stop {
            state = shared
                .requested
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        if state.stop {
            return;
        }
        let target = state.requested;
        drop(state);
        let result = file.sync_data();
        state = shared.lock();
        state.done = target;
        state.failed |= result.is_err();
        shared.done.notify_all();
    }
}

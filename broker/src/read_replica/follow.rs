//! Following one partition's leader: a task fetches the committed tail from the leader, as a
//! consumer would, into the partition's [`Window`], starting at the tier's end so that the
//! window holds what the tier does not; consumers waiting on the tail are woken by each
//! append.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_client::Error;
use floe_wire::frame::{ErrorCode, ErrorDetails, FetchPosition, FetchResponse};
use floe_wire::{Offset, PartitionId, StreamName};
use tokio::sync::watch;

use super::ReadReplica;
use super::window::{Window, WindowRead};

/// Bytes asked of the leader per fetch.
const FOLLOW_FETCH_BYTES: u32 = 4 << 20;
/// How long one follow fetch may wait at the leader's tail.
const FOLLOW_WAIT: Duration = Duration::from_secs(5);
/// Pause after a failed follow fetch, doubled per failure up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// What the follower learnt from the leader's last answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// The window has a start (the first answer came).
    pub started: bool,
    /// The window's end: the next offset asked of the leader.
    pub end: Offset,
    pub high_watermark: Offset,
    pub log_start: Offset,
    /// The leader refused for good (the stream or partition does not exist).
    pub failed: Option<ErrorCode>,
}

/// One followed partition.
#[derive(Debug)]
pub struct Tail {
    window: Mutex<Option<Window>>,
    progress: watch::Sender<Progress>,
    last_used: Mutex<Instant>,
    stopped: AtomicBool,
}

impl Tail {
    /// Starts following `partition` of `stream`.
    pub fn start(
        state: Arc<ReadReplica>,
        stream: StreamName,
        partition: PartitionId,
        window_bytes: usize,
    ) -> Arc<Tail> {
        let tail = Arc::new(Tail {
            window: Mutex::new(None),
            progress: watch::Sender::new(Progress::default()),
            last_used: Mutex::new(Instant::now()),
            stopped: AtomicBool::new(false),
        });
        tokio::spawn(follow(
            Arc::downgrade(&state),
            tail.clone(),
            stream,
            partition,
            window_bytes,
        ));
        tail
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.progress.send_modify(|_| {});
    }

    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    pub fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Whole batches from `from`; `None` before the window has a start.
    pub fn read(&self, from: Offset, max_bytes: usize) -> Option<WindowRead> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        window.as_ref().map(|w| w.read(from, max_bytes))
    }

    fn set_window(&self, start: Offset, max_bytes: usize) {
        *self.window.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Window::new(start, max_bytes));
        self.progress.send_modify(|p| {
            p.started = true;
            p.end = start;
        });
    }

    fn end(&self) -> Option<Offset> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        window.as_ref().map(Window::end)
    }

    /// Adds a leader's answer to the window and publishes the new progress.
    fn append(&self, records: &Bytes, high_watermark: Offset, log_start: Offset) {
        let end = {
            let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
            let Some(window) = window.as_mut() else {
                return;
            };
            if !records.is_empty()
                && let Err(e) = window.append(records)
            {
                tracing::warn!(error = %e, "leader's answer does not continue the window; restarting it");
                window.reset(window.end());
            }
            window.end()
        };
        self.progress.send_modify(|p| {
            p.end = end;
            p.high_watermark = high_watermark;
            p.log_start = log_start;
        });
    }

    /// Restarts the window at `start` (the leader's log does not hold the window's end).
    fn restart(&self, start: Offset) {
        if let Some(window) = self
            .window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            window.reset(start);
        }
        self.progress.send_modify(|p| p.end = start);
    }

    fn fail(&self, code: ErrorCode) {
        self.progress.send_modify(|p| p.failed = Some(code));
        self.stop();
    }
}

/// The follower task: runs until the tail is stopped or the replica is gone.
async fn follow(
    state: Weak<ReadReplica>,
    tail: Arc<Tail>,
    stream: StreamName,
    partition: PartitionId,
    window_bytes: usize,
) {
    let mut failures = 0u32;
    while !tail.stopped() {
        let Some(state) = state.upgrade() else {
            return;
        };
        if *state.shutdown.borrow() {
            return;
        }
        let from = match tail.end() {
            Some(end) => end,
            None => {
                let start = window_start(&state, &stream, partition).await;
                tail.set_window(start, window_bytes);
                start
            }
        };
        let answer = state
            .brokers
            .fetch_batches(
                &stream,
                partition,
                FetchPosition::Offset(from),
                FOLLOW_FETCH_BYTES,
                FOLLOW_WAIT,
            )
            .await;
        drop(state);
        let next = take_answer(&tail, &stream, partition, from, answer, &mut failures).await;
        if next.is_break() {
            return;
        }
    }
}

/// Where a new window of `partition` starts.
async fn window_start(state: &ReadReplica, stream: &StreamName, partition: PartitionId) -> Offset {
    // Start at the tier's end: older history is read from the tier.
    match ReadReplica::tier_path(stream, partition) {
        Some(path) => match state.reader.manifest(&path).await {
            Ok(manifest) => manifest.tier_end(),
            Err(e) => {
                tracing::debug!(%stream, partition = partition.get(), error = %e, "reading the manifest");
                Offset::ZERO
            }
        },
        None => Offset::ZERO,
    }
}

/// Takes the leader's answer to a follow fetch from `from` into the tail; after a failure,
/// pauses before the next fetch (`failures` counts them in a row). Breaks when the leader
/// refused for good.
async fn take_answer(
    tail: &Tail,
    stream: &StreamName,
    partition: PartitionId,
    from: Offset,
    answer: Result<FetchResponse, Error>,
    failures: &mut u32,
) -> ControlFlow<()> {
    match answer {
        Ok(response) => {
            *failures = 0;
            tail.append(
                &response.records,
                response.high_watermark,
                response.log_start,
            );
        }
        Err(Error::Broker {
            code: ErrorCode::OffsetOutOfRange,
            details: Some(ErrorDetails::OffsetRange { log_start, log_end }),
            ..
        }) => {
            // The window's end left the leader's log (retention, or a new log after a
            // reassignment): continue where the leader's log is.
            let restart = if from < log_start { log_start } else { log_end };
            tracing::info!(%stream, partition = partition.get(), %from, %restart, "the window restarts");
            tail.restart(restart);
        }
        Err(Error::Broker {
            code: code @ (ErrorCode::UnknownStream | ErrorCode::UnknownPartition),
            ..
        }) => {
            tail.fail(code);
            return ControlFlow::Break(());
        }
        Err(e) => {
            tracing::debug!(%stream, partition = partition.get(), error = %e, "follow fetch failed");
            let pause = RETRY_BASE
                .saturating_mul(1 << (*failures).min(5))
                .min(RETRY_MAX);
            *failures += 1;
            tokio::time::sleep(pause).await;
        }
    }
    ControlFlow::Continue(())
}

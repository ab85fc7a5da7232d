//! [`Uploader`]: moves a partition's sealed, committed segments into the tier. The plan
//! (what to upload) is a pure function of the sealed segments, the high watermark and the
//! manifest; the shell uploads with bounded concurrency and retries, and commits what it
//! uploaded within its commit window, so that the collector never deletes an object a
//! commit in flight may still reference.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use floe_hot_log::SealedSegment;
use floe_wire::{LeaderEpoch, Offset};
use futures::StreamExt;

use crate::manifest::{Change, ManifestLog, ManifestState, TieredSegment};
use crate::retry::RetryPolicy;
use crate::segment::{UploadSettings, UploadedSegment, YieldToSyncs, upload_segment};
use crate::{PartitionPath, TierError, TierStore};

/// How the uploader works.
#[derive(Debug, Clone)]
pub struct UploaderConfig {
    /// Segment uploads in flight at once (at least 1).
    pub concurrency: usize,
    /// Footer index density.
    pub index_interval_bytes: u32,
    /// Segments up to this size go up in one PUT (buffered in memory); larger ones as
    /// multipart uploads, a request per 8 MiB part. Default 128 MiB, above the default
    /// segment size: a GiB ingested costs 16 PUTs.
    pub single_put_max_bytes: u64,
    /// Memory for single-PUT buffers, shared by every uploader built from clones of this
    /// config: a single-PUT upload waits here for its size.
    pub buffer: UploadBuffer,
    pub retry: RetryPolicy,
    /// Called after a run's objects are uploaded, just before their commit: a failpoint
    /// for crash tests, set in-process only (the broker sets it from `FLOE_TEST_FAILPOINT`
    /// in debug builds and with its `failpoints` feature, never in a release build).
    pub before_commit: Option<BeforeCommit>,
    /// Uploads wait for pauses in the logs' syncs while their backlog is small
    /// ([`YieldToSyncs`]); `None` uploads at once.
    pub yield_to: Option<YieldToSyncs>,
    /// An uploaded object is committed only while less than this has passed (by `clock`)
    /// since its upload started; an older one is left to the [`crate::Collector`] and
    /// uploaded again by a later run. A run commits what it uploaded each time its oldest
    /// uncommitted object is half this old, so a long run (a backlog after an outage)
    /// commits as it goes. Must be below the collector's grace by more than the longest
    /// commit request and the skew between the clocks of uploader, collector and store
    /// (`docs/tiering.md`, "The commit window"); the broker uses half the grace.
    pub commit_window_ms: i64,
    /// The time, read at each upload's start and before each commit.
    pub clock: UploadClock,
}

/// Milliseconds since the Unix epoch as the uploader reads them: the wall clock by default
/// ([`UploadClock::system`]); a test drives its own.
#[derive(Clone)]
pub struct UploadClock(pub Arc<dyn Fn() -> i64 + Send + Sync>);

impl UploadClock {
    pub fn system() -> UploadClock {
        UploadClock(Arc::new(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        }))
    }

    fn now_ms(&self) -> i64 {
        (self.0)()
    }
}

impl std::fmt::Debug for UploadClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UploadClock")
    }
}

/// The default commit window: half the broker's default collector grace of 10 minutes.
pub const COMMIT_WINDOW_MS_DEFAULT: i64 = 5 * 60 * 1000;

/// Memory that buffered single-PUT uploads share; see [`UploaderConfig::buffer`].
#[derive(Debug, Clone)]
pub struct UploadBuffer {
    mebibytes: Arc<tokio::sync::Semaphore>,
    capacity_mib: u32,
}

impl UploadBuffer {
    pub fn new(bytes: u64) -> UploadBuffer {
        let capacity_mib = u32::try_from(bytes.div_ceil(1 << 20).max(1)).unwrap_or(u32::MAX);
        UploadBuffer {
            mebibytes: Arc::new(tokio::sync::Semaphore::new(capacity_mib as usize)),
            capacity_mib,
        }
    }

    /// Waits until `bytes` (at most the whole buffer) are free and holds them.
    async fn hold(&self, bytes: u64) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let mib = u32::try_from(bytes.div_ceil(1 << 20).max(1))
            .unwrap_or(u32::MAX)
            .min(self.capacity_mib);
        self.mebibytes.acquire_many(mib).await.ok()
    }
}

/// See [`UploaderConfig::before_commit`].
#[derive(Clone)]
pub struct BeforeCommit(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for BeforeCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeCommit")
    }
}

impl Default for UploaderConfig {
    fn default() -> Self {
        UploaderConfig {
            concurrency: 2,
            index_interval_bytes: 16 * 1024,
            single_put_max_bytes: 128 << 20,
            buffer: UploadBuffer::new(256 << 20),
            retry: RetryPolicy::default(),
            before_commit: None,
            yield_to: None,
            commit_window_ms: COMMIT_WINDOW_MS_DEFAULT,
            clock: UploadClock::system(),
        }
    }
}

/// Sealed data waiting to be tiered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub segments: u64,
    pub bytes: u64,
}

/// What one [`Uploader::run`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct UploadReport {
    pub committed: Vec<TieredSegment>,
    /// The manifest version that holds them (unchanged when nothing was committed).
    pub version: u64,
    pub tier_end: Offset,
}

/// An uploaded object waiting for its commit, and when its upload started.
#[derive(Debug)]
struct Uploaded {
    segment: UploadedSegment,
    started_ms: i64,
}

/// Where a run stands: the manifest as last committed, what it committed, and the uploaded
/// objects waiting for a commit (in order, contiguous after the state's end).
#[derive(Debug)]
struct RunProgress {
    state: ManifestState,
    committed: Vec<TieredSegment>,
    waiting: Vec<Uploaded>,
}

impl RunProgress {
    /// How long the oldest waiting object has waited since its upload started; 0 for none.
    fn oldest_wait_ms(&self, now_ms: i64) -> i64 {
        self.waiting
            .iter()
            .map(|u| now_ms.saturating_sub(u.started_ms))
            .max()
            .unwrap_or(0)
    }
}

/// One segment to upload, from `from` on.
#[derive(Debug, Clone)]
pub struct PlannedUpload {
    pub segment: SealedSegment,
    pub from: Offset,
}

/// The segments to upload, in order: sealed, entirely below `high_watermark`, and beyond what
/// the manifest holds. Errors when the local log does not continue where the tier ends.
pub fn plan_uploads(
    sealed: &[SealedSegment],
    high_watermark: Offset,
    manifest: &ManifestState,
) -> Result<Vec<PlannedUpload>, TierError> {
    let mut expected = manifest.end_offset.map(Offset::new);
    let mut plan = Vec::new();
    for segment in sealed {
        if segment.next_offset > high_watermark {
            break;
        }
        if expected.is_some_and(|e| segment.next_offset <= e) {
            continue;
        }
        let from = expected.unwrap_or(segment.base_offset);
        if segment.base_offset > from {
            return Err(TierError::LocalGap {
                tier_end: from,
                local_start: segment.base_offset,
            });
        }
        plan.push(PlannedUpload {
            segment: segment.clone(),
            from,
        });
        expected = Some(segment.next_offset);
    }
    Ok(plan)
}

/// What [`Uploader::fence`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// The newest epoch committed before the fence (the fence's own when the manifest was at
    /// it already).
    pub before: LeaderEpoch,
    /// Where the tier ends, for good as far as older epochs go.
    pub tier_end: Offset,
}

/// Tiers one partition. The driving contract: call [`Uploader::run`] whenever segments were
/// sealed or the high watermark moved (one run at a time; concurrent calls queue); let local
/// retention delete only what [`Uploader::is_tiered`] confirms; export [`Uploader::waiting`].
/// A segment is in the tier only once the manifest version listing it is committed.
#[derive(Debug)]
pub struct Uploader {
    store: TierStore,
    manifest: ManifestLog,
    config: UploaderConfig,
    known: tokio::sync::Mutex<Option<ManifestState>>,
    loaded: AtomicBool,
    tier_start: AtomicU64,
    tier_end: AtomicU64,
    backlog_segments: AtomicU64,
    backlog_bytes: AtomicU64,
}

impl Uploader {
    pub fn new(store: TierStore, partition: PartitionPath, config: UploaderConfig) -> Uploader {
        Uploader {
            manifest: ManifestLog::new(store.clone(), partition),
            store,
            config,
            known: tokio::sync::Mutex::new(None),
            loaded: AtomicBool::new(false),
            tier_start: AtomicU64::new(0),
            tier_end: AtomicU64::new(0),
            backlog_segments: AtomicU64::new(0),
            backlog_bytes: AtomicU64::new(0),
        }
    }

    pub fn manifest(&self) -> &ManifestLog {
        &self.manifest
    }

    /// Uploads every sealed segment wholly below `high_watermark` that the tier lacks, in
    /// order, one object each, and commits them as leader `epoch`: in one manifest version
    /// at the end, or in several when the run outlasts half the commit window
    /// ([`UploaderConfig::commit_window_ms`]). A failed upload stops the run after
    /// committing the ones before it and returns the error; so does a local segment that
    /// fails its checksums ([`TierError::LocalSegment`]), which is never uploaded. Objects
    /// that waited beyond the commit window are not committed
    /// ([`TierError::CommitWindowPassed`]); the next run uploads their segments again.
    pub async fn run(
        &self,
        sealed: &[SealedSegment],
        high_watermark: Offset,
        epoch: LeaderEpoch,
    ) -> Result<UploadReport, TierError> {
        let mut known = self.known.lock().await;
        self.note_waiting(sealed, high_watermark);
        let state = match known.take() {
            Some(state) => self.manifest.catch_up(state).await?,
            None => {
                let retry = &self.config.retry;
                retry
                    .run(|e| self.store.worth_retrying(e), || self.manifest.load())
                    .await?
            }
        };
        self.note_state(&state);
        if state.epoch > epoch {
            *known = Some(state.clone());
            return Err(TierError::Fenced {
                writer: epoch,
                committed: state.epoch,
            });
        }
        let plan = plan_uploads(sealed, high_watermark, &state)?;
        self.set_backlog(&plan);
        let mut progress = RunProgress {
            state,
            committed: Vec::new(),
            waiting: Vec::new(),
        };
        let result = self.upload_and_commit(&plan, epoch, &mut progress).await;
        self.set_backlog(&plan[progress.committed.len()..]);
        let report = UploadReport {
            committed: progress.committed,
            version: progress.state.version,
            tier_end: progress.state.tier_end(),
        };
        *known = Some(progress.state);
        result.map(|()| report)
    }

    /// Makes `epoch` the manifest's epoch before this writer writes in it
    /// ([`ManifestLog::fence`]): from then on no writer of an older epoch commits, so the
    /// tier's end it returns is final for them. A partition's new owner fences before it
    /// takes writes. Fails with [`TierError::Fenced`] when a newer epoch committed already.
    pub async fn fence(&self, epoch: LeaderEpoch) -> Result<Fence, TierError> {
        let mut known = self.known.lock().await;
        let retry = &self.config.retry;
        let now_ms = self.config.clock.now_ms();
        let (before, state) = retry
            .run(
                |e| self.store.worth_retrying(e),
                || self.manifest.fence(known.clone(), epoch, now_ms),
            )
            .await?;
        self.note_state(&state);
        let fence = Fence {
            before,
            tier_end: state.tier_end(),
        };
        *known = Some(state);
        Ok(fence)
    }

    /// Reads the manifest's newer versions, e.g. after tier retention committed a removal,
    /// so that [`Uploader::tier_start`] and [`Uploader::tier_end`] are current.
    pub async fn refresh(&self) -> Result<(), TierError> {
        let mut known = self.known.lock().await;
        let state = match known.clone() {
            Some(state) => self.manifest.catch_up(state).await?,
            None => self.manifest.load().await?,
        };
        self.note_state(&state);
        *known = Some(state);
        Ok(())
    }

    /// Whether a [`Uploader::run`] may have work: the manifest was never read, or sealed data
    /// below `high_watermark` reaches beyond the tier (`sealed_end` is the end of the newest
    /// sealed segment). Costs no I/O; may say yes when a run then finds the only new segment
    /// reaches above the high watermark.
    pub fn has_work(&self, sealed_end: Offset, high_watermark: Offset) -> bool {
        !self.loaded.load(Ordering::Acquire) || sealed_end.min(high_watermark) > self.tier_end()
    }

    fn note_state(&self, state: &ManifestState) {
        self.tier_start
            .store(state.start_offset().get(), Ordering::Release);
        self.tier_end
            .store(state.tier_end().get(), Ordering::Release);
        self.loaded.store(true, Ordering::Release);
    }

    /// Until the manifest is read, the last known tier end tells what waits, so that the
    /// backlog grows while the store is unreachable.
    fn note_waiting(&self, sealed: &[SealedSegment], high_watermark: Offset) {
        let sizes = sealed.iter().map(|seg| (seg.next_offset, seg.size_bytes));
        let waiting = self.waiting(sizes, high_watermark);
        self.store_backlog(waiting.segments as usize, waiting.bytes);
    }

    /// What waits for upload now, given each sealed segment's end offset and size
    /// (`Log::sealed_sizes`): the segments wholly below `high_watermark` that reach beyond
    /// the tier's end as last read. Unlike [`Uploader::backlog`], it counts the segments
    /// sealed since the last run, which may wait for the next one.
    pub fn waiting(
        &self,
        sealed: impl IntoIterator<Item = (Offset, u64)>,
        high_watermark: Offset,
    ) -> Backlog {
        let tier_end = self.tier_end();
        sealed
            .into_iter()
            .filter(|&(end, _)| end <= high_watermark && end > tier_end)
            .fold(Backlog::default(), |b, (_, size)| Backlog {
                segments: b.segments + 1,
                bytes: b.bytes + size,
            })
    }

    /// Uploads `plan` in order, committing what waits whenever the oldest of it is half
    /// the commit window old, and at the end (after a failure too).
    async fn upload_and_commit(
        &self,
        plan: &[PlannedUpload],
        epoch: LeaderEpoch,
        progress: &mut RunProgress,
    ) -> Result<(), TierError> {
        let partition = self.manifest.partition();
        let backlog: u64 = plan.iter().map(|p| p.segment.size_bytes).sum();
        let settings = &UploadSettings {
            index_interval_bytes: self.config.index_interval_bytes,
            single_put_max: self.config.single_put_max_bytes,
            yield_to: self
                .config
                .yield_to
                .clone()
                .filter(|y| backlog <= y.backlog_bytes_max),
        };
        // The futures are built before they enter the stream: a closure inside the stream
        // would make this future not `Send` for every lifetime, and so not spawnable.
        let pending: Vec<_> = plan
            .iter()
            .map(|p| async move {
                let single_put = p.segment.size_bytes <= self.config.single_put_max_bytes;
                let _held = match single_put {
                    true => self.config.buffer.hold(p.segment.size_bytes).await,
                    false => None,
                };
                // Before the object can exist: its age is never underestimated.
                let started_ms = self.config.clock.now_ms();
                let segment = self
                    .config
                    .retry
                    .run(
                        |e| self.store.worth_retrying(e),
                        move || {
                            upload_segment(
                                &self.store,
                                partition,
                                &p.segment,
                                p.from,
                                epoch,
                                settings,
                            )
                        },
                    )
                    .await?;
                Ok::<_, TierError>(Uploaded {
                    segment,
                    started_ms,
                })
            })
            .collect();
        let mut uploads = futures::stream::iter(pending).buffered(self.config.concurrency.max(1));
        let commit_every_ms = self.config.commit_window_ms / 2;
        while let Some(result) = uploads.next().await {
            match result {
                Ok(uploaded) => progress.waiting.push(uploaded),
                Err(e) => {
                    drop(uploads);
                    self.commit_waiting(epoch, progress).await?;
                    return Err(e);
                }
            }
            if progress.oldest_wait_ms(self.config.clock.now_ms()) >= commit_every_ms {
                self.commit_waiting(epoch, progress).await?;
            }
        }
        self.commit_waiting(epoch, progress).await
    }

    /// Commits the uploaded objects that wait, unless one of them waited beyond the commit
    /// window by the time of a commit request: then none is committed, and the collector
    /// may delete them. Either way none waits afterwards.
    async fn commit_waiting(
        &self,
        epoch: LeaderEpoch,
        progress: &mut RunProgress,
    ) -> Result<(), TierError> {
        let waiting = std::mem::take(&mut progress.waiting);
        let Some(first) = waiting.first() else {
            return Ok(());
        };
        if let Some(hook) = &self.config.before_commit {
            (hook.0)();
        }
        let change = Change {
            epoch,
            committed_at_ms: self.config.clock.now_ms(),
            added: waiting
                .iter()
                .map(|u| TieredSegment::from(&u.segment))
                .collect(),
            removed: Vec::new(),
        };
        let window_ms = self.config.commit_window_ms;
        let oldest_ms = waiting
            .iter()
            .map(|u| u.started_ms)
            .min()
            .unwrap_or(i64::MAX);
        let base_offset = first.segment.base_offset;
        let before = progress.state.clone();
        let state = self
            .config
            .retry
            .run(
                |e| self.store.worth_retrying(e),
                || async {
                    // Checked before every request: the invariant is about when the commit
                    // can land, and retries wait.
                    let waited_ms = self.config.clock.now_ms().saturating_sub(oldest_ms);
                    if waited_ms >= window_ms {
                        return Err(TierError::CommitWindowPassed {
                            base_offset,
                            waited_ms,
                            window_ms,
                        });
                    }
                    self.manifest.commit(Some(before.clone()), &change).await
                },
            )
            .await?;
        self.note_state(&state);
        progress.state = state;
        progress.committed.extend(change.added);
        Ok(())
    }

    fn set_backlog(&self, plan: &[PlannedUpload]) {
        self.store_backlog(plan.len(), plan.iter().map(|p| p.segment.size_bytes).sum());
    }

    fn store_backlog(&self, segments: usize, bytes: u64) {
        self.backlog_segments
            .store(segments as u64, Ordering::Relaxed);
        self.backlog_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Sealed data found waiting by the last run (what it planned, less what it committed).
    /// What waits now, segments sealed since included, is [`Uploader::waiting`].
    pub fn backlog(&self) -> Backlog {
        Backlog {
            segments: self.backlog_segments.load(Ordering::Relaxed),
            bytes: self.backlog_bytes.load(Ordering::Relaxed),
        }
    }

    /// The end of the committed tier as of the last run.
    pub fn tier_end(&self) -> Offset {
        Offset::new(self.tier_end.load(Ordering::Acquire))
    }

    /// The first tiered offset as of the last run (the end when the tier holds nothing), or
    /// `None` before the manifest was first read.
    pub fn tier_start(&self) -> Option<Offset> {
        self.loaded
            .load(Ordering::Acquire)
            .then(|| Offset::new(self.tier_start.load(Ordering::Acquire)))
    }

    /// Whether every record of `segment` is in a committed manifest version, so that local
    /// retention may delete it (the callback of `Log::apply_retention`).
    pub fn is_tiered(&self, segment: &SealedSegment) -> bool {
        segment.next_offset <= self.tier_end()
    }
}

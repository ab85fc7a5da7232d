//! The tiering loop: every partition's uploads of sealed committed segments (each its own
//! task, a bounded number at once), tier retention and the collection of unreferenced
//! objects, and the deletion of deleted streams' objects.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use floe_tier::{CorruptReason, TierError, apply_tier_retention};
use tokio::sync::{Semaphore, watch};

use super::{TierSettings, Tiering};
use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::partition::Partition;
use crate::partition::corrupt::CorruptPartition;
use crate::partitions::Partitions;
use floe_wire::ErrorChain;

/// What the loop works on.
#[derive(Debug, Clone)]
struct Work {
    tiering: Arc<Tiering>,
    partitions: Arc<Partitions>,
    metrics: Arc<Metrics>,
}

type Key = (String, u32);

/// The tiering loop, until shutdown.
pub(crate) async fn run(
    tiering: Arc<Tiering>,
    partitions: Arc<Partitions>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut schedule = Schedule::new(Work {
        tiering,
        partitions,
        metrics,
    });
    let mut tick = tokio::time::interval(schedule.settings.upload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => break,
        }
        schedule.uploads.retain(|_, task| !task.is_finished());
        schedule.start_deletions().await;
        schedule.start_uploads();
        schedule.start_collection();
    }
    schedule.abandon();
}

/// The loop's tasks in flight, and when each kind of work last started.
struct Schedule {
    state: Work,
    settings: TierSettings,
    /// Bounds the partitions uploading at once.
    permits: Arc<Semaphore>,
    uploads: HashMap<Key, tokio::task::JoinHandle<()>>,
    last_run: HashMap<Key, Instant>,
    collecting: Option<tokio::task::JoinHandle<()>>,
    deleting: Option<tokio::task::JoinHandle<()>>,
    last_collect: Instant,
}

impl Schedule {
    fn new(state: Work) -> Schedule {
        let settings = state.tiering.settings.clone();
        let permits = Arc::new(Semaphore::new(settings.partitions_in_parallel.max(1)));
        Schedule {
            state,
            settings,
            permits,
            uploads: HashMap::new(),
            last_run: HashMap::new(),
            collecting: None,
            deleting: None,
            last_collect: Instant::now(),
        }
    }

    /// Starts deleting the objects of deleted streams, unless a deletion is still running.
    async fn start_deletions(&mut self) {
        let deleted = self.state.partitions.deleting();
        if deleted.is_empty() || !self.deleting.as_ref().is_none_or(|t| t.is_finished()) {
            return;
        }
        // A deleted stream's uploads stop before its objects go, so that no commit lands
        // after the deletion listed the bucket.
        let doomed: Vec<Key> = self
            .uploads
            .keys()
            .filter(|(stream, _)| deleted.contains(stream))
            .cloned()
            .collect();
        for key in doomed {
            if let Some(task) = self.uploads.remove(&key) {
                task.abort();
                let _ = task.await;
            }
        }
        self.deleting = Some(tokio::spawn(delete_streams(self.state.clone(), deleted)));
    }

    /// Starts an upload task for each partition with work, none uploading and none that
    /// ran too recently; the tasks wait for a permit.
    fn start_uploads(&mut self) {
        for partition in self.state.partitions.all() {
            let key = (partition.stream().to_string(), partition.id());
            let high_watermark = partition.log().synced_end();
            let recent = self
                .last_run
                .get(&key)
                .is_some_and(|at| at.elapsed() < self.settings.upload_min_interval);
            if recent
                || self.uploads.contains_key(&key)
                || !partition
                    .uploader()
                    .has_work(partition.log().sealed_end(), high_watermark)
            {
                continue;
            }
            self.last_run.insert(key.clone(), Instant::now());
            let permits = self.permits.clone();
            let state = self.state.clone();
            self.uploads.insert(
                key,
                tokio::spawn(async move {
                    let Ok(_permit) = permits.acquire_owned().await else {
                        return;
                    };
                    upload(&state, &partition).await;
                }),
            );
        }
    }

    /// Starts tier retention and collection when due and none is running.
    fn start_collection(&mut self) {
        let idle = self
            .collecting
            .as_ref()
            .is_none_or(|task| task.is_finished());
        if idle && self.last_collect.elapsed() >= self.settings.collect_interval {
            self.last_collect = Instant::now();
            self.collecting = Some(tokio::spawn(collect(self.state.clone())));
        }
    }

    /// Stops every task in flight, at shutdown.
    fn abandon(self) {
        // Uploads in flight are abandoned: an object whose commit never happens is an orphan
        // the collector deletes later; nothing local was deleted for it.
        for (_, task) in self.uploads {
            task.abort();
        }
        for task in [self.collecting, self.deleting].into_iter().flatten() {
            task.abort();
        }
    }
}

/// Uploads what the partition sealed below its high watermark and commits it.
async fn upload(state: &Work, partition: &Arc<Partition>) {
    // A replicated partition is tiered by its leader alone, in its epoch, up to what a
    // majority holds.
    let (Some(epoch), Some(high_watermark)) = (partition.tiers_here(), partition.committed_end())
    else {
        // Not tiered here, or not now (a partition without replicas waits for the broker's
        // lease): its readers still need to know where the tier is.
        if partition.uploader().tier_start().is_none()
            && let Err(e) = partition.uploader().refresh().await
        {
            tracing::debug!(stream = partition.stream(), partition = partition.id(), error = %e, "reading the manifest of a partition not tiered here");
        }
        return;
    };
    let sealed = partition.log().sealed_segments();
    let result = partition
        .uploader()
        .run(&sealed, high_watermark, epoch)
        .await;
    match result {
        Ok(report) if !report.committed.is_empty() => {
            tracing::debug!(
                stream = partition.stream(),
                partition = partition.id(),
                segments = report.committed.len(),
                version = report.version,
                tier_end = %report.tier_end,
                "tiered"
            );
        }
        Ok(_) => {}
        Err(TierError::LocalSegment {
            base_offset,
            file,
            reason: CorruptReason::Batch { position, detail },
        }) => {
            state.metrics.tier_upload_corrupt_segments.inc();
            on_local_rot(state, partition, base_offset, file, position, detail);
        }
        Err(e) => {
            state.metrics.tier_upload_failures.inc();
            tracing::warn!(
                stream = partition.stream(),
                partition = partition.id(),
                error = %e,
                backlog_segments = partition.upload_backlog().segments,
                "tier upload failed; the data stays on local disk and is retried"
            );
        }
    }
}

/// A sealed segment's upload found damaged data (a batch that fails its checksum or does not
/// parse): rot, which is never copied to the tier, and the segment stays on disk. A partition without replicas has no other
/// copy of it: it goes to the `corrupt` state (refusing publishes and fetches, naming file
/// and byte, until an operator repairs it), and the broker's other partitions go on
/// uploading. A replicated partition keeps serving from its replicas' copies meanwhile;
/// its upload is tried again on later runs.
fn on_local_rot(
    state: &Work,
    partition: &Arc<Partition>,
    base_offset: floe_wire::Offset,
    file: std::path::PathBuf,
    position: u64,
    reason: String,
) {
    tracing::error!(
        stream = partition.stream(),
        partition = partition.id(),
        segment = %base_offset,
        file = %file.display(),
        position,
        reason,
        "a sealed segment fails its checksums; it is not tiered and stays on local disk"
    );
    if partition.is_replicated() {
        return;
    }
    let corrupt =
        CorruptPartition::in_segment(partition.stream(), partition.id(), file, position, reason);
    state.partitions.hold_corrupt_open(partition, corrupt);
}

/// Tier retention and collection for every partition.
async fn collect(state: Work) {
    let tiering = &state.tiering;
    for partition in state.partitions.all() {
        let Some(epoch) = partition.tiers_here() else {
            // A follower only reads the manifest its leader writes, so that its local
            // retention knows what the tier holds.
            if partition.is_replicated()
                && let Err(e) = partition.uploader().refresh().await
            {
                tracing::debug!(stream = partition.stream(), partition = partition.id(), error = %e, "reading the manifest on a follower");
            }
            continue;
        };
        let tier_retention = partition.tier_retention();
        if tier_retention != floe_tier::TierRetention::default() {
            let removal = apply_tier_retention(
                partition.uploader().manifest(),
                tier_retention,
                epoch,
                now_ms(),
            )
            .await;
            match removal {
                Ok(Some(manifest)) => {
                    tracing::info!(
                        stream = partition.stream(),
                        partition = partition.id(),
                        tier_start = %manifest.start_offset(),
                        "tier retention removed the oldest segments"
                    );
                    if let Err(e) = partition.uploader().refresh().await {
                        tracing::warn!(stream = partition.stream(), partition = partition.id(), error = %e, "reading the manifest after retention");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(stream = partition.stream(), partition = partition.id(), error = %e, "tier retention failed");
                }
            }
        }
        match tiering
            .collector
            .collect_partition(partition.tier_path(), now_ms())
            .await
        {
            Ok(report) if report.segments_deleted > 0 || report.staging_files_deleted > 0 => {
                tracing::info!(
                    stream = partition.stream(),
                    partition = partition.id(),
                    deleted = report.segments_deleted,
                    staging_files = report.staging_files_deleted,
                    "collected unreferenced segment objects"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(stream = partition.stream(), partition = partition.id(), error = %e, "tier collection failed");
            }
        }
    }
}

/// Deletes the objects of deleted streams; a stream's name is freed once a listing finds
/// none left.
async fn delete_streams(state: Work, streams: Vec<String>) {
    let store = &state.tiering.store;
    for stream in streams {
        let result = async {
            let deleted = floe_tier::delete_stream(store, &stream).await?;
            let left = store.list(&stream).await?.len();
            Ok::<_, floe_tier::TierError>((deleted, left))
        }
        .await;
        match result {
            Ok((deleted, 0)) => {
                tracing::info!(
                    stream,
                    objects = deleted,
                    "deleted a deleted stream's objects"
                );
                if let Err(e) = state.partitions.forget_deleted(&stream) {
                    tracing::warn!(stream, error = %ErrorChain(&e), "updating the catalog");
                }
            }
            Ok((_, left)) => {
                tracing::info!(
                    stream,
                    left,
                    "objects of a deleted stream appeared meanwhile; deleting again"
                );
            }
            Err(e) => {
                tracing::warn!(stream, error = %e, "deleting a deleted stream's objects; retrying");
            }
        }
    }
}

//! Tiering on a broker: the object store, the tier reader every fetch below the local log
//! shares, and the background loop that uploads sealed committed segments, applies tier
//! retention, collects unreferenced objects and finishes stream deletions.
//!
//! Uploads never block publishing: each partition's upload runs as its own task, at most
//! [`TierSettings::partitions_in_parallel`] at once, and a partition whose store calls hang
//! holds only its own task. Local retention (in [`crate::partitions::Partitions::maintain`])
//! deletes a sealed segment only once the manifest holds it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use floe_tier::{
    Collector, DiskCacheConfig, ReaderConfig, RequestObserver, S3Settings, TierReader, TierStore,
    UploaderConfig, apply_tier_retention,
};
use tokio::sync::Semaphore;

use crate::partitions::Partition;
use crate::server::BrokerState;

/// The leader epoch a single broker tiers with (no controlplane assigns epochs yet).
pub const LOCAL_EPOCH: u32 = 0;

/// Where and how a broker tiers.
#[derive(Debug, Clone)]
pub struct TierSettings {
    /// `file:///dir[/prefix]` or `s3://bucket[/prefix]`.
    pub url: String,
    pub s3: S3Settings,
    pub uploader: UploaderConfig,
    pub reader: ReaderConfig,
    /// How often to look for sealed segments to upload.
    pub upload_interval: Duration,
    /// The shortest time between two upload runs of one partition. Each run ends in one
    /// manifest commit (a PUT), so batching the segments sealed meanwhile keeps requests
    /// per GiB near one PUT per segment at high ingest rates; it delays tiering (and local
    /// retention) by at most this much.
    pub upload_min_interval: Duration,
    /// How often to apply tier retention and collect unreferenced objects.
    pub collect_interval: Duration,
    /// Unreferenced objects stay this long after their upload or removal: longer than any
    /// upload-then-commit, and than any reader keeps a manifest.
    pub collect_grace: Duration,
    /// Partitions uploading at once.
    pub partitions_in_parallel: usize,
}

impl Default for TierSettings {
    /// No URL yet (the broker fills it in) and no disk cache (the broker places it).
    fn default() -> Self {
        TierSettings {
            url: String::new(),
            s3: S3Settings::default(),
            uploader: UploaderConfig::default(),
            // A fetch below the local log is below the tier's end, which the cached manifest
            // knows; a read beyond it or of a removed segment reloads at once. Long-lived
            // manifests keep cold reads near one GET per chunk.
            reader: ReaderConfig {
                manifest_ttl: Duration::from_secs(30),
                ..ReaderConfig::default()
            },
            upload_interval: Duration::from_secs(1),
            upload_min_interval: Duration::from_secs(10),
            collect_interval: Duration::from_secs(300),
            collect_grace: Duration::from_secs(600),
            partitions_in_parallel: 4,
        }
    }
}

impl TierSettings {
    /// The URL of the embedded default: a directory under the data directory.
    pub fn local_url(data_dir: &Path) -> Result<String> {
        let dir = data_dir.join("objects");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .with_context(|| format!("resolving {}", dir.display()))?;
        url::Url::from_directory_path(&dir)
            .map(|u| u.to_string())
            .map_err(|()| anyhow::anyhow!("{} is not an absolute path", dir.display()))
    }
}

/// The tier cache's disk half when no size is configured and the objects are remote.
pub const DEFAULT_CACHE_DISK_BYTES: usize = 1 << 30;

/// Bytes of the tier cache's disk half: `configured`, else [`DEFAULT_CACHE_DISK_BYTES`] for
/// object storage reached over the network and none for a local directory (`file://`). A
/// local directory's objects are already files on a local disk: caching their chunks on disk
/// would write every byte a cold read fetches a second time, usually to the same device, and
/// read it back no faster than the object itself. An explicit size (a directory on a network
/// file system, say) is used as given.
pub fn cache_disk_bytes(configured: Option<usize>, url: &str) -> usize {
    let local = url::Url::parse(url).is_ok_and(|u| u.scheme() == "file");
    configured.unwrap_or(if local { 0 } else { DEFAULT_CACHE_DISK_BYTES })
}

/// The tier cache's disk half under `dir`, or `None` for `bytes` of 0. Its blocks hold at
/// least two chunks.
pub fn disk_cache(dir: PathBuf, bytes: usize, chunk_bytes: u64) -> Option<DiskCacheConfig> {
    (bytes > 0).then(|| DiskCacheConfig {
        dir,
        capacity_bytes: bytes,
        block_bytes: (16 << 20).max(2 * usize::try_from(chunk_bytes).unwrap_or(usize::MAX / 2)),
    })
}

/// The broker's tier: the store, the shared reader and the collector.
#[derive(Debug)]
pub struct Tiering {
    pub store: TierStore,
    pub reader: TierReader,
    collector: Collector,
    settings: TierSettings,
}

impl Tiering {
    /// Opens the store and the reader's cache; `observer` is told every request's duration.
    pub async fn open(settings: TierSettings, observer: RequestObserver) -> Result<Tiering> {
        let store = TierStore::open(&settings.url, &settings.s3)
            .with_context(|| format!("opening object storage {}", settings.url))?
            .with_observer(observer);
        let reader = TierReader::new(store.clone(), settings.reader.clone())
            .await
            .context("opening the tier cache")?;
        let grace = i64::try_from(settings.collect_grace.as_millis()).unwrap_or(i64::MAX);
        let collector = Collector::new(store.clone(), grace)?;
        Ok(Tiering {
            store,
            reader,
            collector,
            settings,
        })
    }

    /// Whether the store holds objects under `stream` (left by an earlier stream of that
    /// name, e.g. when a data directory was wiped but not the bucket).
    pub async fn has_objects(&self, stream: &str) -> Result<bool> {
        Ok(!self.store.list(stream).await?.is_empty())
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

type Key = (String, u32);

/// The tiering loop, until shutdown.
pub(crate) async fn run(state: Arc<BrokerState>) {
    let settings = state.tiering.settings.clone();
    let permits = Arc::new(Semaphore::new(settings.partitions_in_parallel.max(1)));
    let mut uploads: HashMap<Key, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut last_run: HashMap<Key, Instant> = HashMap::new();
    let mut collecting: Option<tokio::task::JoinHandle<()>> = None;
    let mut deleting: Option<tokio::task::JoinHandle<()>> = None;
    let mut last_collect = Instant::now();
    let mut tick = tokio::time::interval(settings.upload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => break,
        }
        uploads.retain(|_, task| !task.is_finished());
        let deleted = state.partitions.deleting();
        if !deleted.is_empty() && deleting.as_ref().is_none_or(|t| t.is_finished()) {
            // A deleted stream's uploads stop before its objects go, so that no commit lands
            // after the deletion listed the bucket.
            let doomed: Vec<Key> = uploads
                .keys()
                .filter(|(stream, _)| deleted.contains(stream))
                .cloned()
                .collect();
            for key in doomed {
                if let Some(task) = uploads.remove(&key) {
                    task.abort();
                    let _ = task.await;
                }
            }
            deleting = Some(tokio::spawn(delete_streams(state.clone(), deleted)));
        }
        for partition in state.partitions.all() {
            let key = (partition.stream.clone(), partition.id);
            let high_watermark = partition.log.synced_end();
            let recent = last_run
                .get(&key)
                .is_some_and(|at| at.elapsed() < settings.upload_min_interval);
            if recent
                || uploads.contains_key(&key)
                || !partition
                    .uploader
                    .has_work(partition.log.sealed_end(), high_watermark)
            {
                continue;
            }
            last_run.insert(key.clone(), Instant::now());
            let permits = permits.clone();
            let state = state.clone();
            uploads.insert(
                key,
                tokio::spawn(async move {
                    let Ok(_permit) = permits.acquire_owned().await else {
                        return;
                    };
                    upload(&state, &partition).await;
                }),
            );
        }
        let idle = collecting.as_ref().is_none_or(|task| task.is_finished());
        if idle && last_collect.elapsed() >= settings.collect_interval {
            last_collect = Instant::now();
            collecting = Some(tokio::spawn(collect(state.clone())));
        }
    }
    // Uploads in flight are abandoned: an object whose commit never happens is an orphan the
    // collector deletes later; nothing local was deleted for it.
    for (_, task) in uploads {
        task.abort();
    }
    for task in [collecting, deleting].into_iter().flatten() {
        task.abort();
    }
}

/// Uploads what the partition sealed below its high watermark and commits it.
async fn upload(state: &BrokerState, partition: &Partition) {
    // A replicated partition is tiered by its leader alone, in its epoch, up to what a
    // majority holds.
    let (Some(epoch), Some(high_watermark)) = (partition.tiers_here(), partition.committed_end())
    else {
        return;
    };
    let sealed = partition.log.sealed_segments();
    let result = partition
        .uploader
        .run(&sealed, high_watermark, epoch, now_ms())
        .await;
    match result {
        Ok(report) if !report.committed.is_empty() => {
            tracing::debug!(
                stream = %partition.stream,
                partition = partition.id,
                segments = report.committed.len(),
                version = report.version,
                tier_end = %report.tier_end,
                "tiered"
            );
        }
        Ok(_) => {}
        Err(e) => {
            state.metrics.tier_upload_failures.inc();
            tracing::warn!(
                stream = %partition.stream,
                partition = partition.id,
                error = %e,
                backlog_segments = partition.upload_backlog().segments,
                "tier upload failed; the data stays on local disk and is retried"
            );
        }
    }
}

/// Tier retention and collection for every partition.
async fn collect(state: Arc<BrokerState>) {
    let tiering = &state.tiering;
    for partition in state.partitions.all() {
        let Some(epoch) = partition.tiers_here() else {
            // A follower only reads the manifest its leader writes, so that its local
            // retention knows what the tier holds.
            if partition.replicated
                && let Err(e) = partition.uploader.refresh().await
            {
                tracing::debug!(stream = %partition.stream, partition = partition.id, error = %e, "reading the manifest on a follower");
            }
            continue;
        };
        let tier_retention = partition.tier_retention();
        if tier_retention != floe_tier::TierRetention::default() {
            let removal = apply_tier_retention(
                partition.uploader.manifest(),
                tier_retention,
                epoch,
                now_ms(),
            )
            .await;
            match removal {
                Ok(Some(manifest)) => {
                    tracing::info!(
                        stream = %partition.stream,
                        partition = partition.id,
                        tier_start = %manifest.start_offset(),
                        "tier retention removed the oldest segments"
                    );
                    if let Err(e) = partition.uploader.refresh().await {
                        tracing::warn!(stream = %partition.stream, partition = partition.id, error = %e, "reading the manifest after retention");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(stream = %partition.stream, partition = partition.id, error = %e, "tier retention failed");
                }
            }
        }
        match tiering
            .collector
            .collect_partition(&partition.tier_path, now_ms())
            .await
        {
            Ok(report) if report.segments_deleted > 0 || report.staging_files_deleted > 0 => {
                tracing::info!(
                    stream = %partition.stream,
                    partition = partition.id,
                    deleted = report.segments_deleted,
                    staging_files = report.staging_files_deleted,
                    "collected unreferenced segment objects"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(stream = %partition.stream, partition = partition.id, error = %e, "tier collection failed");
            }
        }
    }
}

/// Deletes the objects of deleted streams; a stream's name is freed once a listing finds
/// none left.
async fn delete_streams(state: Arc<BrokerState>, streams: Vec<String>) {
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
                    tracing::warn!(stream, error = %e, "updating the catalog");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_cache_defaults_to_none_for_a_local_directory_only() {
        assert_eq!(cache_disk_bytes(None, "file:///var/lib/floe/objects/"), 0);
        assert_eq!(cache_disk_bytes(None, "FILE:///objects/"), 0);
        assert_eq!(
            cache_disk_bytes(None, "s3://bucket/prefix"),
            DEFAULT_CACHE_DISK_BYTES
        );
        // An explicit size wins either way.
        assert_eq!(cache_disk_bytes(Some(4096), "file:///objects/"), 4096);
        assert_eq!(cache_disk_bytes(Some(0), "s3://bucket"), 0);
        assert!(disk_cache(PathBuf::from("/c"), 0, 4 << 20).is_none());
        let cache = disk_cache(PathBuf::from("/c"), 1 << 30, 32 << 20).expect("a disk cache");
        assert_eq!(cache.block_bytes, 64 << 20);
        assert_eq!(cache.capacity_bytes, 1 << 30);
    }
}

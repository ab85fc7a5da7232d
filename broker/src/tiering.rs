//! Tiering on a broker: the object store, the tier reader every fetch below the local log
//! shares, and the background loop that uploads sealed committed segments, applies tier
//! retention, collects unreferenced objects and finishes stream deletions.
//!
//! The loop lives in [`schedule`]. Uploads never block publishing: each partition's upload runs as its own task, at most
//! [`TierSettings::partitions_in_parallel`] at once, and a partition whose store calls hang
//! holds only its own task. Local retention (in [`crate::partitions::Partitions::maintain`])
//! deletes a sealed segment only once the manifest holds it.

pub(crate) mod heal;
mod schedule;

use std::path::{Path, PathBuf};
use std::time::Duration;

use floe_tier::{
    Collector, DiskCacheConfig, ReaderConfig, RequestObserver, S3Settings, TierError, TierReader,
    TierStore, UploaderConfig,
};

/// Why tiering could not start.
#[derive(Debug, thiserror::Error)]
pub enum TieringError {
    #[error("cannot {op} the objects directory {path}")]
    LocalDirectory {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is not an absolute path")]
    NotAbsolute(PathBuf),
    #[error("cannot open object storage {url}")]
    Store {
        url: String,
        #[source]
        source: TierError,
    },
    #[error("cannot open the tier cache")]
    Cache(#[source] TierError),
    #[error("cannot set up the collector")]
    Collector(#[source] TierError),
}

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
    /// reader keeps a manifest, and twice the uploader's commit window
    /// ([`TierSettings::commit_window_ms`]). At least a second.
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

/// The shortest collector grace a broker accepts: below it, the commit window (half the
/// grace) leaves too little time to upload and commit one segment.
pub const COLLECT_GRACE_MIN: Duration = Duration::from_secs(1);

impl TierSettings {
    /// How long an uploaded object may wait for its commit: half the collector's grace, so
    /// that the other half covers a commit request in flight and the skew between the
    /// clocks of brokers and object store. Every broker that may collect a partition's
    /// objects must run with at least this broker's grace.
    pub fn commit_window_ms(&self) -> i64 {
        i64::try_from(self.collect_grace.as_millis() / 2).unwrap_or(i64::MAX)
    }

    /// The URL of the embedded default: a directory under the data directory.
    pub fn local_url(data_dir: &Path) -> Result<String, TieringError> {
        let dir = data_dir.join("objects");
        let failed = |op| {
            let path = dir.clone();
            move |source| TieringError::LocalDirectory { op, path, source }
        };
        std::fs::create_dir_all(&dir).map_err(failed("create"))?;
        let dir = dir.canonicalize().map_err(failed("resolve"))?;
        url::Url::from_directory_path(&dir)
            .map(|u| u.to_string())
            .map_err(|()| TieringError::NotAbsolute(dir))
    }
}

/// Opens the object store `settings` name.
pub(crate) fn open_store(settings: &TierSettings) -> Result<TierStore, TieringError> {
    TierStore::open(&settings.url, &settings.s3).map_err(|source| TieringError::Store {
        url: settings.url.clone(),
        source,
    })
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
pub(crate) struct Tiering {
    store: TierStore,
    reader: TierReader,
    collector: Collector,
    settings: TierSettings,
}

impl Tiering {
    /// Opens the store and the reader's cache; `observer` is told every request's duration.
    pub(crate) async fn open(
        settings: TierSettings,
        observer: RequestObserver,
    ) -> Result<Tiering, TieringError> {
        let store = open_store(&settings)?.with_observer(observer);
        let reader = TierReader::new(store.clone(), settings.reader.clone())
            .await
            .map_err(TieringError::Cache)?;
        if settings.collect_grace < COLLECT_GRACE_MIN {
            return Err(TieringError::Collector(TierError::Config(format!(
                "the collector grace {:?} is below {COLLECT_GRACE_MIN:?}",
                settings.collect_grace
            ))));
        }
        let grace = i64::try_from(settings.collect_grace.as_millis()).unwrap_or(i64::MAX);
        let collector = Collector::new(store.clone(), grace).map_err(TieringError::Collector)?;
        Ok(Tiering {
            store,
            reader,
            collector,
            settings,
        })
    }

    pub(crate) fn store(&self) -> &TierStore {
        &self.store
    }

    /// The reader every fetch below the local log shares.
    pub(crate) fn reader(&self) -> &TierReader {
        &self.reader
    }

    /// Whether the store holds objects under `stream` (left by an earlier stream of that
    /// name, e.g. when a data directory was wiped but not the bucket).
    pub(crate) async fn has_objects(&self, stream: &str) -> Result<bool, TierError> {
        Ok(!self.store.list(stream).await?.is_empty())
    }
}
pub(crate) use schedule::run;

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

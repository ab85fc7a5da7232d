//! Every partition this broker holds, by stream and id: opened from the local catalog,
//! created, released and deleted with their streams as the catalog or the controlplane says,
//! and maintained (segment age, local retention) in the background. A partition whose log
//! refuses to open as corrupt is held apart, in the `corrupt` state ([`CorruptPartition`]):
//! it stops neither the broker's start nor its other partitions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use floe_hot_log::{FsStorage, Log, LogConfig, RetentionPolicy, SyncObserver};
use floe_tier::{PartitionPath, TierRetention, TierStore, Uploader, UploaderConfig};
use floe_wire::Offset;

mod repair;

pub(crate) use repair::RepairError;

use crate::catalog::{Catalog, CatalogError, StreamEntry};
use crate::lease::Lease;
pub use crate::partition::TakeError;
use crate::partition::corrupt::CorruptPartition;
use crate::partition::{Partition, PartitionParts};

/// The settings a stream gets when its creator leaves them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDefaults {
    pub local_retention_bytes: Option<u64>,
    pub local_retention_ms: Option<u64>,
    pub retention_bytes: Option<u64>,
    pub retention_ms: Option<u64>,
}

impl Default for StreamDefaults {
    /// A 1 GiB local window per partition; the tier keeps everything.
    fn default() -> Self {
        StreamDefaults {
            local_retention_bytes: Some(1 << 30),
            local_retention_ms: None,
            retention_bytes: None,
            retention_ms: None,
        }
    }
}

type Key = (String, u32);

/// Every partition on this broker, by stream name and partition id.
#[derive(Debug)]
pub(crate) struct Partitions {
    data_dir: PathBuf,
    catalog: Mutex<Catalog>,
    map: RwLock<HashMap<Key, Arc<Partition>>>,
    /// Partitions held here whose logs refused to open as corrupt; never also in `map`.
    corrupt: RwLock<HashMap<Key, CorruptPartition>>,
    /// Held while a repair runs: one at a time, so two cannot cut the same log.
    repairing: tokio::sync::Mutex<()>,
    log_defaults: LogConfig,
    stream_defaults: StreamDefaults,
    tier: TierStore,
    uploader: UploaderConfig,
    /// A managed broker's lease: its partitions without replicas are taken in the epochs
    /// their assignments give, and written only while it holds. `None` without a
    /// controlplane.
    lease: Option<Arc<Lease>>,
}

/// Why a stream operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("stream `{0}` already exists")]
    Exists(String),
    #[error("stream `{0}` is still being deleted from object storage; retry shortly")]
    Deleting(String),
    #[error("stream `{0}` does not exist")]
    Unknown(String),
    #[error("invalid stream settings: {0}")]
    Invalid(String),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("stream {stream} partition {partition} cannot be named in the tier")]
    TierPath {
        stream: String,
        partition: u32,
        #[source]
        source: floe_tier::TierError,
    },
    #[error("cannot read the tier manifest of stream {stream} partition {partition}")]
    Manifest {
        stream: String,
        partition: u32,
        #[source]
        source: floe_tier::TierError,
    },
    #[error("a stream operation's task failed")]
    Task(#[source] tokio::task::JoinError),
    #[error("cannot take stream {stream} partition {partition}")]
    Take {
        stream: String,
        partition: u32,
        #[source]
        source: TakeError,
    },
    #[error("cannot open stream {stream} partition {partition}")]
    Log {
        stream: String,
        partition: u32,
        #[source]
        source: floe_hot_log::LogError,
    },
}

type Result<T, E = StreamError> = std::result::Result<T, E>;

impl Partitions {
    /// Opens every partition the catalog in `data_dir` lists; they tier into `tier`. A
    /// managed broker passes its `lease`: its partitions without replicas are written only
    /// once an assignment gave their epoch ([`Partitions::set_stream`]).
    pub(crate) async fn open(
        data_dir: &Path,
        log_defaults: LogConfig,
        stream_defaults: StreamDefaults,
        tier: TierStore,
        uploader: UploaderConfig,
        lease: Option<Arc<Lease>>,
    ) -> Result<Partitions> {
        crate::state_file::create_dir_all(data_dir).map_err(|source| StreamError::Io {
            op: "create",
            path: data_dir.to_path_buf(),
            source,
        })?;
        let catalog = Catalog::load(data_dir)?;
        let streams = catalog.streams().clone();
        let partitions = Partitions {
            data_dir: data_dir.to_path_buf(),
            map: RwLock::new(HashMap::new()),
            corrupt: RwLock::new(HashMap::new()),
            repairing: tokio::sync::Mutex::new(()),
            log_defaults,
            stream_defaults,
            tier,
            uploader,
            catalog: Mutex::new(catalog),
            lease,
        };
        for (name, entry) in &streams {
            if !entry.deleting {
                for id in entry.held_ids() {
                    partitions.open_partition(name, id, entry).await?;
                }
            }
        }
        Ok(partitions)
    }

    /// A stream's settings with this broker's defaults filled in.
    pub fn effective(&self, entry: &StreamEntry) -> StreamEntry {
        let d = &self.stream_defaults;
        let config = self.log_config(entry);
        StreamEntry {
            segment_bytes: Some(config.segment_bytes_max),
            segment_age_ms: Some(config.segment_age_max.as_millis() as u64),
            local_retention_bytes: entry.local_retention_bytes.or(d.local_retention_bytes),
            local_retention_ms: entry.local_retention_ms.or(d.local_retention_ms),
            retention_bytes: entry.retention_bytes.or(d.retention_bytes),
            retention_ms: entry.retention_ms.or(d.retention_ms),
            ..entry.clone()
        }
    }

    fn stream_dir(&self, name: &str) -> PathBuf {
        self.data_dir.join("streams").join(name)
    }

    fn log_config(&self, entry: &StreamEntry) -> LogConfig {
        let mut config = self.log_defaults.clone();
        if let Some(bytes) = entry.segment_bytes {
            config.segment_bytes_max = bytes;
        }
        if let Some(ms) = entry.segment_age_ms {
            config.segment_age_max = Duration::from_millis(ms);
        }
        config
    }

    fn retentions(&self, entry: &StreamEntry) -> (RetentionPolicy, TierRetention) {
        let effective = self.effective(entry);
        (
            RetentionPolicy {
                bytes_max: effective.local_retention_bytes,
                age_max_ms: effective.local_retention_ms,
            },
            TierRetention {
                bytes_max: effective.retention_bytes,
                age_max_ms: effective.retention_ms,
            },
        )
    }

    /// Opens one partition's log. A log new to this broker starts where the partition's
    /// tiered history ends (0 for a new partition), so that offsets continue rather than
    /// repeat; that needs the tier's manifest, and without it the partition is not opened.
    /// A log that refuses to open as corrupt puts the partition in the `corrupt` state and
    /// is no error here: the broker's other partitions go on.
    async fn open_partition(&self, name: &str, id: u32, entry: &StreamEntry) -> Result<()> {
        let dir = self.stream_dir(name).join(id.to_string());
        if let Some(corrupt) = CorruptPartition::read_marker(name, id, &dir) {
            self.hold_corrupt(corrupt);
            return Ok(());
        }
        let (uploader, tier_path) = self.uploader_for(name, id)?;
        let start = if dir.exists() {
            Offset::ZERO
        } else {
            refresh_manifest(&uploader, name, id).await?;
            uploader.tier_end()
        };
        if start > Offset::ZERO {
            tracing::info!(stream = name, partition = id, %start, "new local log continues the tiered history");
        }
        let log = match Log::open_at(Arc::new(FsStorage), &dir, self.log_config(entry), start) {
            Ok(log) => log,
            Err(source) => {
                if let Some(corrupt) = CorruptPartition::from_open(name, id, &source) {
                    self.hold_corrupt(corrupt);
                    return Ok(());
                }
                return Err(StreamError::Log {
                    stream: name.to_string(),
                    partition: id,
                    source,
                });
            }
        };
        self.install(name, id, entry, log, uploader, tier_path);
        Ok(())
    }

    /// The uploader of `name`'s partition `id`, which tiers into this broker's store.
    fn uploader_for(&self, name: &str, id: u32) -> Result<(Uploader, PartitionPath)> {
        let tier_path = PartitionPath::new(name, id).map_err(|source| StreamError::TierPath {
            stream: name.to_string(),
            partition: id,
            source,
        })?;
        let uploader = Uploader::new(self.tier.clone(), tier_path.clone(), self.uploader.clone());
        Ok((uploader, tier_path))
    }

    /// Serves a partition whose log is open.
    fn install(
        &self,
        name: &str,
        id: u32,
        entry: &StreamEntry,
        log: Log,
        uploader: Uploader,
        tier_path: PartitionPath,
    ) {
        let (local_retention, tier_retention) = self.retentions(entry);
        let partition = Arc::new(Partition::new(PartitionParts {
            stream: name.to_string(),
            id,
            log,
            ack_mode: entry.ack_mode,
            local_retention,
            tier_retention,
            tier_path,
            uploader,
            replicated: entry.replication_factor.is_some_and(|factor| factor > 1),
            lease: self.lease.clone(),
        }));
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.insert((name.to_string(), id), partition);
    }

    /// Holds a partition in the `corrupt` state, and says so in the log.
    fn hold_corrupt(&self, mut corrupt: CorruptPartition) {
        corrupt.find_first_damaged_offset(&self.log_defaults);
        tracing::error!(
            stream = corrupt.stream,
            partition = corrupt.partition,
            file = %corrupt.file.display(),
            position = corrupt.position,
            reason = corrupt.reason,
            "partition log is corrupt: the partition refuses publishes and fetches until an \
             operator repairs it; the broker's other partitions go on"
        );
        let mut held = self.corrupt.write().unwrap_or_else(|e| e.into_inner());
        held.insert((corrupt.stream.clone(), corrupt.partition), corrupt);
    }

    /// Takes an open partition out of service into the `corrupt` state, when rot is found in
    /// its log while it serves (an upload found a sealed segment failing its checksums): it
    /// leaves the open partitions, its log is closed (its files stay as they are) and it
    /// refuses publishes and fetches like a partition whose log refused to open. Does
    /// nothing when `partition` is no longer the one open under its name.
    pub(crate) fn hold_corrupt_open(&self, partition: &Arc<Partition>, corrupt: CorruptPartition) {
        let key = (partition.stream().to_string(), partition.id());
        let removed = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            if !map
                .get(&key)
                .is_some_and(|open| Arc::ptr_eq(open, partition))
            {
                return;
            }
            // Held corrupt before it leaves the open partitions, so that no request in
            // between finds it in neither and answers "unknown partition".
            self.hold_corrupt(corrupt);
            map.remove(&key)
        };
        let Some(removed) = removed else {
            return;
        };
        if let Err(e) = removed.close() {
            tracing::error!(stream = key.0, partition = key.1, error = %e, "closing a corrupt partition's log");
        }
        // Its log would open as if whole (a sealed segment's data is checked through its
        // index, not scanned): the state must outlive a restart.
        if let Some(corrupt) = self.corrupt(&key.0, key.1)
            && let Err(e) = corrupt.write_marker(removed.log().dir())
        {
            tracing::error!(stream = key.0, partition = key.1, error = %e,
                "cannot record the corrupt state on disk; a restart serves the partition again \
                 until its damage is found anew");
        }
    }

    /// The corrupt state of a partition held here, if it is in it.
    pub(crate) fn corrupt(&self, stream: &str, partition: u32) -> Option<CorruptPartition> {
        let held = self.corrupt.read().unwrap_or_else(|e| e.into_inner());
        held.get(&(stream.to_string(), partition)).cloned()
    }

    /// Every partition held here in the `corrupt` state, by stream and id: what an
    /// operator's repair, and a description of the stream, start from.
    pub(crate) fn corrupt_partitions(&self) -> Vec<CorruptPartition> {
        let held = self.corrupt.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = held.values().cloned().collect();
        all.sort_by(|a, b| (&a.stream, a.partition).cmp(&(&b.stream, b.partition)));
        all
    }

    /// Forgets the corrupt state of `stream`'s partitions that `keep` rejects (the stream
    /// was deleted, or the partition is no longer held here).
    fn forget_corrupt(&self, stream: &str, keep: impl Fn(u32) -> bool) {
        let mut held = self.corrupt.write().unwrap_or_else(|e| e.into_inner());
        held.retain(|(s, id), _| s != stream || keep(*id));
    }

    fn validate(&self, entry: &StreamEntry) -> Result<(), StreamError> {
        if let Some(id) = entry.held_ids().find(|id| *id >= entry.partitions) {
            return Err(StreamError::Invalid(format!(
                "partition {id} of a stream of {} partitions",
                entry.partitions
            )));
        }
        self.log_config(entry)
            .validate()
            .map_err(StreamError::Invalid)
    }

    /// Makes this broker serve `entry` for the stream `name`, as its controlplane assigns it:
    /// persists the entry, opens the partitions it holds that are not open, closes those it
    /// no longer holds (their files stay: the partition may come back) and applies the
    /// stream's settings (retention, ack mode, segment limits) to every open one.
    pub async fn set_stream(&self, name: &str, entry: StreamEntry) -> Result<(), StreamError> {
        self.validate(&entry)?;
        {
            let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
            if catalog.get(name).is_some_and(|e| e.deleting) {
                return Err(StreamError::Deleting(name.to_string()));
            }
            if catalog.get(name) != Some(&entry) {
                catalog.update(name, Some(entry.clone()))?;
            }
        }
        let held: Vec<u32> = entry.held_ids().collect();
        let released: Vec<_> = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = map
                .keys()
                .filter(|(s, id)| s == name && !held.contains(id))
                .cloned()
                .collect();
            keys.into_iter().filter_map(|k| map.remove(&k)).collect()
        };
        for partition in released {
            if let Err(e) = partition.close() {
                tracing::error!(stream = name, partition = partition.id(), error = %e, "closing a released partition");
            }
            tracing::info!(
                stream = name,
                partition = partition.id(),
                "no longer serving the partition; its files stay"
            );
        }
        self.forget_corrupt(name, |id| held.contains(&id));
        let mut untaken = Ok(());
        for id in held {
            match self.get(name, id) {
                Some(open) => self.apply_settings(&open, &entry),
                // Opened again only once the broker restarts (after a repair).
                None if self.corrupt(name, id).is_some() => {}
                None => {
                    self.open_partition(name, id, &entry).await?;
                    if self.get(name, id).is_some() {
                        tracing::info!(stream = name, partition = id, "serving partition");
                    }
                }
            }
            // The others are still taken when one cannot be (its object store is down).
            if let Err(e) = self.take(name, id).await
                && untaken.is_ok()
            {
                untaken = Err(e);
            }
        }
        untaken
    }

    /// Takes an open partition without replicas in the epoch the assignments give it, on a
    /// managed broker ([`Partition::take`]); nothing to do otherwise.
    async fn take(&self, name: &str, id: u32) -> Result<(), StreamError> {
        let (Some(lease), Some(partition)) = (&self.lease, self.get(name, id)) else {
            return Ok(());
        };
        let Some(epoch) = lease.epoch(name, id).filter(|_| partition.is_leased()) else {
            return Ok(());
        };
        partition
            .take(epoch)
            .await
            .map_err(|source| StreamError::Take {
                stream: name.to_string(),
                partition: id,
                source,
            })
    }

    /// Applies a stream's settings, which may have changed, to one of its open partitions:
    /// retention at once, the ack mode from the next publish, segment limits from the active
    /// segment on.
    fn apply_settings(&self, partition: &Partition, entry: &StreamEntry) {
        let (local, tier) = self.retentions(entry);
        partition.set_retention(local, tier);
        partition.set_ack_mode(entry.ack_mode);
        let config = self.log_config(entry);
        if let Err(e) = partition
            .log()
            .set_segment_limits(config.segment_bytes_max, config.segment_age_max)
        {
            // `validate` checked the entry: only a limit this build cannot hold lands here.
            tracing::warn!(stream = partition.stream(), partition = partition.id(),
                error = %e, "keeping the partition's segment limits");
        }
    }

    /// Creates a stream: persists it in the catalog, then opens its partitions' logs.
    pub async fn create_stream(&self, name: &str, entry: StreamEntry) -> Result<(), StreamError> {
        if entry.partitions == 0 || entry.partitions > 10_000 {
            return Err(StreamError::Invalid(format!(
                "{} partitions; 1 to 10000 allowed",
                entry.partitions
            )));
        }
        self.validate(&entry)?;
        {
            let catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
            match catalog.get(name) {
                Some(e) if e.deleting => return Err(StreamError::Deleting(name.to_string())),
                Some(_) => return Err(StreamError::Exists(name.to_string())),
                None => {}
            }
        }
        self.set_stream(name, entry.clone()).await?;
        tracing::info!(
            stream = name,
            partitions = entry.partitions,
            "created stream"
        );
        Ok(())
    }

    /// Deletes a stream: marks it deleting in the catalog, closes its logs and deletes its
    /// local data. Its objects go next, from the tiering loop ([`Partitions::deleting`]),
    /// which then forgets the name.
    pub fn delete_stream(&self, name: &str) -> Result<(), StreamError> {
        let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match catalog.get(name) {
            Some(e) if !e.deleting => e.clone(),
            _ => return Err(StreamError::Unknown(name.to_string())),
        };
        catalog.update(
            name,
            Some(StreamEntry {
                deleting: true,
                ..entry
            }),
        )?;
        let removed: Vec<_> = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = map.keys().filter(|(s, _)| s == name).cloned().collect();
            keys.into_iter().filter_map(|k| map.remove(&k)).collect()
        };
        for partition in removed {
            let _ = partition.close();
        }
        self.forget_corrupt(name, |_| false);
        let dir = self.stream_dir(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|source| StreamError::Io {
                op: "delete",
                path: dir.clone(),
                source,
            })?;
            // Durably gone before the catalog forgets the name: a stream created again
            // under it must not find the old log.
            let streams = self.data_dir.join("streams");
            crate::state_file::sync_dir(&streams).map_err(|source| StreamError::Io {
                op: "sync the directory",
                path: streams,
                source,
            })?;
        }
        tracing::info!(stream = name, "deleted stream");
        Ok(())
    }

    /// Streams deleted whose objects are still in the tier.
    pub fn deleting(&self) -> Vec<String> {
        let catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        catalog
            .streams()
            .iter()
            .filter(|(_, e)| e.deleting)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Forgets a deleted stream once its objects are gone, freeing its name.
    pub fn forget_deleted(&self, name: &str) -> Result<(), CatalogError> {
        let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        if catalog.get(name).is_some_and(|e| e.deleting) {
            catalog.update(name, None)?;
            tracing::info!(stream = name, "deleted stream's objects are gone");
        }
        Ok(())
    }

    /// Bytes of every partition log on this broker.
    pub fn local_bytes(&self) -> u64 {
        self.all().iter().map(|p| p.log().size_bytes()).sum()
    }

    pub(crate) fn get(&self, stream: &str, partition: u32) -> Option<Arc<Partition>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(stream.to_string(), partition)).cloned()
    }

    /// The catalog's live streams (not being deleted), by name.
    pub fn streams(&self) -> Vec<(String, StreamEntry)> {
        let catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        catalog
            .streams()
            .iter()
            .filter(|(_, e)| !e.deleting)
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Partition>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Seals aged segments and applies local retention on every partition: a sealed segment
    /// leaves the disk only once the tier manifest holds it.
    pub fn maintain(&self, now: Instant) {
        let now_ms = crate::clock::now_ms();
        for p in self.all() {
            let log = p.log();
            if let Err(e) = log.maintain(now) {
                tracing::warn!(stream = p.stream(), partition = p.id(), error = %e, "segment maintenance failed");
            }
            let local_retention = p.local_retention();
            if local_retention != RetentionPolicy::default() {
                match log.apply_retention(local_retention, now_ms, |s| p.uploader().is_tiered(s)) {
                    Ok(deleted) if !deleted.is_empty() => tracing::debug!(
                        stream = p.stream(),
                        partition = p.id(),
                        segments = deleted.len(),
                        "tiered segments left the local disk"
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(stream = p.stream(), partition = p.id(), error = %e, "local retention failed");
                    }
                }
            }
        }
    }

    /// Syncs and closes every log (graceful shutdown).
    pub fn close_all(&self) {
        for p in self.all() {
            if let Err(e) = p.close() {
                tracing::error!(stream = p.stream(), partition = p.id(), error = %e, "closing log");
            }
        }
    }
}

/// Reads the partition's tier manifest into `uploader`.
async fn refresh_manifest(uploader: &Uploader, name: &str, id: u32) -> Result<()> {
    uploader
        .refresh()
        .await
        .map_err(|source| StreamError::Manifest {
            stream: name.to_string(),
            partition: id,
            source,
        })
}

/// A sync observer that feeds a histogram.
pub fn fsync_observer(histogram: prometheus_client::metrics::histogram::Histogram) -> SyncObserver {
    SyncObserver(Arc::new(move |d| histogram.observe(d.as_secs_f64())))
}

//! The partitions this broker leads: one hot log each, opened from the catalog, created and
//! deleted with their streams, and maintained (segment age, retention) in the background.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use floe_hot_log::{FsStorage, Log, LogConfig, RetentionPolicy, SyncObserver};

use crate::catalog::{Catalog, StreamEntry};

/// How a stream acknowledges publishes on this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledge once appended (page cache).
    None,
    /// Acknowledge once fsynced.
    Leader,
}

impl Durability {
    /// Parses the catalog's spelling. `quorum` needs replication, which a single broker
    /// provides as `leader` (a majority of one).
    pub fn parse(mode: &str) -> Result<Durability> {
        match mode {
            "none" => Ok(Durability::None),
            "leader" | "quorum" => Ok(Durability::Leader),
            other => anyhow::bail!("unknown ack mode `{other}`"),
        }
    }
}

/// One partition of a stream, led by this broker.
#[derive(Debug)]
pub struct Partition {
    pub stream: String,
    pub id: u32,
    pub log: Log,
    pub durability: Durability,
    pub retention: RetentionPolicy,
}

type Key = (String, u32);

/// Every partition on this broker, by stream name and partition id.
#[derive(Debug)]
pub struct Partitions {
    data_dir: PathBuf,
    catalog: Mutex<Catalog>,
    map: RwLock<HashMap<Key, Arc<Partition>>>,
    log_defaults: LogConfig,
}

/// Why a stream operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("stream `{0}` already exists")]
    Exists(String),
    #[error("stream `{0}` does not exist")]
    Unknown(String),
    #[error("invalid stream settings: {0}")]
    Invalid(String),
    #[error(transparent)]
    Storage(#[from] anyhow::Error),
}

impl Partitions {
    /// Opens every partition the catalog in `data_dir` lists.
    pub fn open(data_dir: &Path, log_defaults: LogConfig) -> Result<Partitions> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let catalog = Catalog::load(data_dir)?;
        let partitions = Partitions {
            data_dir: data_dir.to_path_buf(),
            map: RwLock::new(HashMap::new()),
            log_defaults,
            catalog: Mutex::new(Catalog::load(data_dir)?),
        };
        for (name, entry) in catalog.streams() {
            partitions.open_stream(name, entry)?;
        }
        Ok(partitions)
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

    fn open_stream(&self, name: &str, entry: &StreamEntry) -> Result<()> {
        let durability = Durability::parse(&entry.ack_mode)?;
        let retention = RetentionPolicy {
            bytes_max: entry.retention_bytes,
            age_max_ms: entry.retention_ms,
        };
        let mut opened = Vec::new();
        for id in 0..entry.partitions {
            let dir = self.stream_dir(name).join(id.to_string());
            let log = Log::open(Arc::new(FsStorage), &dir, self.log_config(entry))
                .with_context(|| format!("opening stream {name} partition {id}"))?;
            opened.push(Arc::new(Partition {
                stream: name.to_string(),
                id,
                log,
                durability,
                retention,
            }));
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for p in opened {
            map.insert((name.to_string(), p.id), p);
        }
        Ok(())
    }

    /// Creates a stream: persists it in the catalog, then opens its partitions' logs.
    pub fn create_stream(&self, name: &str, entry: StreamEntry) -> Result<(), StreamError> {
        if entry.partitions == 0 || entry.partitions > 10_000 {
            return Err(StreamError::Invalid(format!(
                "{} partitions; 1 to 10000 allowed",
                entry.partitions
            )));
        }
        Durability::parse(&entry.ack_mode).map_err(|e| StreamError::Invalid(e.to_string()))?;
        self.log_config(&entry)
            .validate()
            .map_err(StreamError::Invalid)?;
        let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        if catalog.get(name).is_some() {
            return Err(StreamError::Exists(name.to_string()));
        }
        catalog.update(name, Some(entry.clone()))?;
        self.open_stream(name, &entry)?;
        tracing::info!(
            stream = name,
            partitions = entry.partitions,
            "created stream"
        );
        Ok(())
    }

    /// Deletes a stream: closes its logs, removes it from the catalog and deletes its data.
    pub fn delete_stream(&self, name: &str) -> Result<(), StreamError> {
        let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        if catalog.get(name).is_none() {
            return Err(StreamError::Unknown(name.to_string()));
        }
        catalog.update(name, None)?;
        let removed: Vec<_> = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = map.keys().filter(|(s, _)| s == name).cloned().collect();
            keys.into_iter().filter_map(|k| map.remove(&k)).collect()
        };
        for partition in removed {
            let _ = partition.log.close();
        }
        let dir = self.stream_dir(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("deleting {}", dir.display()))?;
        }
        tracing::info!(stream = name, "deleted stream");
        Ok(())
    }

    pub fn get(&self, stream: &str, partition: u32) -> Option<Arc<Partition>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(stream.to_string(), partition)).cloned()
    }

    /// The catalog's streams, by name.
    pub fn streams(&self) -> Vec<(String, StreamEntry)> {
        let catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        catalog
            .streams()
            .iter()
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Seals aged segments and applies retention on every partition.
    pub fn maintain(&self, now: Instant) {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for p in self.all() {
            if let Err(e) = p.log.maintain(now) {
                tracing::warn!(stream = %p.stream, partition = p.id, error = %e, "segment maintenance failed");
            }
            if p.retention != RetentionPolicy::default()
                && let Err(e) = p.log.apply_retention(p.retention, now_ms, |_| true)
            {
                tracing::warn!(stream = %p.stream, partition = p.id, error = %e, "retention failed");
            }
        }
    }

    /// Syncs and closes every log (graceful shutdown).
    pub fn close_all(&self) {
        for p in self.all() {
            if let Err(e) = p.log.close() {
                tracing::error!(stream = %p.stream, partition = p.id, error = %e, "closing log");
            }
        }
    }
}

/// A sync observer that feeds a histogram.
pub fn fsync_observer(histogram: prometheus_client::metrics::histogram::Histogram) -> SyncObserver {
    SyncObserver(Arc::new(move |d| histogram.observe(d.as_secs_f64())))
}

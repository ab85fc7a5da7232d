//! Fixed-size chunks of segment objects' data, fetched with ranged GETs through a hybrid
//! memory + disk cache. Concurrent misses for one chunk share one GET; a semaphore caps the
//! GETs in flight; prefetches run only when a GET slot is free, so they never queue ahead of
//! a reader, and a chunk already being prefetched is not prefetched again (the second would
//! only wait on the first, holding a slot).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use foyer::{BlockEngineConfig, DeviceBuilder, FsDeviceBuilder, HybridCache, HybridCacheBuilder};
use tokio::sync::Semaphore;

use crate::metrics::bump;
use crate::{CorruptReason, TierError, TierStore};

/// The on-disk half of the chunk cache.
#[derive(Debug, Clone)]
pub struct DiskCacheConfig {
    pub dir: PathBuf,
    pub capacity_bytes: usize,
    /// The disk cache's allocation unit; must exceed the chunk size.
    pub block_bytes: usize,
}

/// One object's data region, as the chunk layer needs it.
#[derive(Debug, Clone)]
pub(crate) struct ObjectData {
    pub key: Arc<str>,
    pub data_len: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Chunks {
    store: TierStore,
    cache: HybridCache<String, Bytes>,
    gets: Arc<Semaphore>,
    chunk_bytes: u64,
    /// Cache keys of the chunks being prefetched.
    prefetching: Arc<Mutex<HashSet<String>>>,
}

/// Takes a chunk off [`Chunks::prefetching`] when its prefetch ends, however it ends.
struct Prefetching {
    keys: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Drop for Prefetching {
    fn drop(&mut self) {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl Chunks {
    pub async fn new(
        store: TierStore,
        chunk_bytes: u64,
        memory_bytes: usize,
        disk: Option<&DiskCacheConfig>,
        concurrent_gets: usize,
    ) -> Result<Chunks, TierError> {
        if let Some(disk) = disk
            && (disk.block_bytes as u64) < chunk_bytes + 64 * 1024
        {
            return Err(TierError::Config(format!(
                "disk cache block of {} bytes cannot hold a chunk of {chunk_bytes} bytes",
                disk.block_bytes
            )));
        }
        let memory = HybridCacheBuilder::new()
            .with_name("floe-tier-chunks")
            .memory(memory_bytes)
            .with_weighter(|key: &String, value: &Bytes| key.len() + value.len())
            .storage();
        let storage = match disk {
            None => memory,
            Some(disk) => {
                std::fs::create_dir_all(&disk.dir).map_err(|e| {
                    TierError::Cache(format!("creating {}: {e}", disk.dir.display()))
                })?;
                let device = FsDeviceBuilder::new(&disk.dir)
                    .with_capacity(disk.capacity_bytes)
                    .build()
                    .map_err(|e| TierError::Cache(e.to_string()))?;
                memory.with_engine_config(
                    BlockEngineConfig::new(device).with_block_size(disk.block_bytes),
                )
            }
        };
        let cache = storage
            .build()
            .await
            .map_err(|e| TierError::Cache(e.to_string()))?;
        Ok(Chunks {
            store,
            cache,
            gets: Arc::new(Semaphore::new(concurrent_gets.max(1))),
            chunk_bytes: chunk_bytes.max(1),
            prefetching: Arc::default(),
        })
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Bytes held by the memory half of the cache.
    pub fn memory_usage(&self) -> usize {
        self.cache.memory().usage()
    }

    /// A GET slot, for the reader's other GETs (footers).
    pub async fn get_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, TierError> {
        self.gets
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| TierError::Cache(e.to_string()))
    }

    /// Bytes `[start, end)` of the object's data, assembled from chunks.
    pub async fn read(
        &self,
        object: &ObjectData,
        start: u64,
        end: u64,
    ) -> Result<Bytes, TierError> {
        if end > object.data_len || start > end {
            return Err(TierError::Corrupt {
                key: object.key.to_string(),
                reason: CorruptReason::Field("range beyond data"),
            });
        }
        let first = start / self.chunk_bytes;
        let last = end.saturating_sub(1) / self.chunk_bytes;
        if start == end {
            return Ok(Bytes::new());
        }
        if first == last {
            let chunk = self.chunk(object, first).await?;
            let at = first * self.chunk_bytes;
            return Ok(chunk.slice((start - at) as usize..(end - at) as usize));
        }
        let mut out = BytesMut::with_capacity((end - start) as usize);
        for index in first..=last {
            let chunk = self.chunk(object, index).await?;
            let at = index * self.chunk_bytes;
            let from = start.saturating_sub(at) as usize;
            let to = (end - at).min(chunk.len() as u64) as usize;
            out.extend_from_slice(&chunk[from..to]);
        }
        Ok(out.freeze())
    }

    /// Whether every chunk holding bytes `[start, end)` of the object is in memory: reading
    /// them waits for no GET and no disk.
    pub fn in_memory(&self, object: &ObjectData, start: u64, end: u64) -> bool {
        let first = start / self.chunk_bytes;
        let last = end.saturating_sub(1).max(start) / self.chunk_bytes;
        (first..=last).all(|index| {
            self.cache
                .memory()
                .contains(&format!("{}#{index}", object.key))
        })
    }

    /// Drops every cached chunk of the object, in memory and on disk, so that the next read
    /// of it fetches them from the store again.
    pub fn forget(&self, object: &ObjectData) {
        for index in 0..object.data_len.div_ceil(self.chunk_bytes) {
            self.cache.remove(&format!("{}#{index}", object.key));
        }
    }

    /// Chunk `index` of the object, from the cache or one coalesced GET.
    async fn chunk(&self, object: &ObjectData, index: u64) -> Result<Bytes, TierError> {
        let metrics = self.store.metrics().clone();
        let cache_key = format!("{}#{index}", object.key);
        let fetch = self.fetcher(object, index, None);
        let missed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = missed.clone();
        let entry = self
            .cache
            // The cache may build the fetch future without polling it: only running it
            // is a miss.
            .get_or_fetch(&cache_key, move || async move {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                fetch.await
            })
            .await;
        if missed.load(std::sync::atomic::Ordering::Relaxed) {
            bump(&metrics.chunk_misses, 1);
        } else {
            bump(&metrics.chunk_hits, 1);
        }
        match entry {
            Ok(entry) => Ok(entry.value().clone()),
            Err(e) => Err(e
                .downcast_ref::<TierError>()
                .cloned()
                .unwrap_or_else(|| TierError::Cache(e.to_string()))),
        }
    }

    /// Starts fetching chunk `index` in the background if it exists, is neither cached nor
    /// being prefetched, and a GET slot is free now.
    pub fn prefetch(&self, object: &ObjectData, index: u64) {
        if index * self.chunk_bytes >= object.data_len {
            return;
        }
        let cache_key = format!("{}#{index}", object.key);
        if self.cache.memory().contains(&cache_key) {
            return;
        }
        let mut prefetching = self.prefetching.lock().unwrap_or_else(|e| e.into_inner());
        if prefetching.contains(&cache_key) {
            return;
        }
        let Ok(permit) = self.gets.clone().try_acquire_owned() else {
            return;
        };
        prefetching.insert(cache_key.clone());
        drop(prefetching);
        let guard = Prefetching {
            keys: self.prefetching.clone(),
            key: cache_key.clone(),
        };
        bump(&self.store.metrics().prefetches, 1);
        let fetch = self.fetcher(object, index, Some(permit));
        let cache = self.cache.clone();
        tokio::spawn(async move {
            let _guard = guard;
            // A failed prefetch is retried by the reader that needs the chunk.
            let _result = cache.get_or_fetch(&cache_key, move || fetch).await;
        });
    }

    fn fetcher(
        &self,
        object: &ObjectData,
        index: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> impl Future<Output = Result<Bytes, TierError>> + Send + 'static {
        let store = self.store.clone();
        let gets = self.gets.clone();
        let key = object.key.clone();
        let start = index * self.chunk_bytes;
        let end = (start + self.chunk_bytes).min(object.data_len);
        async move {
            let _permit = match permit {
                Some(permit) => permit,
                None => gets
                    .acquire_owned()
                    .await
                    .map_err(|e| TierError::Cache(e.to_string()))?,
            };
            let bytes = store.get_range(&key, start..end).await?;
            if bytes.len() as u64 != end - start {
                return Err(TierError::Corrupt {
                    key: key.to_string(),
                    reason: CorruptReason::Field("object shorter than its footer says"),
                });
            }
            Ok(bytes)
        }
    }
}

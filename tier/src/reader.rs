//! [`TierReader`]: reads whole, validated batches from the tier. The manifest (refreshed
//! after a short time, never going back to an older version) and segment footers are cached
//! in memory; data comes in fixed-size chunks through a hybrid memory + disk cache.

mod chunks;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_wire::Offset;
use floe_wire::batch::{self, BatchHeader, HEADER_LEN};

use crate::manifest::{ManifestLog, ManifestState, TieredSegment};
use crate::segment::{Footer, FooterEntry, TRAILER_LEN};
use crate::{CorruptReason, PartitionPath, TierError, TierStore};

pub use chunks::DiskCacheConfig;
use chunks::{Chunks, ObjectData};

/// How a reader caches and throttles.
#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// Size of one ranged GET and one cache entry.
    pub chunk_bytes: u64,
    pub memory_cache_bytes: usize,
    /// `None` keeps chunks in memory only.
    pub disk_cache: Option<DiskCacheConfig>,
    /// Ranged GETs in flight at once, over all partitions.
    pub concurrent_gets: usize,
    /// Chunks a sequential reader fetches ahead of the one it is in (within
    /// `concurrent_gets`), so that object storage's latency overlaps the reader's own work.
    pub read_ahead_chunks: u64,
    /// How long a cached manifest is used before it is read again.
    pub manifest_ttl: Duration,
    /// Footer entries cached (16 bytes each).
    pub footer_cache_entries: u64,
    /// The first GET of an object's tail asks for this much, so one GET usually finds the
    /// whole footer.
    pub tail_guess_bytes: u64,
    /// At most this much (beyond the first batch) in the answer of a read that had to wait
    /// for the chunk it starts in: the consumer gets its first records without waiting for
    /// a whole chunk to cross the network behind a congestion window that starts small, and
    /// its next read takes the rest of the chunk from memory.
    pub cold_answer_bytes: usize,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            chunk_bytes: 4 * 1024 * 1024,
            memory_cache_bytes: 256 * 1024 * 1024,
            disk_cache: None,
            concurrent_gets: 8,
            read_ahead_chunks: 4,
            manifest_ttl: Duration::from_secs(1),
            footer_cache_entries: 4 * 1024 * 1024,
            tail_guess_bytes: 128 * 1024,
            cold_answer_bytes: 256 * 1024,
        }
    }
}

/// Whole batches read from the tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierRead {
    pub bytes: Bytes,
    /// Offset after the last batch in `bytes`.
    pub next_offset: Offset,
}

/// What [`TierReader::read_batches`] found: the batches, and where in the object they end.
struct BatchesRead {
    bytes: Bytes,
    next_offset: Offset,
    end_position: u64,
}

/// What a walk over an object's batches must know of it: the offsets it holds and the
/// length of its data. From its footer, or, for a walk from its start, from the manifest.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    base_offset: Offset,
    next_offset: Offset,
    data_len: u64,
}

impl Bounds {
    fn of_footer(footer: &Footer) -> Bounds {
        Bounds {
            base_offset: footer.base_offset,
            next_offset: footer.next_offset,
            data_len: footer.data_len,
        }
    }

    fn of_segment(segment: &TieredSegment) -> Bounds {
        Bounds {
            base_offset: Offset::new(segment.base_offset),
            next_offset: Offset::new(segment.next_offset),
            data_len: segment.data_bytes,
        }
    }
}

/// The batches a read serves, as found from their headers.
struct Extent {
    /// Where the first batch served starts; `None` when there is none.
    start: Option<u64>,
    /// Where the batches served end, and the walk stopped.
    end: u64,
    /// The offset after the last batch walked.
    next_offset: Offset,
    /// The walk stopped before `max_bytes` to answer sooner — before a batch whose chunk was
    /// still being fetched, or at `cold_answer_bytes` — while the reader reads on.
    cut_short: bool,
}

/// The error for an object whose content is not what its footer or its batches say.
fn corrupt(object: &ObjectData, reason: CorruptReason) -> TierError {
    TierError::Corrupt {
        key: object.key.to_string(),
        reason,
    }
}

/// Validates every batch of `bytes`, whole batches read from `start` in the object.
fn validate_batches(object: &ObjectData, bytes: &[u8], start: u64) -> Result<(), TierError> {
    let mut at = 0usize;
    while at < bytes.len() {
        let header = batch::validate(&bytes[at..]).map_err(|e| {
            corrupt(
                object,
                CorruptReason::Batch {
                    position: start + at as u64,
                    detail: e.to_string(),
                },
            )
        })?;
        at += header.batch_length as usize;
    }
    Ok(())
}

/// Reads tiered data of any partition in the store. Cheap to clone; share one per process.
#[derive(Debug, Clone)]
pub struct TierReader {
    store: TierStore,
    config: Arc<ReaderConfig>,
    fresh: moka::future::Cache<PartitionPath, Arc<ManifestState>>,
    seen: moka::future::Cache<PartitionPath, Arc<ManifestState>>,
    footers: moka::future::Cache<Arc<str>, Arc<Footer>>,
    chunks: Chunks,
}

impl TierReader {
    pub async fn new(store: TierStore, config: ReaderConfig) -> Result<TierReader, TierError> {
        let chunks = Chunks::new(
            store.clone(),
            config.chunk_bytes,
            config.memory_cache_bytes,
            config.disk_cache.as_ref(),
            config.concurrent_gets,
        )
        .await?;
        Ok(TierReader {
            fresh: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(config.manifest_ttl)
                .build(),
            seen: moka::future::Cache::builder().max_capacity(100_000).build(),
            footers: moka::future::Cache::builder()
                .max_capacity(config.footer_cache_entries)
                .weigher(|_, f: &Arc<Footer>| {
                    u32::try_from(f.entries.len() + 1).unwrap_or(u32::MAX)
                })
                .build(),
            store,
            config: Arc::new(config),
            chunks,
        })
    }

    /// The partition's manifest as cached, loading it when stale. Never older than a state
    /// this reader returned before.
    pub async fn manifest(
        &self,
        partition: &PartitionPath,
    ) -> Result<Arc<ManifestState>, TierError> {
        let load = async {
            let loaded = ManifestLog::new(self.store.clone(), partition.clone())
                .load()
                .await?;
            let previous = self.seen.get(partition).await;
            let state = match previous {
                Some(p) if p.version > loaded.version => p,
                _ => Arc::new(loaded),
            };
            self.seen.insert(partition.clone(), state.clone()).await;
            Ok::<_, TierError>(state)
        };
        self.fresh
            .try_get_with(partition.clone(), load)
            .await
            .map_err(|e| (*e).clone())
    }

    /// Bytes of chunks held in memory by the cache.
    pub fn cache_memory_bytes(&self) -> usize {
        self.chunks.memory_usage()
    }

    /// The store this reader reads from.
    pub fn store(&self) -> &TierStore {
        &self.store
    }

    /// Forgets the cached manifest so the next read loads it again.
    pub async fn invalidate_manifest(&self, partition: &PartitionPath) {
        self.fresh.invalidate(partition).await;
    }

    /// Reads whole batches from `from` on, up to `max_bytes` (at least one batch), all from
    /// the one segment object holding `from`; call again at `next_offset` for more.
    pub async fn read(
        &self,
        partition: &PartitionPath,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TierRead, TierError> {
        let started = std::time::Instant::now();
        let mut state = self.manifest(partition).await?;
        tracing::trace!(%from, took_us = started.elapsed().as_micros(), "tier read: manifest");
        if state.segment_for(from).is_none() && from >= state.tier_end() {
            self.invalidate_manifest(partition).await;
            state = self.manifest(partition).await?;
        }
        match self.read_from(partition, &state, from, max_bytes).await {
            // Retention removed the segment and the collector deleted it since this manifest
            // was cached: a fresh manifest says where the tier starts now.
            Err(TierError::NotFound { .. }) => {
                self.invalidate_manifest(partition).await;
                let state = self.manifest(partition).await?;
                self.read_from(partition, &state, from, max_bytes).await
            }
            result => result,
        }
    }

    async fn read_from(
        &self,
        partition: &PartitionPath,
        state: &ManifestState,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TierRead, TierError> {
        let Some(segment) = state.segment_for(from) else {
            return Err(TierError::OffsetOutOfRange {
                requested: from,
                tier_start: state.start_offset(),
                tier_end: state.tier_end(),
            });
        };
        let object = ObjectData {
            key: Arc::from(partition.segment_key(&segment.name)),
            data_len: segment.data_bytes,
        };
        let started = std::time::Instant::now();
        let (bounds, entry) = self.walk_start(&object, segment, from).await?;
        tracing::trace!(%from, took_us = started.elapsed().as_micros(), "tier read: walk start");
        let mut result = self
            .read_batches(&object, bounds, entry, from, max_bytes)
            .await;
        if let Err(TierError::Corrupt { .. }) = &result {
            // The damaged copy may be a cached chunk (the disk cache rots too): the object's
            // chunks are fetched from the store again, once, before it is called corrupt.
            self.chunks.forget(&object);
            result = self
                .read_batches(&object, bounds, entry, from, max_bytes)
                .await;
        }
        if entry.position == 0 && !self.footers.contains_key(&object.key) {
            // Read without the footer: the next read, elsewhere in the object, needs its
            // index. Fetched now that this read's first chunk is here, not beside it.
            let reader = self.clone();
            let (key, segment) = (object.key.clone(), segment.clone());
            tokio::spawn(async move {
                // A failed fetch is retried by the read that needs the footer.
                let _footer = reader.footer(&key, &segment).await;
            });
        }
        match &result {
            Err(TierError::Corrupt { .. }) => {
                crate::metrics::bump(&self.store.metrics().corrupt_objects, 1);
            }
            Err(_) => {}
            Ok(read) => {
                let unread = object.data_len - read.end_position;
                if self.reads_sequentially(read.bytes.len(), read.end_position)
                    && unread < self.config.read_ahead_chunks * self.chunks.chunk_bytes()
                {
                    self.prefetch_next_segment(partition, state, segment, unread);
                }
            }
        }
        tracing::trace!(%from, took_us = started.elapsed().as_micros(), "tier read: batches");
        result.map(|read| TierRead {
            bytes: read.bytes,
            next_offset: read.next_offset,
        })
    }

    /// Whether a read that returned `len` bytes and ended at `end` looks like part of a
    /// sequential scan: it took half a chunk or more, or it ended past the middle of one (a
    /// reader taking small steps through the data).
    fn reads_sequentially(&self, len: usize, end: u64) -> bool {
        let chunk = self.chunks.chunk_bytes();
        len as u64 >= chunk / 2 || end % chunk >= chunk / 2
    }

    /// A sequential read near the end of a segment object continues in the next one: fetch
    /// that one's footer and first chunks in the background, as many chunks as the read-ahead
    /// window reaches past the end of this object (`unread` bytes away).
    fn prefetch_next_segment(
        &self,
        partition: &PartitionPath,
        state: &ManifestState,
        segment: &TieredSegment,
        unread: u64,
    ) {
        let Some(next) = state.segment_for(Offset::new(segment.next_offset)).cloned() else {
            return;
        };
        let chunk = self.chunks.chunk_bytes();
        let window = self.config.read_ahead_chunks * chunk;
        let chunks = (window - unread).div_ceil(chunk);
        let reader = self.clone();
        let key: Arc<str> = Arc::from(partition.segment_key(&next.name));
        tokio::spawn(async move {
            // A failed prefetch is retried by the read that needs the footer.
            if reader.footer(&key, &next).await.is_ok() {
                let object = ObjectData {
                    key,
                    data_len: next.data_bytes,
                };
                for index in 0..chunks {
                    reader.chunks.prefetch(&object, index);
                }
            }
        });
    }

    /// The base offset of the first tiered batch holding a record with timestamp ≥
    /// `timestamp`, or `None` when every tiered record is older. Costs the footer (cached) and
    /// the chunks between two index entries.
    pub async fn offset_for_timestamp(
        &self,
        partition: &PartitionPath,
        timestamp: i64,
    ) -> Result<Option<Offset>, TierError> {
        let state = self.manifest(partition).await?;
        // Segments are in offset order; their newest timestamps need not be monotonic.
        let Some(segment) = state.segments.iter().find(|s| s.max_timestamp >= timestamp) else {
            return Ok(None);
        };
        let object = ObjectData {
            key: Arc::from(partition.segment_key(&segment.name)),
            data_len: segment.data_bytes,
        };
        let footer = self.footer(&object.key, segment).await?;
        let entry = footer
            .entry_for_timestamp(timestamp)
            .ok_or_else(|| corrupt(&object, CorruptReason::Field("time index")))?;
        let mut position = u64::from(entry.position);
        while position < footer.data_len {
            let header = self.header_at(&object, position, footer.data_len).await?;
            if header.max_timestamp >= timestamp {
                return Ok(Some(header.base_offset));
            }
            position += u64::from(header.batch_length);
        }
        Err(corrupt(&object, CorruptReason::Field("max_timestamp")))
    }

    /// Where a walk to `from` starts: at position 0 for the segment's first offset when its
    /// footer is not cached (its first answer then costs one GET, not a footer's GET and
    /// then a chunk's; the footer is checked against the manifest when it is read), else at
    /// the footer's index entry at or below `from`.
    async fn walk_start(
        &self,
        object: &ObjectData,
        segment: &TieredSegment,
        from: Offset,
    ) -> Result<(Bounds, FooterEntry), TierError> {
        if from.get() == segment.base_offset && !self.footers.contains_key(&object.key) {
            let start = FooterEntry {
                relative_offset: 0,
                position: 0,
                max_timestamp: 0,
            };
            return Ok((Bounds::of_segment(segment), start));
        }
        let footer = self.footer(&object.key, segment).await?;
        let entry = footer
            .entry_for(from)
            .ok_or_else(|| corrupt(object, CorruptReason::Field("index")))?;
        Ok((Bounds::of_footer(&footer), entry))
    }

    async fn read_batches(
        &self,
        object: &ObjectData,
        bounds: Bounds,
        entry: FooterEntry,
        from: Offset,
        max_bytes: usize,
    ) -> Result<BatchesRead, TierError> {
        let chunk = self.chunks.chunk_bytes();
        // First the batches' extent, from their headers; then their bytes in one read, a
        // slice of a cached chunk: an answer ends where its first batch's chunk does (only a
        // first batch that straddles two chunks is copied). Every batch is validated before
        // it is served.
        let extent = self
            .batch_extent(object, bounds, entry, from, max_bytes)
            .await?;
        let bytes = match extent.start {
            Some(first) => self.chunks.read(object, first, extent.end).await?,
            None => Bytes::new(),
        };
        // The same immutable bytes the headers came from: validating walks the same batches.
        validate_batches(object, &bytes, extent.start.unwrap_or(0))?;
        // A sequential reader comes back for what follows: fetch the rest of the chunk the
        // read ended in and the `read_ahead_chunks` after it (those cached or in flight are
        // skipped).
        if extent.cut_short || self.reads_sequentially(bytes.len(), extent.end) {
            for ahead in 0..=self.config.read_ahead_chunks {
                self.chunks.prefetch(object, extent.end / chunk + ahead);
            }
        }
        Ok(BatchesRead {
            bytes,
            next_offset: extent.next_offset,
            end_position: extent.end,
        })
    }

    /// Walks the batch headers from the footer `entry` at or below `from` and finds the
    /// batches a read from `from` serves: whole batches, at least one, no more than
    /// `max_bytes` beyond the first (`cold_answer_bytes` when the chunk it starts in was not
    /// in memory), none beyond the first that would wait for a chunk — a cold read
    /// answers once the chunk it starts in is here, while the chunks after it, prefetched
    /// then, are on their way for the next read — and none past the end of the chunk the
    /// first lies in ([`Self::answer_limit`]).
    async fn batch_extent(
        &self,
        object: &ObjectData,
        bounds: Bounds,
        entry: FooterEntry,
        from: Offset,
        max_bytes: usize,
    ) -> Result<Extent, TierError> {
        let mut position = u64::from(entry.position);
        let mut expected = Offset::new(bounds.base_offset.get() + u64::from(entry.relative_offset));
        let mut start = None;
        let mut prefetched = false;
        let mut cut_short = false;
        let chunk = self.chunks.chunk_bytes();
        let mut answer_limit = u64::MAX;
        let header_end = (position + HEADER_LEN as u64).min(bounds.data_len);
        let answer_bytes = if self.chunks.in_memory(object, position, header_end) {
            max_bytes
        } else {
            max_bytes.min(self.config.cold_answer_bytes)
        };
        while position < bounds.data_len {
            let header_end = (position + HEADER_LEN as u64).min(bounds.data_len);
            if start.is_some() && !self.chunks.in_memory(object, position, header_end) {
                cut_short = true;
                break;
            }
            let header = self.header_at(object, position, bounds.data_len).await?;
            if !prefetched {
                // The chunks this read will likely walk into, requested side by side rather
                // than one after another as the walk reaches them — but only once the chunk
                // it starts in is here: GETs sharing the store's bandwidth with that first
                // one would delay the first answer.
                prefetched = true;
                self.prefetch_range(object, position, max_bytes, bounds.data_len);
            }
            if header.base_offset != expected {
                return Err(corrupt(
                    object,
                    CorruptReason::Batch {
                        position,
                        detail: format!(
                            "base offset {} where {expected} was expected",
                            header.base_offset
                        ),
                    },
                ));
            }
            let end = position + u64::from(header.batch_length);
            if end > bounds.data_len {
                return Err(corrupt(
                    object,
                    CorruptReason::Field("batch runs past the data"),
                ));
            }
            if header.next_offset() <= from {
                position = end;
                expected = header.next_offset();
                continue;
            }
            let first = *start.get_or_insert(position);
            if position > first {
                if end - first > answer_bytes as u64 {
                    cut_short = answer_bytes < max_bytes;
                    break;
                }
                if !self.chunks.in_memory(object, position, end) {
                    cut_short = true;
                    break;
                }
                if end > answer_limit {
                    // The next answer starts with this batch, the reader reading on.
                    cut_short = true;
                    break;
                }
            } else {
                answer_limit = Self::answer_limit(chunk, first, end);
            }
            position = end;
            expected = header.next_offset();
        }
        if position >= bounds.data_len && expected != bounds.next_offset {
            return Err(corrupt(object, CorruptReason::Field("next_offset")));
        }
        Ok(Extent {
            start,
            end: position,
            next_offset: expected,
            cut_short,
        })
    }

    /// Where an answer whose first batch is `[first, first_end)` ends at the latest, for it
    /// to be one slice of a cached chunk rather than a copy of two: the end of the chunk the
    /// first batch lies in. A first batch that straddles two chunks is answered alone (one
    /// small copy), so that the next answer starts in the later chunk.
    fn answer_limit(chunk: u64, first: u64, first_end: u64) -> u64 {
        let last_chunk = first_end.saturating_sub(1) / chunk;
        if first / chunk == last_chunk {
            (last_chunk + 1) * chunk
        } else {
            first_end
        }
    }

    /// Prefetches the chunks after the one holding `position` that a read of `max_bytes`
    /// from there reaches.
    fn prefetch_range(&self, object: &ObjectData, position: u64, max_bytes: usize, data_len: u64) {
        let chunk = self.chunks.chunk_bytes();
        let likely_end = position.saturating_add(max_bytes as u64).min(data_len);
        for index in position / chunk + 1..likely_end.div_ceil(chunk) {
            self.chunks.prefetch(object, index);
        }
    }

    /// The header of the batch at `position` of an object whose data is `data_len` bytes.
    async fn header_at(
        &self,
        object: &ObjectData,
        position: u64,
        data_len: u64,
    ) -> Result<BatchHeader, TierError> {
        let header_end = (position + HEADER_LEN as u64).min(data_len);
        let raw = self.chunks.read(object, position, header_end).await?;
        BatchHeader::parse(&raw).map_err(|e| {
            corrupt(
                object,
                CorruptReason::Batch {
                    position,
                    detail: e.to_string(),
                },
            )
        })
    }

    /// The footer of a segment object, from the cache or its tail.
    async fn footer(
        &self,
        key: &Arc<str>,
        segment: &TieredSegment,
    ) -> Result<Arc<Footer>, TierError> {
        let fetch = async {
            crate::metrics::bump(&self.store.metrics().footer_misses, 1);
            let footer = self.fetch_footer(key, segment).await;
            if let Err(TierError::Corrupt { .. }) = &footer {
                crate::metrics::bump(&self.store.metrics().corrupt_objects, 1);
            }
            footer.map(Arc::new)
        };
        self.footers
            .try_get_with(key.clone(), fetch)
            .await
            .map_err(|e| (*e).clone())
    }

    async fn fetch_footer(&self, key: &str, segment: &TieredSegment) -> Result<Footer, TierError> {
        let corrupt = |reason| TierError::Corrupt {
            key: key.to_string(),
            reason,
        };
        let _slot = self.chunks.get_slot().await?;
        let (mut tail, size) = self
            .store
            .get_tail(key, self.config.tail_guess_bytes)
            .await?;
        if size != segment.object_bytes {
            return Err(corrupt(CorruptReason::Field("object size")));
        }
        if tail.len() < TRAILER_LEN {
            return Err(corrupt(CorruptReason::TooShort { size }));
        }
        let footer_len =
            Footer::footer_len(&tail[tail.len() - TRAILER_LEN..], size).map_err(corrupt)?;
        let needed = u64::from(footer_len) + TRAILER_LEN as u64;
        if needed > tail.len() as u64 {
            tail = self.store.get_range(key, size - needed..size).await?;
        }
        let footer = Footer::decode(&tail, size).map_err(corrupt)?;
        let agrees = footer.base_offset.get() == segment.base_offset
            && footer.next_offset.get() == segment.next_offset
            && footer.data_len == segment.data_bytes;
        if !agrees {
            return Err(corrupt(CorruptReason::Field(
                "footer disagrees with the manifest",
            )));
        }
        Ok(footer)
    }
}

//! Turns a local sealed segment into a segment object: streams its data in fixed-size chunks
//! (memory bounded by the chunk size and the parts in flight), builds the footer on the way
//! from the batch headers, and writes the object under a fresh, unique key.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_hot_log::storage::aligned_buffer;
use floe_hot_log::{SealedSegment, SyncActivity};
use floe_wire::batch::{BatchHeader, CRC_COVERS_FROM, HEADER_LEN};
use floe_wire::{LeaderEpoch, Offset};

use crate::layout::{PartitionPath, SegmentName};
use crate::segment::footer::{Footer, FooterEntry};
use crate::store::PART_BYTES;
use crate::{CorruptReason, TierError, TierStore};

/// How [`upload_segment`] shapes an object and reads the local segment.
#[derive(Debug, Clone)]
pub struct UploadSettings {
    /// Footer index density: an entry at least every this many bytes.
    pub index_interval_bytes: u32,
    /// To S3, data up to this size goes up in one PUT; more as a multipart upload.
    pub single_put_max: u64,
    /// Wait for a pause in the logs' syncs before each piece read from the local disk.
    pub yield_to: Option<YieldToSyncs>,
}

/// How an upload keeps out of the way of the syncs producers wait on, on the disk that holds
/// both the logs and the segments it reads (and, for a local directory, the objects it
/// writes). Before each piece it reads (1 MiB to a local directory, a part to S3), while
/// the logs' syncs have kept the disk busy at least `busy` of the time lately, it waits
/// until no sync has run for `quiet`, but no longer than `max_wait_per_mib` per MiB of the
/// piece. A burst of publishes is then synced without the upload's transfers and cache
/// flushes queued ahead of it, and the upload catches up in the pauses; while the syncs run
/// back to back, it still moves at least a MiB per `max_wait_per_mib`. Under a lighter
/// load, whose syncs leave the disk mostly idle, nothing waits.
#[derive(Debug, Clone)]
pub struct YieldToSyncs {
    pub activity: Arc<SyncActivity>,
    pub quiet: Duration,
    /// The share of time (0 to 1) syncs must have run lately for a piece to wait.
    pub busy: f64,
    pub max_wait_per_mib: Duration,
    /// Uploads yield only while the partition's upload backlog is at most this. Beyond it
    /// the upload takes its share of the disk: the backlog holds local disk space that only
    /// its upload frees, and read replicas see only what is tiered. Under a steady load that
    /// keeps the disk syncing at least `busy` of the time, tiering then lags by at most
    /// about this much plus what one upload interval seals.
    pub backlog_bytes_max: u64,
}

impl YieldToSyncs {
    /// Waits when syncs ran half the time lately, 10 ms after the last sync, at most 100 ms
    /// per MiB, with up to 256 MiB waiting (two default segments).
    pub fn new(activity: Arc<SyncActivity>) -> YieldToSyncs {
        YieldToSyncs {
            activity,
            quiet: Duration::from_millis(10),
            busy: 0.5,
            max_wait_per_mib: Duration::from_millis(100),
            backlog_bytes_max: 256 << 20,
        }
    }

    /// Blocks until the syncs pause, or for at most the bound for a piece of `bytes`.
    fn wait(&self, bytes: usize) {
        let max_wait = self
            .max_wait_per_mib
            .mul_f64(bytes as f64 / f64::from(1u32 << 20));
        let _waited = self
            .activity
            .wait_for_pause(self.quiet, self.busy, max_wait);
    }
}

/// A segment object written to the store, not yet in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedSegment {
    pub name: SegmentName,
    pub base_offset: Offset,
    pub next_offset: Offset,
    /// The object's size, footer included.
    pub object_bytes: u64,
    pub data_bytes: u64,
    pub record_count: u64,
    pub max_timestamp: i64,
    pub epoch: LeaderEpoch,
}

/// Uploads the batches of `segment` from offset `from` on (its base offset, or the first
/// batch after data a previous leader already tiered) as one object. To a local directory
/// the object is streamed to its file through one buffer, around the page cache
/// ([`crate::DirectObject`]). To S3, data up to `settings.single_put_max` bytes goes up in
/// one PUT, held in memory meanwhile; more goes as a multipart upload, streamed in parts
/// (each part a request of its own).
pub async fn upload_segment(
    store: &TierStore,
    partition: &PartitionPath,
    segment: &SealedSegment,
    from: Offset,
    epoch: LeaderEpoch,
    settings: &UploadSettings,
) -> Result<UploadedSegment, TierError> {
    let from = upload_from(segment, from)?;
    let start = start_position(segment, from).await?;
    let name = SegmentName::generate(from, epoch);
    let key = partition.segment_key(&name);
    let builder = FooterBuilder::new(from, settings.index_interval_bytes);
    let data_len = segment.size_bytes - start;
    let yield_to = settings.yield_to.as_ref();
    let footer = if store.is_local() {
        upload_to_directory(store, &key, segment, start, builder, yield_to).await?
    } else if data_len <= settings.single_put_max.max(PART_BYTES as u64) {
        upload_in_one_put(store, &key, segment, start, builder, yield_to).await?
    } else {
        upload_in_parts(store, &key, segment, start, builder, yield_to).await?
    };
    let object_bytes = footer.data_len + footer.encode().len() as u64;
    Ok(UploadedSegment {
        name,
        base_offset: footer.base_offset,
        next_offset: footer.next_offset,
        object_bytes,
        data_bytes: footer.data_len,
        record_count: footer.record_count,
        max_timestamp: footer.max_timestamp,
        epoch,
    })
}

/// The first offset to upload: `from`, or the segment's base offset when that is later.
/// Refuses a segment with nothing at or after it, or too large for a footer to address.
fn upload_from(segment: &SealedSegment, from: Offset) -> Result<Offset, TierError> {
    let local = local_corrupt(segment, 0);
    let from = from.max(segment.base_offset);
    if segment.next_offset <= from || segment.size_bytes == 0 {
        return Err(local(CorruptReason::Field("nothing to upload")));
    }
    if segment.size_bytes > u64::from(u32::MAX) {
        return Err(local(CorruptReason::Field("segment too large")));
    }
    Ok(from)
}

/// Streams the segment from `start` to `key` in a local-directory store.
async fn upload_to_directory(
    store: &TierStore,
    key: &str,
    segment: &SealedSegment,
    start: u64,
    builder: FooterBuilder,
    yield_to: Option<&YieldToSyncs>,
) -> Result<Footer, TierError> {
    // One pass through one buffer, whatever the size: read, checked, written to disk.
    let segment = segment.clone();
    let object_key = key.to_string();
    let yield_to = yield_to.cloned();
    store
        .put_streamed(key, LOCAL_BUFFER_BYTES, move |object| {
            stream_to_file(
                &object_key,
                &segment,
                start,
                builder,
                object,
                yield_to.as_ref(),
            )
        })
        .await
}

/// Uploads the segment from `start` to `key` in one PUT, holding its data in memory.
async fn upload_in_one_put(
    store: &TierStore,
    key: &str,
    segment: &SealedSegment,
    start: u64,
    mut builder: FooterBuilder,
    yield_to: Option<&YieldToSyncs>,
) -> Result<Footer, TierError> {
    let local = local_corrupt(segment, start);
    let mut pieces = Vec::new();
    let mut position = start;
    while position < segment.size_bytes {
        let chunk = read_chunk(segment, position, yield_to).await?;
        builder.feed(&chunk).map_err(&local)?;
        position += chunk.len() as u64;
        pieces.push(chunk);
    }
    let footer = builder
        .finish(segment, segment.size_bytes - start)
        .map_err(local)?;
    pieces.push(footer.encode());
    store.put_pieces(key, pieces).await?;
    Ok(footer)
}

/// Streams the segment from `start` to `key` as a multipart upload, aborted on failure.
async fn upload_in_parts(
    store: &TierStore,
    key: &str,
    segment: &SealedSegment,
    start: u64,
    mut builder: FooterBuilder,
    yield_to: Option<&YieldToSyncs>,
) -> Result<Footer, TierError> {
    let mut writer = store.put_multipart(key).await?;
    match stream_chunks(segment, start, &mut builder, &mut writer, yield_to).await {
        Ok(footer) => {
            writer.write(&footer.encode()).await?;
            writer.finish().await?;
            Ok(footer)
        }
        Err(e) => {
            // The store discards the parts; an abort that fails leaves only invisible parts.
            let _ignored = writer.abort().await;
            Err(e)
        }
    }
}

/// The byte position of the batch starting at `from`, found by walking batch headers from
/// the local index entry at or below it.
async fn start_position(segment: &SealedSegment, from: Offset) -> Result<u64, TierError> {
    if from == segment.base_offset {
        return Ok(0);
    }
    let relative = from.distance_from(segment.base_offset);
    let mut position = segment
        .index
        .iter()
        .rev()
        .find(|e| u64::from(e.relative_offset) <= relative)
        .map_or(0, |e| u64::from(e.position));
    let local = local_corrupt(segment, 0);
    // Not damage: the tier ends inside one of this log's batches (a log that does not
    // continue the tier). `Batch` reasons are kept for damaged data.
    let not_a_boundary = || local(CorruptReason::Field("no batch starts at the tier's end"));
    while position + HEADER_LEN as u64 <= segment.size_bytes {
        let raw = read_exact(segment, position, HEADER_LEN, None).await?;
        let header = BatchHeader::parse(&raw).map_err(|e| {
            local(CorruptReason::Batch {
                position,
                detail: e.to_string(),
            })
        })?;
        if header.base_offset == from {
            return Ok(position);
        }
        if header.next_offset() > from {
            return Err(not_a_boundary());
        }
        position += u64::from(header.batch_length);
    }
    Err(not_a_boundary())
}

async fn stream_chunks(
    segment: &SealedSegment,
    start: u64,
    builder: &mut FooterBuilder,
    writer: &mut crate::store::MultipartWriter,
    yield_to: Option<&YieldToSyncs>,
) -> Result<Footer, TierError> {
    let local = local_corrupt(segment, start);
    let mut position = start;
    while position < segment.size_bytes {
        let chunk = read_chunk(segment, position, yield_to).await?;
        builder.feed(&chunk).map_err(&local)?;
        writer.write(&chunk).await?;
        position += chunk.len() as u64;
    }
    builder
        .finish(segment, segment.size_bytes - start)
        .map_err(local)
}

/// Copies the segment's data from `start` on into a local object, reading straight into the
/// object's write buffer, and appends the footer. Blocking.
fn stream_to_file(
    key: &str,
    segment: &SealedSegment,
    start: u64,
    mut builder: FooterBuilder,
    object: &mut crate::DirectObject,
    yield_to: Option<&YieldToSyncs>,
) -> Result<Footer, TierError> {
    let local = local_corrupt(segment, start);
    let unavailable = |e| TierError::local_io("put", key, e);
    let mut position = start;
    while position < segment.size_bytes {
        let spare = object.spare();
        let n = (segment.size_bytes - position).min(spare.len() as u64) as usize;
        let piece = &mut spare[..n];
        if let Some(y) = yield_to {
            y.wait(n);
        }
        // The buffer is aligned and every piece but the last a multiple of its alignment,
        // so the segment is read around the page cache: no page is allocated and filled
        // for data read once (and, after the log's page-cache release, mostly on disk).
        segment
            .read_uncached_at(piece, position)
            .map_err(local_read(segment.base_offset))?;
        builder.feed(piece).map_err(&local)?;
        object.commit(n).map_err(unavailable)?;
        position += n as u64;
    }
    let footer = builder
        .finish(segment, segment.size_bytes - start)
        .map_err(local)?;
    object.write(&footer.encode()).map_err(unavailable)?;
    Ok(footer)
}

/// The buffer a segment is streamed through to a local-directory object: each fill is one
/// direct read of the segment and one direct write of the object. Small enough that the
/// log's syncs, on the same disk, do not queue behind long transfers: a 1 GiB publish
/// whose sealed segments were uploaded meanwhile ran 11% faster on average than with
/// 8 MiB, in five pairs of runs (`docs/benchmarks-history.md`).
const LOCAL_BUFFER_BYTES: usize = 1024 * 1024;

/// Reads up to [`PART_BYTES`] of the segment at `position`, once the syncs pause.
async fn read_chunk(
    segment: &SealedSegment,
    position: u64,
    yield_to: Option<&YieldToSyncs>,
) -> Result<Bytes, TierError> {
    let len = (segment.size_bytes - position).min(PART_BYTES as u64) as usize;
    read_exact(segment, position, len, yield_to.cloned()).await
}

/// Reads `len` bytes at `position` on a blocking thread, first waiting there for a pause in
/// the syncs when `yield_to` says so.
async fn read_exact(
    segment: &SealedSegment,
    position: u64,
    len: usize,
    yield_to: Option<YieldToSyncs>,
) -> Result<Bytes, TierError> {
    let base_offset = segment.base_offset;
    let segment = segment.clone();
    let read = tokio::task::spawn_blocking(move || {
        if let Some(y) = &yield_to {
            y.wait(len);
        }
        // Aligned, so the read can go around the page cache.
        let (mut buf, at) = aligned_buffer(len);
        segment
            .read_uncached_at(&mut buf[at..at + len], position)
            .map(|()| Bytes::from(buf).slice(at..at + len))
    })
    .await
    .map_err(|e| local_read(base_offset)(std::io::Error::other(e.to_string())))?;
    read.map_err(local_read(base_offset))
}

/// The error for data of the local `segment` that is not what it should be, given a reason
/// whose batch position counts from byte `start` of the file (where the upload began).
fn local_corrupt(segment: &SealedSegment, start: u64) -> impl Fn(CorruptReason) -> TierError {
    let base_offset = segment.base_offset;
    let file = segment.path.clone();
    move |reason| TierError::LocalSegment {
        base_offset,
        file: file.clone(),
        reason: match reason {
            CorruptReason::Batch { position, detail } => CorruptReason::Batch {
                position: start + position,
                detail,
            },
            other => other,
        },
    }
}

/// The error for a failed read of the local segment at `base_offset`.
fn local_read(base_offset: Offset) -> impl Fn(std::io::Error) -> TierError {
    move |e| TierError::LocalRead {
        base_offset,
        source: std::sync::Arc::new(e),
    }
}

/// Builds a footer from a segment's data fed in order, in pieces of any size, and checks
/// every batch's CRC32C on the way: local rot is refused, never copied to the tier. Pure.
#[derive(Debug)]
pub(crate) struct FooterBuilder {
    base_offset: Offset,
    interval: u64,
    fed: u64,
    crc: u32,
    /// Where the next batch starts, and its expected base offset.
    next_batch: u64,
    expected: Offset,
    /// The part of the next batch's header seen so far, when it straddles two pieces.
    carry: Vec<u8>,
    /// The batch whose body is being fed: where it starts and ends, its stored CRC and the
    /// CRC of its covered bytes so far. `None` between batches.
    open: Option<OpenBatch>,
    entries: Vec<FooterEntry>,
    last_entry_position: u64,
    running_max: Option<i64>,
    records: u64,
}

/// A batch whose header was parsed and whose body is still being fed.
#[derive(Debug, Clone, Copy)]
struct OpenBatch {
    start: u64,
    end: u64,
    stored_crc: u32,
    crc: u32,
}

impl FooterBuilder {
    pub(crate) fn new(base_offset: Offset, interval_bytes: u32) -> FooterBuilder {
        FooterBuilder {
            base_offset,
            interval: u64::from(interval_bytes.max(1)),
            fed: 0,
            crc: 0,
            next_batch: 0,
            expected: base_offset,
            carry: Vec::with_capacity(HEADER_LEN),
            open: None,
            entries: Vec::new(),
            last_entry_position: 0,
            running_max: None,
            records: 0,
        }
    }

    /// Feeds the next piece of data. Positions in errors are relative to the first byte fed.
    pub(crate) fn feed(&mut self, piece: &[u8]) -> Result<(), CorruptReason> {
        let piece_start = self.fed;
        self.crc = crc32c::crc32c_append(self.crc, piece);
        self.fed += piece.len() as u64;
        let mut at = 0;
        while at < piece.len() {
            let rest = &piece[at..];
            at += match self.open {
                Some(batch) => self.feed_body(batch, piece_start + at as u64, rest)?,
                None => self.feed_header(rest)?,
            };
        }
        Ok(())
    }

    /// Takes header bytes of the next batch from `rest`; parses the header once whole.
    /// Returns how many bytes it took.
    fn feed_header(&mut self, rest: &[u8]) -> Result<usize, CorruptReason> {
        let take = (HEADER_LEN - self.carry.len()).min(rest.len());
        self.carry.extend_from_slice(&rest[..take]);
        if self.carry.len() < HEADER_LEN {
            return Ok(take);
        }
        let header = BatchHeader::parse(&self.carry).map_err(|e| CorruptReason::Batch {
            position: self.next_batch,
            detail: e.to_string(),
        })?;
        let start = self.next_batch;
        self.on_batch(&header)?;
        self.open = Some(OpenBatch {
            start,
            end: self.next_batch,
            stored_crc: header.crc,
            crc: crc32c::crc32c(&self.carry[CRC_COVERS_FROM..]),
        });
        self.carry.clear();
        Ok(take)
    }

    /// Takes body bytes of `batch` (which continue at `position`) from `rest`, and checks
    /// its CRC once its last byte is in. Returns how many bytes it took.
    fn feed_body(
        &mut self,
        mut batch: OpenBatch,
        position: u64,
        rest: &[u8],
    ) -> Result<usize, CorruptReason> {
        let take = (batch.end - position).min(rest.len() as u64) as usize;
        batch.crc = crc32c::crc32c_append(batch.crc, &rest[..take]);
        self.open = Some(batch);
        if position + take as u64 == batch.end {
            self.open = None;
            if batch.crc != batch.stored_crc {
                return Err(CorruptReason::Batch {
                    position: batch.start,
                    detail: format!(
                        "checksum mismatch (stored {:#010x}, computed {:#010x})",
                        batch.stored_crc, batch.crc
                    ),
                });
            }
        }
        Ok(take)
    }

    fn on_batch(&mut self, header: &BatchHeader) -> Result<(), CorruptReason> {
        let position = self.next_batch;
        if header.base_offset != self.expected {
            return Err(CorruptReason::Batch {
                position,
                detail: format!(
                    "base offset {} where {} was expected",
                    header.base_offset, self.expected
                ),
            });
        }
        let max = self
            .running_max
            .map_or(header.max_timestamp, |m| m.max(header.max_timestamp));
        self.running_max = Some(max);
        if self.entries.is_empty() || position - self.last_entry_position >= self.interval {
            let relative = header.base_offset.distance_from(self.base_offset);
            self.entries.push(FooterEntry {
                relative_offset: u32::try_from(relative)
                    .map_err(|_| CorruptReason::Field("relative offset"))?,
                position: u32::try_from(position).map_err(|_| CorruptReason::Field("position"))?,
                max_timestamp: max,
            });
            self.last_entry_position = position;
        }
        self.records += u64::from(header.record_count);
        self.expected = header.next_offset();
        self.next_batch += u64::from(header.batch_length);
        Ok(())
    }

    /// The footer, once exactly `data_len` bytes were fed ending at the segment's end.
    pub(crate) fn finish(
        &self,
        segment: &SealedSegment,
        data_len: u64,
    ) -> Result<Footer, CorruptReason> {
        let partial = !self.carry.is_empty() || self.open.is_some();
        if partial || self.next_batch != self.fed || self.fed != data_len {
            return Err(CorruptReason::Field("data_len"));
        }
        if self.expected != segment.next_offset {
            return Err(CorruptReason::Field("next_offset"));
        }
        Ok(Footer {
            base_offset: self.base_offset,
            next_offset: self.expected,
            data_len: self.fed,
            record_count: self.records,
            max_timestamp: self.running_max.unwrap_or(i64::MIN),
            data_crc32c: self.crc,
            entries: self.entries.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use floe_wire::batch::stamp;
    use floe_wire::{BatchBuilder, LeaderEpoch};

    use super::*;

    /// Three batches of different sizes, stamped at offsets 10, 13 and 15; with each batch's
    /// start position.
    fn data() -> (Vec<u8>, Vec<u64>) {
        let mut data = Vec::new();
        let mut starts = Vec::new();
        let mut offset = 10;
        for (records, size) in [(3u32, 40usize), (2, 300), (4, 7)] {
            let mut builder = BatchBuilder::new(1 << 20);
            for i in 0..records {
                builder
                    .push(1_000 + i64::from(i), None, &vec![b'v'; size], &[])
                    .expect("push");
            }
            let mut batch = builder.finish().expect("finish").to_vec();
            stamp(&mut batch, Offset::new(offset), LeaderEpoch::new(1)).expect("stamp");
            starts.push(data.len() as u64);
            data.extend_from_slice(&batch);
            offset += u64::from(records);
        }
        (data, starts)
    }

    fn feed_in_pieces(data: &[u8], piece: usize) -> Result<FooterBuilder, CorruptReason> {
        let mut builder = FooterBuilder::new(Offset::new(10), 64);
        for chunk in data.chunks(piece) {
            builder.feed(chunk)?;
        }
        Ok(builder)
    }

    #[test]
    fn whole_batches_pass_in_pieces_of_any_size() {
        let (data, _) = data();
        for piece in [1, 2, 7, 63, 64, 65, 100, 333, data.len()] {
            let builder = feed_in_pieces(&data, piece).expect("valid data");
            assert!(
                builder.open.is_none() && builder.carry.is_empty(),
                "{piece}"
            );
            assert_eq!(builder.expected, Offset::new(19), "{piece}");
            assert_eq!(builder.records, 9);
            assert_eq!(builder.crc, crc32c::crc32c(&data));
        }
    }

    #[test]
    fn a_flipped_byte_under_a_batch_checksum_is_refused_at_that_batch() {
        let (data, starts) = data();
        let covered = |at: usize| {
            let batch = starts
                .iter()
                .rposition(|&s| s as usize <= at)
                .expect("a batch");
            (at - starts[batch] as usize >= CRC_COVERS_FROM).then_some(starts[batch])
        };
        for at in (0..data.len()).step_by(5) {
            let Some(batch_start) = covered(at) else {
                continue;
            };
            let mut damaged = data.clone();
            damaged[at] ^= 0x01;
            for piece in [1, 64, 100, data.len()] {
                match feed_in_pieces(&damaged, piece) {
                    Err(CorruptReason::Batch { position, .. }) => {
                        assert_eq!(position, batch_start, "byte {at}, pieces of {piece}")
                    }
                    other => panic!("byte {at}, pieces of {piece}: {other:?}"),
                }
            }
        }
    }
}

//! The tier's scenarios, each read as a script: racing writers, upload and read back,
//! retention and collection, corruption.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_hot_log::{RetentionPolicy, SyncActivity};
use floe_tier::manifest::{Change, ChangeError, ManifestLog, ManifestState, TieredSegment};
use floe_tier::segment::{UploadSettings, upload_segment};
use floe_tier::{
    Collector, CorruptReason, PartitionPath, ReaderConfig, SegmentName, TierError, TierReader,
    TierRetention, TierStore, Uploader, UploaderConfig, YieldToSyncs, apply_tier_retention,
    delete_stream,
};
use floe_wire::{LeaderEpoch, Offset};

use common::{fill_log, now_ms, open_log, split_batches};

fn partition() -> PartitionPath {
    PartitionPath::new("orders", 3).expect("valid")
}

fn fake_segment(base: u64, next: u64, epoch: u32) -> TieredSegment {
    let epoch = LeaderEpoch::new(epoch);
    TieredSegment {
        name: SegmentName::parse(&format!(
            "{base:020}-{epoch}-{:032x}.seg",
            u128::from(base) << 64 | u128::from(next)
        ))
        .expect("valid name")
        .0,
        base_offset: base,
        next_offset: next,
        object_bytes: 200,
        data_bytes: 100,
        record_count: next - base,
        max_timestamp: 0,
        epoch,
    }
}

fn add(epoch: u32, segments: Vec<TieredSegment>) -> Change {
    Change {
        epoch: LeaderEpoch::new(epoch),
        committed_at_ms: 1,
        added: segments,
        removed: Vec::new(),
    }
}

fn small_reader_config() -> ReaderConfig {
    ReaderConfig {
        chunk_bytes: 4096,
        memory_cache_bytes: 1 << 20,
        tail_guess_bytes: 256,
        ..ReaderConfig::default()
    }
}

/// Reads the whole tier of `partition` from `from`, one read after another.
async fn read_all(reader: &TierReader, partition: &PartitionPath, from: u64, end: u64) -> Bytes {
    let mut out = BytesMut::new();
    let mut at = Offset::new(from);
    while at.get() < end {
        let read = reader.read(partition, at, 3000).await.expect("read");
        assert!(read.next_offset > at, "a read makes progress");
        out.extend_from_slice(&read.bytes);
        at = read.next_offset;
    }
    out.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_racing_for_one_version_exactly_one_wins() {
    for s in common::stores().await {
        let a = ManifestLog::new(s.store.clone(), partition());
        let b = ManifestLog::new(s.store.clone(), partition());
        let known = ManifestState::default();
        // Both start from the same state and race on separate tasks for version 1.
        let race = |log: ManifestLog, known: ManifestState, next: u64| {
            tokio::spawn(async move {
                log.commit(Some(known), &add(1, vec![fake_segment(0, next, 1)]))
                    .await
            })
        };
        let ta = race(a.clone(), known.clone(), 10);
        let tb = race(b.clone(), known.clone(), 12);
        let (ra, rb) = (ta.await.expect("join"), tb.await.expect("join"));
        let (winner, loser) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            other => panic!("{}: expected one winner, got {other:?}", s.name),
        };
        assert_eq!(winner.version, 1);
        assert!(
            matches!(
                loser,
                TierError::Rejected(ChangeError::NotContiguous { found: 0, .. })
            ),
            "{}: the loser re-read and found its change no longer applies: {loser:?}",
            s.name
        );
        // A loser whose change still applies after re-reading commits the next version.
        let end = winner.tier_end().get();
        let late = a
            .commit(Some(known), &add(1, vec![fake_segment(end, end + 5, 1)]))
            .await
            .expect("still applies");
        assert_eq!(late.version, 2);
        assert_eq!(a.load().await.expect("load"), late);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_with_an_older_epoch_is_fenced() {
    let s = common::local_store();
    let log = ManifestLog::new(s.store.clone(), partition());
    log.commit(None, &add(5, vec![fake_segment(0, 10, 5)]))
        .await
        .expect("epoch 5 commits");
    let stale = log
        .commit(None, &add(4, vec![fake_segment(10, 20, 4)]))
        .await;
    assert!(
        matches!(
            stale,
            Err(TierError::Fenced { writer, committed })
                if writer == LeaderEpoch::new(4) && committed == LeaderEpoch::new(5)
        ),
        "{stale:?}"
    );
    assert_eq!(log.load().await.expect("load").tier_end(), Offset::new(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_writer_fences_older_epochs_out_before_it_writes() {
    let s = common::local_store();
    let old = ManifestLog::new(s.store.clone(), partition());
    old.commit(None, &add(1, vec![fake_segment(0, 10, 1)]))
        .await
        .expect("epoch 1 commits");
    // The new writer fences at epoch 3 before it takes writes: it learns who wrote last and
    // where the tier ends, and that end is final for older writers.
    let new = ManifestLog::new(s.store.clone(), partition());
    let (before, fenced) = new
        .fence(None, LeaderEpoch::new(3), 5)
        .await
        .expect("fence");
    assert_eq!(before, LeaderEpoch::new(1));
    assert_eq!((fenced.version, fenced.epoch), (2, LeaderEpoch::new(3)));
    assert_eq!(fenced.tier_end(), Offset::new(10));
    let stale = old
        .commit(None, &add(1, vec![fake_segment(10, 20, 1)]))
        .await;
    assert!(
        matches!(stale, Err(TierError::Fenced { committed, .. }) if committed == LeaderEpoch::new(3)),
        "{stale:?}"
    );
    // Fencing again at the same epoch writes nothing; at an older one it is fenced itself.
    let (again, state) = new
        .fence(None, LeaderEpoch::new(3), 6)
        .await
        .expect("fence");
    assert_eq!((again, state.version), (LeaderEpoch::new(3), 2));
    assert!(matches!(
        new.fence(None, LeaderEpoch::new(2), 7).await,
        Err(TierError::Fenced { .. })
    ));
    // Readers replay the fence like any version; the new writer continues the tier.
    let next = new
        .commit(Some(state), &add(3, vec![fake_segment(10, 20, 3)]))
        .await
        .expect("epoch 3 commits");
    assert_eq!(old.load().await.expect("load"), next);
    // A change of no segment at the manifest's own epoch is still refused.
    assert_eq!(
        next.apply(&add(3, Vec::new())),
        Err(ChangeError::Empty),
        "an empty change that raises nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploader_fences_and_reports_the_tier_it_continues() {
    let s = common::local_store();
    let log = ManifestLog::new(s.store.clone(), partition());
    log.commit(None, &add(2, vec![fake_segment(0, 10, 2)]))
        .await
        .expect("epoch 2 commits");
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let fence = uploader.fence(LeaderEpoch::new(4)).await.expect("fence");
    assert_eq!(fence.before, LeaderEpoch::new(2));
    assert_eq!(fence.tier_end, Offset::new(10));
    assert_eq!(uploader.tier_end(), Offset::new(10));
    assert!(matches!(
        uploader
            .run(&[], Offset::new(10), LeaderEpoch::new(3))
            .await,
        Err(TierError::Fenced { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_bound_the_replay_and_old_versions_are_collected() {
    let s = common::local_store();
    let log = ManifestLog::new(s.store.clone(), partition()).with_checkpoint_interval(10);
    let mut state = None;
    for i in 0..25u64 {
        let next = log
            .commit(
                state.take(),
                &add(1, vec![fake_segment(i * 10, i * 10 + 10, 1)]),
            )
            .await
            .expect("commit");
        state = Some(next);
    }
    let state = state.expect("committed");
    assert_eq!(log.load().await.expect("load"), state);
    let deleted = log.collect(now_ms() + 1, 0).await.expect("collect");
    // Versions 1..=20 and the checkpoint at 10 go; the checkpoint at 20 and 21..=25 stay.
    assert_eq!(deleted, 21);
    let left = s.store.list("orders/3/manifest").await.expect("list");
    assert_eq!(left.len(), 6);
    assert_eq!(log.load().await.expect("load from the checkpoint"), state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_then_read_back_every_batch_byte_identical_across_segments() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_log(dir.path(), 6 * 1024);
        let mut stored = Vec::new();
        for round in 0..4 {
            stored.extend(fill_log(&log, &format!("r{round}"), 7, 3, 300));
        }
        let sealed = log.sealed_segments();
        assert!(sealed.len() >= 4, "several segments: {}", sealed.len());
        let end = log.log_end();

        let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
        let report = uploader
            .run(&sealed, end, LeaderEpoch::new(1))
            .await
            .expect("upload");
        assert_eq!(report.committed.len(), sealed.len());
        assert_eq!(report.tier_end, end);
        assert_eq!(uploader.backlog().segments, 0);
        assert!(sealed.iter().all(|seg| uploader.is_tiered(seg)));

        let reader = TierReader::new(s.store.clone(), small_reader_config())
            .await
            .expect("reader");
        let all = read_all(&reader, &partition(), 0, end.get()).await;
        assert_eq!(split_batches(&all), stored, "{}: byte-identical", s.name);
        assert!(
            s.store.metrics().snapshot().prefetches > 0,
            "a sequential reader prefetches"
        );

        // The time index finds the first batch reaching a timestamp: batch i of a round holds
        // timestamps 1_000 + i ..= 1_002 + i, so 1_003 is first reached by batch 1 (offset 3).
        let by_time = reader
            .offset_for_timestamp(&partition(), 1_003)
            .await
            .expect("time lookup");
        assert_eq!(by_time, Some(Offset::new(3)));
        let too_new = reader.offset_for_timestamp(&partition(), 1 << 50).await;
        assert_eq!(too_new.expect("time lookup"), None);

        // A read from the middle of a batch returns that whole batch.
        let mid = stored[5].clone();
        let base = floe_wire::BatchHeader::parse(&mid)
            .expect("header")
            .base_offset;
        let read = reader
            .read(&partition(), Offset::new(base.get() + 1), 1)
            .await
            .expect("read");
        assert_eq!(read.bytes, mid);

        // Any process with bucket access finds the tier without the uploader.
        let again = ManifestLog::new(s.store.clone(), partition())
            .load()
            .await
            .expect("load");
        assert_eq!(again.tier_end(), end);
        let beyond = reader.read(&partition(), end, 100).await;
        assert!(matches!(beyond, Err(TierError::OffsetOutOfRange { .. })));
    }
}

/// Uploads every sealed segment of `log` in one run, all of them committed.
async fn upload_sealed(store: &TierStore, log: &floe_hot_log::Log) {
    let sealed = log.sealed_segments();
    let uploader = Uploader::new(store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&sealed, log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert_eq!(report.committed.len(), sealed.len());
}

/// 4 KiB chunks; every footer in one GET and no manifest reload, so the GETs a test sees
/// are the ones its reads and prefetches make.
fn counted_reader_config() -> ReaderConfig {
    ReaderConfig {
        chunk_bytes: 4096,
        memory_cache_bytes: 1 << 20,
        tail_guess_bytes: 1 << 20,
        manifest_ttl: Duration::from_secs(3600),
        ..ReaderConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_read_reaching_a_segments_end_fetches_the_next_one_ahead() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 16 * 1024);
    for round in 0..3 {
        fill_log(&log, &format!("r{round}"), 20, 3, 300);
    }
    let sealed = log.sealed_segments();
    assert!(sealed.len() >= 2, "two segments at least: {}", sealed.len());
    upload_sealed(&s.store, &log).await;
    let config = counted_reader_config();
    let read_ahead = config.read_ahead_chunks;
    let reader = TierReader::new(s.store.clone(), config)
        .await
        .expect("reader");
    let state = reader.manifest(&partition()).await.expect("manifest");
    let (first, second) = (&state.segments[0], &state.segments[1]);
    assert!(second.data_bytes > 4096, "the next segment spans chunks");

    // The whole first segment in large reads: a sequential reader at the object's end. It
    // GETs that object's footer and chunks; then, in the background, the next object's
    // footer and its first chunks as far as the read-ahead window reaches.
    let before_read = s.store.metrics().snapshot().gets;
    let mut at = Offset::new(first.base_offset);
    while at.get() < first.next_offset {
        at = reader
            .read(&partition(), at, 1 << 20)
            .await
            .expect("read")
            .next_offset;
    }
    assert_eq!(at.get(), first.next_offset);
    let expected = before_read
        + 1
        + first.data_bytes.div_ceil(4096)
        + 1
        + read_ahead.min(second.data_bytes.div_ceil(4096));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.store.metrics().snapshot().gets < expected {
        assert!(
            std::time::Instant::now() < deadline,
            "the next segment was not fetched ahead: {} GETs, {expected} expected",
            s.store.metrics().snapshot().gets
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Reading on into the next segment finds its footer and first chunk cached.
    let before = s.store.metrics().snapshot();
    let read = reader
        .read(&partition(), Offset::new(second.base_offset), 2048)
        .await
        .expect("read");
    assert!(read.next_offset.get() > second.base_offset);
    let after = s.store.metrics().snapshot();
    assert_eq!(
        (after.footer_misses, after.chunk_misses),
        (before.footer_misses, before.chunk_misses),
        "the read of the next segment found its footer and chunk cached"
    );
    assert!(after.chunk_hits > before.chunk_hits);
}

/// A reader, with counted requests, over tiered segments of several 4 KiB chunks each in an
/// in-memory store whose GETs can be slowed; the first segment. The directory holds the log.
async fn throttled_reader_of_segments() -> (
    Arc<object_store::throttle::ThrottledStore<object_store::memory::InMemory>>,
    TierStore,
    tempfile::TempDir,
    TierReader,
    TieredSegment,
) {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    let throttled = Arc::new(ThrottledStore::new(
        object_store::memory::InMemory::new(),
        ThrottleConfig::default(),
    ));
    let store = TierStore::new(throttled.clone(), "bucket");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 16 * 1024);
    fill_log(&log, "a", 20, 3, 300);
    upload_sealed(&store, &log).await;
    let reader = TierReader::new(store.clone(), counted_reader_config())
        .await
        .expect("reader");
    let first = reader
        .manifest(&partition())
        .await
        .expect("manifest")
        .segments[0]
        .clone();
    assert!(
        first.data_bytes > 3 * 4096,
        "the segment spans several chunks"
    );
    (throttled, store, dir, reader, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_being_prefetched_is_not_prefetched_again() {
    let (throttled, store, _dir, reader, first) = throttled_reader_of_segments().await;
    // From here on every GET takes a second, so the prefetches the first read starts are
    // still in flight when the second read comes. The first read starts past the object's
    // first offset, so that it reads the footer before its chunk (one from the first offset
    // would leave the footer for the second read to wait for, a second in which the next
    // object's prefetches start).
    throttled.config_mut(|c| c.wait_get_per_call = Duration::from_secs(1));
    let one = reader
        .read(&partition(), Offset::new(first.base_offset + 1), 3000)
        .await
        .expect("read");
    let after_one = prefetches_started(&store);
    assert!(after_one >= 2, "a sequential read prefetches: {after_one}");
    // The next batch, still in chunk 0: it wants the same chunks ahead, all in flight.
    let two = reader
        .read(&partition(), one.next_offset, 1)
        .await
        .expect("read");
    assert!(
        one.bytes.len() >= 2048 && one.bytes.len() + two.bytes.len() <= 4096,
        "both reads lie in chunk 0, the first past its middle: {} + {} bytes",
        one.bytes.len(),
        two.bytes.len()
    );
    assert_eq!(
        prefetches_started(&store),
        after_one,
        "chunks being prefetched were prefetched again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_one_slice_of_a_chunk_save_a_batch_that_straddles_two() {
    let (_throttled, _store, _dir, reader, first) = throttled_reader_of_segments().await;
    // Twice: cold (chunks fetched as the reads go), then from the cache.
    for pass in ["cold", "cached"] {
        let mut at = Offset::new(first.base_offset);
        let mut position = 0u64;
        let mut straddlers = 0;
        while at.get() < first.next_offset {
            let read = reader.read(&partition(), at, 1 << 20).await.expect("read");
            assert!(read.next_offset > at, "{pass}: a read makes progress");
            let len = read.bytes.len() as u64;
            let (first_chunk, last_chunk) = (position / 4096, (position + len - 1) / 4096);
            if first_chunk != last_chunk {
                assert_eq!(
                    split_batches(&read.bytes).len(),
                    1,
                    "{pass}: an answer at {position}, {len} bytes, spans chunks {first_chunk}..={last_chunk} with more than its first batch"
                );
                straddlers += 1;
            }
            position += len;
            at = read.next_offset;
        }
        assert_eq!(position, first.data_bytes, "{pass}: every byte once");
        assert!(straddlers > 0, "{pass}: no batch straddled two chunks");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_read_answers_from_its_first_chunk_while_the_next_ones_are_fetched() {
    let (throttled, store, _dir, reader, first) = throttled_reader_of_segments().await;
    // Every GET takes 300 ms from here on: a read that waited for a second chunk after its
    // first would take twice that, after the footer's.
    throttled.config_mut(|c| c.wait_get_per_call = Duration::from_millis(300));
    let started = std::time::Instant::now();
    let one = reader
        .read(&partition(), Offset::new(first.base_offset), 1 << 20)
        .await
        .expect("read");
    let took = started.elapsed();
    assert!(
        !one.bytes.is_empty() && one.bytes.len() <= 4096,
        "the first answer holds what the first chunk holds: {} bytes",
        one.bytes.len()
    );
    assert!(
        took < Duration::from_millis(900),
        "the first answer waited for more than the footer and the first chunk: {took:?}"
    );
    assert!(
        prefetches_started(&store) >= 2,
        "the chunks after the first were prefetched"
    );
    // The rest comes in the following reads, whole and in order.
    let mut at = one.next_offset;
    let mut bytes = one.bytes.len();
    while at.get() < first.next_offset {
        let read = reader.read(&partition(), at, 1 << 20).await.expect("read");
        assert!(read.next_offset > at, "a read makes progress");
        bytes += read.bytes.len();
        at = read.next_offset;
    }
    assert_eq!(bytes as u64, first.data_bytes);
}

fn prefetches_started(store: &TierStore) -> u64 {
    store.metrics().snapshot().prefetches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_committed_data_is_tiered_and_local_retention_waits_for_it() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 4 * 1024);
    fill_log(&log, "a", 6, 2, 400);
    fill_log(&log, "b", 6, 2, 400);
    let sealed = log.sealed_segments();
    let high_watermark = sealed[1].next_offset;
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&sealed, high_watermark, LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert_eq!(report.tier_end, high_watermark);
    assert_eq!(uploader.backlog().segments, 0);
    // What waits is counted from the log at once, without another run: the segments above
    // the high watermark once it has moved past them.
    assert!(sealed.len() > 2, "segments above the high watermark");
    let now_waiting = uploader.waiting(log.sealed_sizes(), high_watermark);
    assert_eq!(now_waiting, floe_tier::Backlog::default());
    let later = uploader.waiting(log.sealed_sizes(), log.log_end());
    assert_eq!(later.segments, sealed.len() as u64 - 2);
    assert_eq!(
        later.bytes,
        sealed[2..].iter().map(|seg| seg.size_bytes).sum::<u64>()
    );

    let keep_nothing = RetentionPolicy {
        bytes_max: Some(0),
        age_max_ms: None,
    };
    let deleted = log
        .apply_retention(keep_nothing, now_ms(), |seg| uploader.is_tiered(seg))
        .expect("retention");
    assert_eq!(deleted.len(), 2, "only the tiered segments go");
    assert_eq!(log.log_start(), high_watermark);

    let rest = log.sealed_segments();
    let report = uploader
        .run(&rest, log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload the rest");
    assert_eq!(report.tier_end, log.log_end());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_with_other_segment_boundaries_continues_the_tier() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 1 << 20);
    let stored = fill_log(&log, "x", 10, 2, 100);
    let sealed = log.sealed_segments();
    assert_eq!(sealed.len(), 1);
    // An earlier leader tiered the first four batches (offsets 0..8) in its own object.
    let manifest = ManifestLog::new(s.store.clone(), partition());
    manifest
        .commit(None, &add(1, vec![fake_segment(0, 8, 1)]))
        .await
        .expect("earlier leader");
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&sealed, log.log_end(), LeaderEpoch::new(2))
        .await
        .expect("upload");
    assert_eq!(report.committed.len(), 1);
    assert_eq!(report.committed[0].base_offset, 8);
    let reader = TierReader::new(s.store.clone(), small_reader_config())
        .await
        .expect("reader");
    let tail = read_all(&reader, &partition(), 8, log.log_end().get()).await;
    assert_eq!(split_batches(&tail), stored[4..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_segment_goes_up_in_parts_and_reads_back() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_log(dir.path(), 64 << 20);
        let stored = fill_log(&log, "big", 40, 4, 64 * 1024);
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), 1, "one sealed segment");
        let size = sealed[0].size_bytes;
        assert!(size > 9 << 20, "larger than one part");
        // The same segment once in parts and once in a single PUT, under two partitions:
        // on S3 the parts cost a request each, plus creating and completing the upload.
        let mut puts = Vec::new();
        for (id, single_put_max_bytes) in [(0, 1 << 20), (1, 128 << 20)] {
            let partition = PartitionPath::new("big", id).expect("partition");
            let config = UploaderConfig {
                single_put_max_bytes,
                ..UploaderConfig::default()
            };
            let before = s.store.metrics().snapshot().puts;
            let uploader = Uploader::new(s.store.clone(), partition.clone(), config);
            let report = uploader
                .run(&sealed, log.log_end(), LeaderEpoch::new(1))
                .await
                .expect("upload");
            assert!(!report.committed.is_empty(), "something was tiered");
            puts.push(s.store.metrics().snapshot().puts - before);
            let config = ReaderConfig {
                chunk_bytes: 1 << 20,
                ..ReaderConfig::default()
            };
            let reader = TierReader::new(s.store.clone(), config)
                .await
                .expect("reader");
            let all = read_all(&reader, &partition, 0, log.log_end().get()).await;
            assert_eq!(split_batches(&all), stored, "{}", s.name);
        }
        if s.store.is_local() {
            // A local directory takes one streamed write whatever the size.
            assert_eq!(puts[0], puts[1], "{}: {puts:?}", s.name);
        } else {
            let parts = size.div_ceil(8 << 20);
            assert_eq!(puts[0] - puts[1], parts + 1, "{}: {puts:?}", s.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_smaller_than_the_read_set_still_makes_progress() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 32 * 1024);
    let mut stored = Vec::new();
    for round in 0..4 {
        stored.extend(fill_log(&log, &format!("c{round}"), 40, 2, 400));
    }
    let end = log.log_end();
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&log.sealed_segments(), end, LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert!(!report.committed.is_empty(), "something was tiered");
    let disk = tempfile::tempdir().expect("cache dir");
    let config = ReaderConfig {
        chunk_bytes: 4096,
        // Room for about two chunks in memory and a tiny disk tier: far less than the data.
        memory_cache_bytes: 10 * 1024,
        disk_cache: Some(floe_tier::DiskCacheConfig {
            dir: disk.path().to_path_buf(),
            capacity_bytes: 4 << 20,
            block_bytes: 1 << 20,
        }),
        concurrent_gets: 2,
        ..ReaderConfig::default()
    };
    let reader = TierReader::new(s.store.clone(), config)
        .await
        .expect("reader");
    let readers = (0..3).map(|_| {
        let reader = reader.clone();
        tokio::spawn(async move { read_all(&reader, &partition(), 0, end.get()).await })
    });
    let deadline = Duration::from_secs(120);
    for r in readers {
        let all = tokio::time::timeout(deadline, r)
            .await
            .expect("readers finish before the deadline")
            .expect("join");
        assert_eq!(split_batches(&all), stored);
    }
    let metrics = s.store.metrics().snapshot();
    assert!(
        metrics.chunk_misses > 0 && metrics.chunk_hits > 0,
        "{metrics:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_is_collected_after_the_grace_period() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 4 * 1024);
    fill_log(&log, "o", 6, 2, 400);
    fill_log(&log, "p", 6, 2, 400);
    let sealed = log.sealed_segments();
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&sealed[..1], sealed[0].next_offset, LeaderEpoch::new(1))
        .await
        .expect("upload the first");
    assert!(!report.committed.is_empty(), "something was tiered");
    // A crash between upload and commit leaves an object no manifest references.
    let orphan = upload_segment(
        &s.store,
        &partition(),
        &sealed[1],
        sealed[1].base_offset,
        LeaderEpoch::new(1),
        &UploadSettings {
            index_interval_bytes: 4096,
            single_put_max: 128 << 20,
            yield_to: None,
        },
    )
    .await
    .expect("upload without commit");

    let grace_ms = 60_000;
    let collector = Collector::new(s.store.clone(), grace_ms).expect("collector");
    let early = collector
        .collect_partition(&partition(), now_ms())
        .await
        .expect("collect");
    assert_eq!((early.segments_deleted, early.segments_in_grace), (0, 1));
    let late = collector
        .collect_partition(&partition(), now_ms() + grace_ms + 1)
        .await
        .expect("collect");
    assert_eq!(late.segments_deleted, 1);
    let left = s.store.list("orders/3/segments").await.expect("list");
    assert_eq!(left.len(), 1, "the committed segment stays");
    assert!(!left[0].key.ends_with(orphan.name.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_files_a_killed_writer_left_are_collected_after_the_grace_period() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 4096);
    fill_log(&log, "st", 40, 4, 400);
    let sealed = log.sealed_segments();
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&sealed, log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert!(!report.committed.is_empty(), "something was tiered");
    let objects = s.store.list("orders/3").await.expect("list");

    // What a broker killed mid-write leaves: `{file}#{n}` beside the objects, invisible to
    // listing. One in each directory of the partition, and one being written right now.
    let root = s.url.strip_prefix("file://").expect("a file URL");
    let segments = std::path::Path::new(root).join("orders/3/segments");
    let manifest = std::path::Path::new(root).join("orders/3/manifest");
    let stale = [
        segments.join("00000000000000000000-1-dead.seg#1"),
        manifest.join("00000000000000000009.json#2"),
    ];
    let fresh = segments.join("00000000000000000000-1-live.seg#1");
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for path in &stale {
        let file = std::fs::File::create(path).expect("staging file");
        file.set_modified(an_hour_ago).expect("set mtime");
    }
    std::fs::write(&fresh, b"in progress").expect("staging file");
    assert_eq!(s.store.list("orders/3").await.expect("list"), objects);

    let collector = Collector::new(s.store.clone(), 60_000).expect("collector");
    let collected = collector
        .collect_partition(&partition(), now_ms())
        .await
        .expect("collect");
    assert_eq!(collected.staging_files_deleted, 2);
    assert!(
        stale.iter().all(|p| !p.exists()),
        "stale staging files removed"
    );
    assert!(fresh.exists(), "a write still in grace is left alone");
    let mut after = s.store.list("orders/3").await.expect("list");
    let mut before = objects;
    after.sort_by(|a, b| a.key.cmp(&b.key));
    before.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(after, before, "no object touched");

    // Deleting the stream takes the staging files still in grace as well.
    let deleted = delete_stream(&s.store, "orders")
        .await
        .expect("delete the stream");
    assert_eq!(deleted, before.len() + 1);
    assert!(!fresh.exists(), "the stream's staging files are gone");
    assert!(s.store.list("orders").await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_commits_the_removal_first_and_objects_go_after_grace() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 4 * 1024);
    fill_log(&log, "a", 6, 2, 400);
    fill_log(&log, "b", 6, 2, 400);
    fill_log(&log, "c", 6, 2, 400);
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&log.sealed_segments(), log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert!(!report.committed.is_empty(), "something was tiered");
    let manifest = ManifestLog::new(s.store.clone(), partition());
    let before = manifest.load().await.expect("load");
    let count = before.segments.len();
    assert!(count >= 3, "several segments: {count}");
    let last = &before.segments[count - 1];
    let keep_one = TierRetention {
        bytes_max: Some(last.data_bytes),
        age_max_ms: None,
    };
    // A reader that loads the manifest now keeps it cached through what follows.
    let config = ReaderConfig {
        manifest_ttl: Duration::from_secs(3600),
        ..small_reader_config()
    };
    let stale = TierReader::new(s.store.clone(), config)
        .await
        .expect("reader");
    let cached = stale.manifest(&partition()).await.expect("load");
    assert_eq!(cached.segments.len(), count);
    let removed_at = now_ms();
    let after = apply_tier_retention(&manifest, keep_one, LeaderEpoch::new(1), removed_at)
        .await
        .expect("retention")
        .expect("something removed");
    assert_eq!(after.segments.len(), 1);
    assert_eq!(after.start_offset(), Offset::new(last.base_offset));

    let grace_ms = 30_000;
    let collector = Collector::new(s.store.clone(), grace_ms).expect("collector");
    let within = collector
        .collect_partition(&partition(), removed_at + grace_ms - 1)
        .await
        .expect("collect");
    assert_eq!(
        within.segments_deleted, 0,
        "readers of the old manifest still read them"
    );
    let after_grace = collector
        .collect_partition(&partition(), removed_at + grace_ms)
        .await
        .expect("collect");
    assert_eq!(after_grace.segments_deleted, count - 1);

    // The reader loaded the manifest before the removal; it learns where the tier starts now.
    let result = stale.read(&partition(), Offset::ZERO, 100).await;
    assert!(
        matches!(result, Err(TierError::OffsetOutOfRange { tier_start, .. }) if tier_start == Offset::new(last.base_offset)),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_object_is_reported_as_corrupt_never_served() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 1 << 20);
    fill_log(&log, "z", 8, 2, 300);
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&log.sealed_segments(), log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload");
    let key = format!("orders/3/segments/{}", report.committed[0].name);
    let good = s.store.get(&key).await.expect("get");

    // A flipped byte inside a record: the batch's checksum catches it.
    let mut bad = good.to_vec();
    bad[700] ^= 0x01;
    s.store
        .put(&key, Bytes::from(bad))
        .await
        .expect("overwrite");
    let reader = TierReader::new(s.store.clone(), small_reader_config())
        .await
        .expect("reader");
    let result = reader.read(&partition(), Offset::ZERO, 1 << 20).await;
    assert!(
        matches!(
            result,
            Err(TierError::Corrupt {
                reason: CorruptReason::Batch { .. },
                ..
            })
        ),
        "{result:?}"
    );

    // A flipped byte in the footer: its checksum catches it, on the first read that needs
    // the index (one from the object's first offset walks from position 0 without it).
    let mut bad = good.to_vec();
    let at = bad.len() - 30;
    bad[at] ^= 0x01;
    s.store
        .put(&key, Bytes::from(bad))
        .await
        .expect("overwrite");
    let fresh = TierReader::new(s.store.clone(), small_reader_config())
        .await
        .expect("reader");
    let result = fresh.read(&partition(), Offset::new(1), 1 << 20).await;
    assert!(
        matches!(result, Err(TierError::Corrupt { .. })),
        "{result:?}"
    );
    assert!(s.store.metrics().snapshot().corrupt_objects >= 2);
}

/// A read that finds a damaged batch fetches the object's chunks from the store again before
/// it answers `Corrupt`: the damaged copy may be the one in the cache. Here the store held a
/// damaged copy when the chunk was first cached, and a good one by the next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_cached_chunk_is_fetched_again_before_the_object_is_called_corrupt() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_log(dir.path(), 1 << 20);
        let stored = fill_log(&log, "c", 4, 3, 300);
        let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
        let report = uploader
            .run(&log.sealed_segments(), log.log_end(), LeaderEpoch::new(1))
            .await
            .expect("upload");
        let key = format!("orders/3/segments/{}", report.committed[0].name);
        let good = s.store.get(&key).await.expect("get");
        let mut bad = good.to_vec();
        bad[700] ^= 0x01;
        s.store
            .put(&key, Bytes::from(bad))
            .await
            .expect("overwrite");
        let reader = TierReader::new(s.store.clone(), small_reader_config())
            .await
            .expect("reader");
        let result = reader.read(&partition(), Offset::ZERO, 1 << 20).await;
        assert!(
            matches!(result, Err(TierError::Corrupt { .. })),
            "{}: {result:?}",
            s.name
        );
        assert_eq!(s.store.metrics().snapshot().corrupt_objects, 1);

        s.store.put(&key, good).await.expect("restore");
        let all = read_all(&reader, &partition(), 0, log.log_end().get()).await;
        assert_eq!(
            split_batches(&all),
            stored,
            "{}: the good copy is served",
            s.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stream_deletes_all_its_objects() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 4 * 1024);
    fill_log(&log, "d", 6, 2, 400);
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&log.sealed_segments(), log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert!(!report.committed.is_empty(), "something was tiered");
    let other = PartitionPath::new("orders-archive", 0).expect("valid");
    ManifestLog::new(s.store.clone(), other.clone())
        .commit(None, &add(1, vec![fake_segment(0, 1, 1)]))
        .await
        .expect("other stream");
    let deleted = delete_stream(&s.store, "orders").await.expect("delete");
    assert!(deleted >= 2);
    assert!(s.store.list("orders").await.expect("list").is_empty());
    assert_eq!(s.store.list("orders-archive").await.expect("list").len(), 1);
}

#[test]
fn tier_store_wraps_any_store_under_a_prefix() {
    let store = TierStore::new(
        std::sync::Arc::new(object_store::memory::InMemory::new()),
        "/a/b/",
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        store
            .put("x/y", Bytes::from_static(b"v"))
            .await
            .expect("put");
        let listed = store.list("x").await.expect("list");
        assert_eq!(listed[0].key, "x/y");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_for_one_chunk_share_one_get() {
    let s = common::local_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 1 << 20);
    let stored = fill_log(&log, "m", 10, 2, 200);
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let report = uploader
        .run(&log.sealed_segments(), log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload");
    assert_eq!(report.committed.len(), 1);
    let config = ReaderConfig {
        chunk_bytes: 1 << 20,
        ..ReaderConfig::default()
    };
    let reader = TierReader::new(s.store.clone(), config)
        .await
        .expect("reader");
    let reads = (0..8).map(|_| {
        let reader = reader.clone();
        tokio::spawn(async move { reader.read(&partition(), Offset::ZERO, 1).await })
    });
    for read in reads {
        let read = read.await.expect("join").expect("read");
        assert_eq!(read.bytes, stored[0]);
    }
    let metrics = s.store.metrics().snapshot();
    assert_eq!(metrics.chunk_misses, 1, "{metrics:?}");
    assert_eq!(metrics.footer_misses, 1, "{metrics:?}");
    // Each read looks the chunk up three times (a header, its batch, the next header that
    // no longer fits): 24 lookups, one GET.
    assert_eq!(metrics.chunk_hits, 23, "{metrics:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_goes_back_to_an_older_manifest() {
    let s = common::local_store();
    let log = ManifestLog::new(s.store.clone(), partition());
    let v1 = log
        .commit(None, &add(1, vec![fake_segment(0, 10, 1)]))
        .await
        .expect("v1");
    log.commit(Some(v1), &add(1, vec![fake_segment(10, 20, 1)]))
        .await
        .expect("v2");
    let config = ReaderConfig {
        manifest_ttl: Duration::from_millis(1),
        ..small_reader_config()
    };
    let reader = TierReader::new(s.store.clone(), config)
        .await
        .expect("reader");
    assert_eq!(
        reader.manifest(&partition()).await.expect("load").version,
        2
    );
    // The bucket now shows only version 1, as a lagging listing or replica might.
    s.store
        .delete("orders/3/manifest/00000000000000000002.json")
        .await
        .expect("delete");
    reader.invalidate_manifest(&partition()).await;
    let again = reader.manifest(&partition()).await.expect("load");
    assert_eq!(
        again.version, 2,
        "the reader keeps the newer state it has seen"
    );
    assert_eq!(again.tier_end(), Offset::new(20));
}

#[tokio::test(start_paused = true)]
async fn an_unwritable_store_keeps_the_backlog_and_the_local_data() {
    let s = common::local_store();
    let root = std::path::PathBuf::from(s.url.strip_prefix("file://").expect("file URL"));
    // Where the segments' directory should be, a file: every upload fails, and not with
    // "not found", so the uploader retries (in paused time) and then reports.
    let blocked = root.join("orders/3/segments");
    std::fs::create_dir_all(root.join("orders/3")).expect("partition dir");
    std::fs::write(&blocked, b"in the way").expect("block the path");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path(), 4 * 1024);
    fill_log(&log, "u", 6, 2, 400);
    let sealed = log.sealed_segments();
    let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
    let failed = uploader
        .run(&sealed, log.log_end(), LeaderEpoch::new(1))
        .await;
    assert!(matches!(&failed, Err(e) if e.is_retryable()), "{failed:?}");
    let attempts = floe_tier::RetryPolicy::default().attempts;
    let puts = s.store.metrics().snapshot().puts;
    assert!(puts >= u64::from(attempts), "retried: {puts} PUTs");
    let backlog = uploader.backlog();
    assert_eq!(backlog.segments, sealed.len() as u64);
    assert_eq!(
        backlog.bytes,
        sealed.iter().map(|seg| seg.size_bytes).sum::<u64>()
    );
    let keep_nothing = RetentionPolicy {
        bytes_max: Some(0),
        age_max_ms: None,
    };
    let deleted = log
        .apply_retention(keep_nothing, now_ms(), |seg| uploader.is_tiered(seg))
        .expect("retention");
    assert!(deleted.is_empty(), "nothing untiered is deleted locally");

    std::fs::remove_file(&blocked).expect("unblock");
    let report = uploader
        .run(&sealed, log.log_end(), LeaderEpoch::new(1))
        .await
        .expect("upload once the store works");
    assert_eq!(report.tier_end, log.log_end());
    assert_eq!(uploader.backlog().segments, 0);
}

/// While a log's sync runs, every piece an upload reads from the local disk waits, at most
/// `max_wait_per_mib` per MiB, and the upload still completes; with more waiting than
/// `backlog_bytes_max`, it does not wait at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_yields_to_running_syncs_for_a_bounded_time_per_piece() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        // Two sealed segments of about 1.5 MiB: two 1 MiB pieces each to a local directory,
        // one part each to S3.
        let log = open_log(dir.path(), 2 << 20);
        fill_log(&log, "a", 6, 4, 64 * 1024);
        fill_log(&log, "b", 6, 4, 64 * 1024);
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), 2);
        let activity = Arc::new(SyncActivity::new());
        let per_mib = Duration::from_millis(40);
        let uploader_with = |backlog_bytes_max| {
            let config = UploaderConfig {
                yield_to: Some(YieldToSyncs {
                    activity: activity.clone(),
                    quiet: Duration::from_millis(1),
                    // Any running sync counts: the one this test holds began just now.
                    busy: 0.0,
                    max_wait_per_mib: per_mib,
                    backlog_bytes_max,
                }),
                ..UploaderConfig::default()
            };
            Uploader::new(s.store.clone(), partition(), config)
        };
        let syncing = activity.begin();

        let large_backlog = uploader_with(sealed[0].size_bytes - 1);
        let report = large_backlog
            .run(&sealed[..1], sealed[0].next_offset, LeaderEpoch::new(1))
            .await
            .expect("upload past the limit");
        assert_eq!(report.committed.len(), 1);
        assert_eq!(activity.waited(), Duration::ZERO, "{}", s.url);

        // Both segments are planned, but only the second is left: 1.5 MiB waiting.
        let small_backlog = uploader_with(2 << 20);
        let report = small_backlog
            .run(&sealed, log.log_end(), LeaderEpoch::new(1))
            .await
            .expect("upload while a sync runs");
        assert_eq!(report.tier_end, log.log_end());
        // Every piece waited its whole bound: as long as the segment's MiB take.
        let waited = activity.waited();
        let bound = per_mib.mul_f64(sealed[1].size_bytes as f64 / f64::from(1u32 << 20));
        assert!(
            waited >= bound.mul_f64(0.99),
            "{}: waited {waited:?}, expected {bound:?}",
            s.url
        );
        drop(syncing);
    }
}

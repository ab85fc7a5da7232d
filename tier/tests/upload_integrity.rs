//! What an upload must never do, each as a script: copy local rot to the tier, or commit
//! objects the collector may already have deleted (a run that outlasts the collector's
//! grace), after which local retention would delete the last copy.

mod common;

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use floe_hot_log::RetentionPolicy;
use floe_tier::manifest::ManifestLog;
use floe_tier::{
    BeforeCommit, Collector, CorruptReason, PartitionPath, ReaderConfig, RequestKind,
    RequestObserver, TierError, TierReader, TierStore, UploadClock, Uploader, UploaderConfig,
};
use floe_wire::{LeaderEpoch, Offset};

use common::{fill_log, now_ms, open_log, split_batches};

fn partition() -> PartitionPath {
    PartitionPath::new("orders", 3).expect("valid")
}

const SEGMENTS_DIR: &str = "orders/3/segments";

/// Every record from the tier's start to `end`, one read after another.
async fn read_tier(store: &TierStore, end: Offset) -> Result<Vec<bytes::Bytes>, TierError> {
    let reader = TierReader::new(
        store.clone(),
        ReaderConfig {
            chunk_bytes: 4096,
            memory_cache_bytes: 1 << 20,
            ..ReaderConfig::default()
        },
    )
    .await
    .expect("reader");
    let mut all = Vec::new();
    let mut at = Offset::ZERO;
    while at < end {
        let read = reader.read(&partition(), at, 1 << 20).await?;
        all.extend(split_batches(&read.bytes));
        at = read.next_offset;
    }
    Ok(all)
}

/// Names of the segment objects in the bucket.
async fn object_names(store: &TierStore) -> Vec<String> {
    let listed = store.list(SEGMENTS_DIR).await.expect("list");
    listed
        .iter()
        .map(|o| o.key.rsplit('/').next().unwrap_or("").to_string())
        .collect()
}

/// Asserts that every segment the manifest lists has its object in the bucket.
async fn assert_manifest_objects_exist(store: &TierStore, what: &str) {
    let state = ManifestLog::new(store.clone(), partition())
        .load()
        .await
        .expect("load the manifest");
    let names = object_names(store).await;
    for segment in &state.segments {
        assert!(
            names.iter().any(|n| n == segment.name.as_str()),
            "{what}: the manifest lists {} (offsets {}..{}) but its object is gone",
            segment.name.as_str(),
            segment.base_offset,
            segment.next_offset
        );
    }
}

/// The wall clock plus a lead the test moves forward, shared by the uploader and the
/// collector: time that passes for one passes for the other.
#[derive(Clone, Default)]
struct TestClock {
    lead_ms: Arc<AtomicI64>,
}

impl TestClock {
    fn now_ms(&self) -> i64 {
        now_ms() + self.lead_ms.load(Ordering::SeqCst)
    }

    fn advance(&self, ms: i64) {
        self.lead_ms.fetch_add(ms, Ordering::SeqCst);
    }

    fn upload_clock(&self) -> UploadClock {
        let clock = self.clone();
        UploadClock(Arc::new(move || clock.now_ms()))
    }
}

fn keep_nothing() -> RetentionPolicy {
    RetentionPolicy {
        bytes_max: Some(0),
        age_max_ms: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_never_deletes_what_a_run_in_flight_commits() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_log(dir.path(), 1 << 20);
        let mut stored = Vec::new();
        for tag in ["a", "b", "c"] {
            stored.extend(fill_log(&log, tag, 5, 2, 300));
        }
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), 3);
        let end = log.log_end();

        // The run outlasts the collector's grace (an upload backlog drained after an
        // outage): just before its commit, more than the grace has passed and a collection
        // finds its objects unreferenced.
        let grace_ms = 60_000;
        let clock = TestClock::default();
        let collector = Collector::new(s.store.clone(), grace_ms).expect("collector");
        let fired = Arc::new(AtomicBool::new(false));
        let hook_fired = fired.clone();
        let hook_clock = clock.clone();
        let config = UploaderConfig {
            commit_window_ms: grace_ms / 2,
            clock: clock.upload_clock(),
            before_commit: Some(BeforeCommit(Arc::new(move || {
                if hook_fired.swap(true, Ordering::SeqCst) {
                    return;
                }
                hook_clock.advance(grace_ms + 1);
                let path = partition();
                let collect = collector.collect_partition(&path, hook_clock.now_ms());
                let handle = tokio::runtime::Handle::current();
                let report =
                    tokio::task::block_in_place(|| handle.block_on(collect)).expect("collect");
                assert_eq!(
                    report.segments_deleted, 3,
                    "the run's objects were collected"
                );
            }))),
            ..UploaderConfig::default()
        };
        let uploader = Uploader::new(s.store.clone(), partition(), config);
        let first = uploader.run(&sealed, end, LeaderEpoch::new(1)).await;
        assert!(fired.load(Ordering::SeqCst), "the collection ran");
        assert!(
            matches!(first, Err(TierError::CommitWindowPassed { base_offset, .. }) if base_offset == Offset::ZERO),
            "{}: {first:?}",
            s.name
        );
        assert_eq!(uploader.tier_end(), Offset::ZERO, "nothing committed");
        assert_manifest_objects_exist(&s.store, s.name).await;
        let deleted = log
            .apply_retention(keep_nothing(), now_ms(), |seg| uploader.is_tiered(seg))
            .expect("retention");
        assert!(
            deleted.is_empty(),
            "{}: nothing leaves the disk for objects that are gone ({first:?})",
            s.name
        );

        // The next run uploads the segments again and commits them.
        let again = uploader
            .run(&sealed, end, LeaderEpoch::new(1))
            .await
            .expect("upload again");
        assert_eq!(again.tier_end, end);
        assert_manifest_objects_exist(&s.store, s.name).await;
        let deleted = log
            .apply_retention(keep_nothing(), now_ms(), |seg| uploader.is_tiered(seg))
            .expect("retention");
        assert_eq!(deleted.len(), 3);
        let read = read_tier(&s.store, end).await.expect("read the tier");
        assert_eq!(read, stored, "{}: every record from the tier", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_with_rot_is_never_uploaded_nor_deleted_locally() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_log(dir.path(), 1 << 20);
        let mut stored = Vec::new();
        let mut per_segment = Vec::new();
        for tag in ["a", "b", "c"] {
            let batches = fill_log(&log, tag, 5, 2, 300);
            stored.extend(batches.clone());
            per_segment.push(batches);
        }
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), 3);
        let end = log.log_end();

        // One byte of a record in the fourth batch of the second segment rots on disk.
        let damaged = &sealed[1];
        let batch_at: u64 = per_segment[1][..3].iter().map(|b| b.len() as u64).sum();
        let flip_at = batch_at + floe_wire::batch::HEADER_LEN as u64 + 7;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&damaged.path)
            .expect("open the segment file");
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, flip_at).expect("read");
        file.write_all_at(&[byte[0] ^ 0x5a], flip_at).expect("flip");
        file.sync_all().expect("sync");

        let uploader = Uploader::new(s.store.clone(), partition(), UploaderConfig::default());
        let failed = uploader.run(&sealed, end, LeaderEpoch::new(1)).await;
        match &failed {
            Err(TierError::LocalSegment {
                base_offset,
                file,
                reason: CorruptReason::Batch { position, detail },
            }) => {
                assert_eq!(*base_offset, damaged.base_offset);
                assert_eq!(file, &damaged.path);
                assert_eq!(*position, batch_at, "the damaged batch's byte in the file");
                assert!(detail.contains("checksum"), "{detail}");
            }
            other => panic!(
                "{}: expected the local rot to be refused: {other:?}",
                s.name
            ),
        }
        assert_eq!(
            uploader.tier_end(),
            damaged.base_offset,
            "the segment before"
        );
        let prefix = format!("{:020}-", damaged.base_offset.get());
        let names = object_names(&s.store).await;
        assert!(
            !names.iter().any(|n| n.starts_with(&prefix)),
            "{}: no object of the damaged segment: {names:?}",
            s.name
        );
        let deleted = log
            .apply_retention(keep_nothing(), now_ms(), |seg| uploader.is_tiered(seg))
            .expect("retention");
        assert_eq!(
            deleted.len(),
            1,
            "only the segment before the rot leaves the disk"
        );
        assert_eq!(log.log_start(), damaged.base_offset);
        let read = read_tier(&s.store, damaged.base_offset)
            .await
            .expect("read the tier");
        assert_eq!(
            read,
            stored[..5].to_vec(),
            "{}: what is tiered is whole",
            s.name
        );
    }
}

/// A run longer than the commit window (a backlog drained after an outage) does not lose
/// its work to the window: it commits as it goes, each object well within the window of its
/// upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_longer_than_the_commit_window_commits_as_it_goes() {
    for s in common::stores().await {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open_log(dir.path(), 1 << 20);
        let mut stored = Vec::new();
        for tag in ["a", "b", "c", "d", "e", "f"] {
            stored.extend(fill_log(&log, tag, 3, 2, 300));
        }
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), 6);
        let end = log.log_end();

        // Every PUT takes a third of the commit window: the six uploads alone take twice
        // the window.
        let window_ms = 30_000;
        let clock = TestClock::default();
        let put_clock = clock.clone();
        let store = s
            .store
            .clone()
            .with_observer(RequestObserver(Arc::new(move |kind, _| {
                if kind == RequestKind::Put {
                    put_clock.advance(window_ms / 3);
                }
            })));
        let commits = Arc::new(AtomicI64::new(0));
        let hook_commits = commits.clone();
        let config = UploaderConfig {
            concurrency: 1,
            commit_window_ms: window_ms,
            clock: clock.upload_clock(),
            before_commit: Some(BeforeCommit(Arc::new(move || {
                hook_commits.fetch_add(1, Ordering::SeqCst);
            }))),
            ..UploaderConfig::default()
        };
        let uploader = Uploader::new(store, partition(), config);
        let report = uploader
            .run(&sealed, end, LeaderEpoch::new(1))
            .await
            .expect("the whole backlog in one run");
        assert_eq!(report.committed.len(), 6);
        assert_eq!(report.tier_end, end);
        assert_eq!(
            commits.load(Ordering::SeqCst),
            3,
            "{}: a commit each time the oldest upload is half the window old",
            s.name
        );
        assert_eq!(report.version, 3);
        assert_manifest_objects_exist(&s.store, s.name).await;
        let read = read_tier(&s.store, end).await.expect("read the tier");
        assert_eq!(read, stored, "{}: every record from the tier", s.name);
    }
}

//! Named scenarios for the hot log: each reads as the situation it checks.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use floe_hot_log::{CrashStorage, FsStorage, Log, LogConfig, LogError, RetentionPolicy, Storage};
use floe_wire::{LeaderEpoch, Offset};

#[test]
fn appended_batches_read_back_with_stamped_offsets() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = Log::open(Arc::new(FsStorage), tmp.path(), small_config()).expect("open");
    let a = log
        .append(&batch("a", 3, 100), LeaderEpoch::new(1))
        .expect("append a");
    let b = log
        .append(&batch("b", 2, 200), LeaderEpoch::new(1))
        .expect("append b");
    assert_eq!((a.base_offset.get(), a.last_offset.get()), (0, 2));
    assert_eq!((b.base_offset.get(), b.last_offset.get()), (3, 4));
    log.wait_synced_blocking(b.next_offset()).expect("synced");
    let all = read_all(&log, Offset::ZERO);
    let values: Vec<_> = all
        .iter()
        .map(|(o, v)| (*o, String::from_utf8_lossy(v).into_owned()))
        .collect();
    assert_eq!(
        values,
        vec![
            (0, "a-0".into()),
            (1, "a-1".into()),
            (2, "a-2".into()),
            (3, "b-0".into()),
            (4, "b-1".into())
        ]
    );
    // A read starting inside a batch returns the whole batch; the reader skips earlier records.
    let mid = log.read(Offset::new(1), 1, log.log_end()).expect("read");
    assert_eq!(records(&mid.bytes)[0].0, 0);
    assert_eq!(mid.next_offset, Offset::new(3));
}

#[test]
fn control_batches_come_from_the_leader_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = Log::open(Arc::new(FsStorage), tmp.path(), small_config()).expect("open");
    log.append(&batch("a", 2, 100), LeaderEpoch::new(1))
        .expect("append a");
    // A producer's control batch is refused and changes nothing.
    let forged = floe_wire::batch::control_batch(floe_wire::ControlKind::EpochStart, 100);
    assert!(matches!(
        log.append(&forged, LeaderEpoch::new(1)),
        Err(LogError::ControlBatch)
    ));
    assert_eq!(log.log_end(), Offset::new(2));
    // The leader's own takes the next offset, in its epoch; data goes on after it.
    let (marker, bytes) = log
        .append_control(floe_wire::ControlKind::EpochStart, LeaderEpoch::new(2), 300)
        .expect("the leader's marker");
    assert_eq!(marker.base_offset, Offset::new(2));
    let unstamped = floe_wire::RecordBatch::decode(bytes).expect("a valid batch");
    assert!(unstamped.header().is_control());
    let b = log
        .append(&batch("b", 1, 200), LeaderEpoch::new(2))
        .expect("append b");
    assert_eq!(b.base_offset, Offset::new(3));
    let read = log
        .read(Offset::new(2), 1 << 20, log.log_end())
        .expect("read");
    let (first, _) = floe_wire::RecordBatch::decode_prefix(&read.bytes).expect("stored");
    assert!(first.header().is_control());
    assert_eq!(first.header().leader_epoch, LeaderEpoch::new(2));
}

#[test]
fn a_new_log_can_start_where_older_records_end() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let start = Offset::new(1_000);
    let log = Log::open_at(Arc::new(FsStorage), tmp.path(), small_config(), start).expect("open");
    assert_eq!((log.log_start(), log.log_end()), (start, start));
    let a = log
        .append(&batch("a", 2, 100), LeaderEpoch::new(1))
        .expect("append");
    assert_eq!(a.base_offset, start);
    log.close().expect("close");
    // Reopened, it is the log it is: the start applies to a new directory only.
    let log = Log::open_at(
        Arc::new(FsStorage),
        tmp.path(),
        small_config(),
        Offset::new(5),
    )
    .expect("reopen");
    assert_eq!(log.log_start(), start);
    assert_eq!(log.log_end(), Offset::new(1_002));
    let values: Vec<u64> = read_all(&log, start).iter().map(|(o, _)| *o).collect();
    assert_eq!(values, vec![1_000, 1_001]);
}

#[test]
fn reads_never_pass_the_given_limit() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    log.append(&batch("a", 2, 0), LeaderEpoch::new(1))
        .expect("append");
    log.append(&batch("b", 2, 0), LeaderEpoch::new(1))
        .expect("append");
    let read = log
        .read(Offset::ZERO, 1 << 20, Offset::new(2))
        .expect("read");
    assert_eq!(records(&read.bytes).len(), 2);
    assert_eq!(read.next_offset, Offset::new(2));
    let nothing = log
        .read(Offset::new(2), 1 << 20, Offset::new(2))
        .expect("read");
    assert!(nothing.bytes.is_empty());
}

#[test]
fn segments_roll_by_size_and_reads_cross_them() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..40 {
        log.append(
            &batch(&format!("r{i}"), 4, i64::from(i)),
            LeaderEpoch::new(1),
        )
        .expect("append");
    }
    let sealed = log.sealed_segments();
    assert!(
        sealed.len() >= 3,
        "expected several sealed segments, got {}",
        sealed.len()
    );
    for pair in sealed.windows(2) {
        assert_eq!(pair[0].next_offset, pair[1].base_offset);
        assert!(pair[0].size_bytes <= 1024);
    }
    assert_eq!(read_all(&log, Offset::ZERO).len(), 160);
}

#[test]
fn segments_roll_by_age_on_maintain() {
    let storage = CrashStorage::new();
    let config = LogConfig {
        segment_age_max: Duration::from_secs(600),
        ..small_config()
    };
    let log = open_crash(&storage, config);
    log.append(&batch("a", 1, 0), LeaderEpoch::new(1))
        .expect("append");
    assert!(!log.maintain(Instant::now()).expect("maintain"));
    assert!(
        log.maintain(Instant::now() + Duration::from_secs(601))
            .expect("maintain")
    );
    assert_eq!(log.sealed_segments().len(), 1);
    // An empty active segment is never sealed.
    assert!(
        !log.maintain(Instant::now() + Duration::from_secs(1200))
            .expect("maintain")
    );
}

#[test]
fn torn_tail_is_truncated_on_recovery() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    let a = log
        .append(&batch("a", 3, 0), LeaderEpoch::new(1))
        .expect("append");
    log.wait_synced_blocking(a.next_offset()).expect("sync");
    drop(log);
    let path = segment_path(&dir(), 0, "log");
    let mut bytes = storage.contents(&path).expect("contents");
    let whole = bytes.len();
    bytes.extend_from_slice(&batch("torn", 5, 0)[..70]);
    storage.replace_contents(&path, bytes).expect("tear");
    let log = open_crash(&storage, small_config());
    assert_eq!(log.log_end(), Offset::new(3));
    assert_eq!(storage.contents(&path).expect("contents").len(), whole);
    let next = log
        .append(&batch("b", 1, 0), LeaderEpoch::new(1))
        .expect("append after recovery");
    assert_eq!(next.base_offset, Offset::new(3));
}

/// Ten synced batches of 100 records in one active segment; returns the segment's path and
/// each batch's byte position.
fn ten_synced_batches(storage: &CrashStorage) -> (std::path::PathBuf, Vec<u64>) {
    let config = LogConfig {
        segment_bytes_max: 1 << 20,
        ..small_config()
    };
    let log = open_crash(storage, config);
    let mut positions = Vec::new();
    let mut position = 0;
    for i in 0..10 {
        let bytes = batch(&format!("b{i}"), 100, 0);
        positions.push(position);
        position += bytes.len() as u64;
        let a = log.append(&bytes, LeaderEpoch::new(1)).expect("append");
        log.wait_synced_blocking(a.next_offset()).expect("sync");
    }
    assert!(log.sealed_segments().is_empty(), "one active segment");
    drop(log);
    (segment_path(&dir(), 0, "log"), positions)
}

fn active_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 20,
        ..small_config()
    }
}

#[test]
fn rot_in_the_active_segment_refuses_open_and_truncates_nothing() {
    let storage = CrashStorage::new();
    let (path, positions) = ten_synced_batches(&storage);
    let mut bytes = storage.contents(&path).expect("contents");
    let damaged = bytes.len() / 3;
    for byte in &mut bytes[damaged..damaged + 8] {
        *byte ^= 0xff;
    }
    storage.replace_contents(&path, bytes.clone()).expect("rot");
    let err = Log::open(Arc::new(storage.clone()), &dir(), active_config())
        .expect_err("opened a log with acknowledged batches after damage");
    let LogError::Corrupt {
        file,
        position,
        reason,
    } = err
    else {
        panic!("expected Corrupt, got {err:?}")
    };
    assert_eq!(file, path);
    // The position is the start of the damaged batch.
    let batch_start = *positions
        .iter()
        .rev()
        .find(|&&p| p <= damaged as u64)
        .expect("a batch holds the damage");
    assert_eq!(position, batch_start, "{reason}");
    assert!(reason.contains("valid batch continues"), "{reason}");
    assert_eq!(
        storage.contents(&path).expect("contents"),
        bytes,
        "the open changed the damaged segment"
    );
}

#[test]
fn a_batch_whose_base_offset_alone_was_damaged_is_rot_even_at_the_end() {
    for which in [4, 9] {
        let storage = CrashStorage::new();
        let (path, positions) = ten_synced_batches(&storage);
        let mut bytes = storage.contents(&path).expect("contents");
        // The base offset is outside the checksum: the batch still checksums.
        bytes[positions[which] as usize + 3] ^= 0x01;
        storage.replace_contents(&path, bytes.clone()).expect("rot");
        let err = Log::open(Arc::new(storage.clone()), &dir(), active_config())
            .expect_err("opened a log whose batch offset was damaged");
        let LogError::Corrupt { file, position, .. } = err else {
            panic!("expected Corrupt, got {err:?}")
        };
        assert_eq!((file, position), (path.clone(), positions[which]));
        assert_eq!(storage.contents(&path).expect("contents"), bytes);
    }
}

#[test]
fn a_torn_tail_followed_by_batches_that_do_not_continue_the_log_is_still_cut() {
    let storage = CrashStorage::new();
    let (path, _) = ten_synced_batches(&storage);
    let whole = storage.contents(&path).expect("contents");
    let mut bytes = whole.clone();
    // A torn batch, then whole batches whose offsets cannot follow it: one stamped at offset
    // 0 (as a producer sends it, or as a record's value could hold it) and one far beyond
    // what the torn bytes could have held.
    bytes.extend_from_slice(&batch("torn", 5, 0)[..70]);
    bytes.extend_from_slice(&batch("unstamped", 3, 0));
    let mut far = batch("far", 3, 0);
    far[..8].copy_from_slice(&1_000_000u64.to_le_bytes());
    bytes.extend_from_slice(&far);
    storage.replace_contents(&path, bytes).expect("tear");
    let log = Log::open(Arc::new(storage.clone()), &dir(), active_config()).expect("open");
    assert_eq!(log.log_end(), Offset::new(1000));
    drop(log);
    assert_eq!(storage.contents(&path).expect("contents"), whole);
}

#[test]
fn a_zeroed_torn_tail_is_cut() {
    let storage = CrashStorage::new();
    let (path, _) = ten_synced_batches(&storage);
    let whole = storage.contents(&path).expect("contents");
    let mut bytes = whole.clone();
    // The length reached the disk, the data did not.
    bytes.extend_from_slice(&[0u8; 8192]);
    storage.replace_contents(&path, bytes).expect("tear");
    let log = Log::open(Arc::new(storage.clone()), &dir(), active_config()).expect("open");
    assert_eq!(log.log_end(), Offset::new(1000));
    drop(log);
    assert_eq!(storage.contents(&path).expect("contents"), whole);
}

#[test]
fn corrupt_byte_in_a_sealed_segment_refuses_open_naming_file_and_position() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..20 {
        log.append(&batch(&format!("r{i}"), 4, 0), LeaderEpoch::new(1))
            .expect("append");
    }
    let sealed = log.sealed_segments();
    drop(log);
    let first = &sealed[0];
    let mut bytes = storage.contents(&first.path).expect("contents");
    let position = 300; // inside the records of some batch
    bytes[position] ^= 0xff;
    storage
        .replace_contents(&first.path, bytes)
        .expect("corrupt");
    // With its index intact the segment opens (open time does not depend on the data size),
    // and reading the damaged batch reports it as corrupt with its position, never serves it.
    let log = open_crash(&storage, small_config());
    let err = read_everything(&log).expect_err("corrupt batch served");
    let LogError::Corrupt {
        file, position: at, ..
    } = err
    else {
        panic!("expected Corrupt, got {err:?}")
    };
    assert_eq!(file, first.path);
    assert!(
        at <= position as u64 && position as u64 - at < 1024,
        "position {at}"
    );
    drop(log);
    // Without the index the data is scanned: the open is refused, naming file and position.
    storage
        .remove_file(&segment_path(&dir(), first.base_offset.get(), "index"))
        .expect("remove index");
    let err = Log::open(Arc::new(storage.clone()), &dir(), small_config())
        .expect_err("opened corrupt log");
    let LogError::Corrupt {
        file,
        position: at,
        reason,
    } = err
    else {
        panic!("expected Corrupt, got {err:?}")
    };
    assert_eq!(file, first.path);
    assert!(at <= position as u64, "reported {at}");
    assert!(reason.contains("checksum"), "reason: {reason}");
}

fn read_everything(log: &Log) -> Result<usize, LogError> {
    let mut at = log.log_start();
    let mut n = 0;
    while at < log.log_end() {
        let read = log.read(at, 1 << 20, log.log_end())?;
        n += read.bytes.len();
        at = read.next_offset;
    }
    Ok(n)
}

#[test]
fn missing_or_corrupt_index_is_rebuilt_from_the_data() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..30 {
        log.append(
            &batch(&format!("r{i}"), 3, i64::from(i) * 10),
            LeaderEpoch::new(1),
        )
        .expect("append");
    }
    let sealed = log.sealed_segments();
    let expected = read_all(&log, Offset::ZERO);
    drop(log);
    let first = segment_path(&dir(), sealed[0].base_offset.get(), "index");
    let original = storage.contents(&first).expect("index");
    storage.remove_file(&first).expect("remove");
    let second = segment_path(&dir(), sealed[1].base_offset.get(), "index");
    let mut bad = storage.contents(&second).expect("index");
    bad[60] ^= 1;
    storage
        .replace_contents(&second, bad)
        .expect("corrupt index");
    let log = open_crash(&storage, small_config());
    assert_eq!(read_all(&log, Offset::ZERO), expected);
    assert_eq!(storage.contents(&first).expect("rebuilt"), original);
    assert_eq!(log.sealed_segments()[1].index, sealed[1].index);
    // Batch i holds timestamps 10i..10i+2 at offsets 3i..3i+2: 105 first appears in batch 11.
    assert_eq!(
        log.offset_for_timestamp(105).expect("lookup"),
        Some(Offset::new(33))
    );
}

#[test]
fn timestamp_lookup_finds_the_first_batch_at_or_after_it() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..50 {
        log.append(
            &batch("t", 2, 1_000 + i64::from(i) * 10),
            LeaderEpoch::new(1),
        )
        .expect("append");
    }
    // Batch i holds timestamps 1000+10i and 1000+10i+1, offsets 2i and 2i+1.
    assert_eq!(
        log.offset_for_timestamp(0).expect("lookup"),
        Some(Offset::ZERO)
    );
    assert_eq!(
        log.offset_for_timestamp(1_001).expect("lookup"),
        Some(Offset::ZERO)
    );
    assert_eq!(
        log.offset_for_timestamp(1_002).expect("lookup"),
        Some(Offset::new(2))
    );
    assert_eq!(
        log.offset_for_timestamp(1_255).expect("lookup"),
        Some(Offset::new(52))
    );
    assert_eq!(
        log.offset_for_timestamp(1_491).expect("lookup"),
        Some(Offset::new(98))
    );
    assert_eq!(log.offset_for_timestamp(1_492).expect("lookup"), None);
}

#[test]
fn a_full_disk_refuses_appends_until_space_returns_and_loses_nothing() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    let a = log
        .append(&batch("a", 2, 0), LeaderEpoch::new(1))
        .expect("append");
    log.wait_synced_blocking(a.next_offset()).expect("sync");
    let path = segment_path(&dir(), 0, "log");
    let synced = storage.contents(&path).expect("contents");
    storage.fail_writes_after(10);
    for attempt in 0..2 {
        let err = log
            .append(&batch("b", 2, 0), LeaderEpoch::new(1))
            .expect_err("write on a full disk");
        assert!(
            matches!(err, LogError::DiskFull { .. }),
            "{attempt}: {err:?}"
        );
    }
    // A new epoch's history is not written either: nothing of the refused appends is left.
    let err = log
        .append(&batch("b", 2, 0), LeaderEpoch::new(2))
        .expect_err("write on a full disk");
    assert!(matches!(err, LogError::DiskFull { .. }), "{err:?}");
    assert_eq!(log.epoch_history().entries().len(), 1);
    assert_eq!(log.log_end(), Offset::new(2));
    assert_eq!(storage.contents(&path).expect("contents"), synced);

    // Space returns: the same log takes the retry, once.
    storage.allow_writes();
    let b = log
        .append(&batch("b", 2, 0), LeaderEpoch::new(2))
        .expect("append once space returns");
    assert_eq!(b.base_offset, Offset::new(2));
    log.wait_synced_blocking(b.next_offset()).expect("sync");
    let values = |log: &Log| -> Vec<Vec<u8>> {
        read_all(log, Offset::ZERO)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    };
    let expected: Vec<Vec<u8>> = ["a-0", "a-1", "b-0", "b-1"]
        .into_iter()
        .map(|v| v.as_bytes().to_vec())
        .collect();
    assert_eq!(values(&log), expected);
    drop(log);
    let log = open_crash(&storage, small_config());
    assert_eq!(values(&log), expected);
    assert_eq!(
        log.epoch_history().latest().map(|e| e.epoch),
        Some(LeaderEpoch::new(2))
    );
}

#[test]
fn a_full_disk_while_sealing_a_segment_loses_nothing_and_the_index_is_rebuilt() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    let mut expected = Vec::new();
    let mut i = 0;
    // Fill the active segment up to its size limit.
    while log.size_bytes() + batch("x-00", 3, 0).len() as u64 <= 1024 {
        let tag = format!("x-{i:02}");
        log.append(&batch(&tag, 3, 0), LeaderEpoch::new(1))
            .expect("append");
        expected.extend((0..3).map(|r| format!("{tag}-{r}").into_bytes()));
        i += 1;
    }
    // The roll seals the segment (its index and snapshot are chores, which find the disk
    // full); the batch for the new segment is refused and undone.
    storage.fail_writes_after(0);
    let err = log
        .append(&batch("next", 3, 0), LeaderEpoch::new(1))
        .expect_err("an append on a full disk");
    assert!(matches!(err, LogError::DiskFull { .. }), "{err:?}");
    assert_eq!(log.sealed_segments().len(), 1);
    // Closing finishes the chores: without space the index is not written.
    log.close().expect("close");
    drop(log);
    assert!(
        storage
            .contents(&dir().join("00000000000000000000.index"))
            .is_err(),
        "an index was written on a full disk"
    );
    storage.allow_writes();
    // The index is rebuilt, and the log goes on.
    let log = open_crash(&storage, small_config());
    assert_eq!(log.sealed_segments().len(), 1);
    log.append(&batch("next", 3, 0), LeaderEpoch::new(1))
        .expect("append once space returns");
    expected.extend((0..3).map(|r| format!("next-{r}").into_bytes()));
    log.wait_synced_blocking(log.log_end()).expect("sync");
    drop(log);
    let log = open_crash(&storage, small_config());
    let values: Vec<Vec<u8>> = read_all(&log, Offset::ZERO)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, expected);
}

#[test]
fn failed_fsync_is_never_retried_and_refuses_writes() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    let first = log
        .append(&batch("first", 1, 0), LeaderEpoch::new(1))
        .expect("append");
    log.wait_synced_blocking(first.next_offset()).expect("sync");
    storage.fail_next_sync();
    let a = log
        .append(&batch("a", 2, 0), LeaderEpoch::new(1))
        .expect("append");
    let err = log
        .wait_synced_blocking(a.next_offset())
        .expect_err("sync failed");
    assert!(matches!(err, LogError::Failed { .. }), "{err:?}");
    let syncs = storage.sync_count();
    let err = log
        .append(&batch("b", 1, 0), LeaderEpoch::new(1))
        .expect_err("append after failed sync");
    assert!(matches!(err, LogError::Failed { .. }), "{err:?}");
    assert_eq!(storage.sync_count(), syncs, "the failed fsync was retried");
    assert_eq!(log.synced_end(), first.next_offset());
}

#[test]
fn async_waiters_see_durability_and_failure() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    rt.block_on(async {
        let a = log
            .append(&batch("a", 2, 0), LeaderEpoch::new(1))
            .expect("append");
        log.wait_synced(a.next_offset()).await.expect("synced");
        assert!(log.synced_end() >= a.next_offset());
        storage.fail_next_sync();
        let b = log
            .append(&batch("b", 2, 0), LeaderEpoch::new(1))
            .expect("append");
        let err = log
            .wait_synced(b.next_offset())
            .await
            .expect_err("failed sync");
        assert!(matches!(err, LogError::Failed { .. }), "{err:?}");
    });
}

#[test]
fn concurrent_appenders_share_fsyncs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log =
        Arc::new(Log::open(Arc::new(FsStorage), tmp.path(), LogConfig::default()).expect("open"));
    let appends_per_thread = 50;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..appends_per_thread {
                    let a = log
                        .append(&sized_batch(4, 1024, i), LeaderEpoch::new(1))
                        .expect("append");
                    log.wait_synced_blocking(a.next_offset()).expect("sync");
                }
                t
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let syncs = log.stats().syncs.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(log.log_end(), Offset::new(8 * 50 * 4));
    assert!(
        syncs < 8 * 50,
        "{syncs} fsyncs for 400 appends: no group commit"
    );
    assert_eq!(read_all(&log, Offset::ZERO).len(), 1600);
}

#[test]
fn retention_deletes_only_sealed_segments_the_caller_allows() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..40 {
        log.append(
            &batch(&format!("r{i}"), 4, i64::from(i)),
            LeaderEpoch::new(1),
        )
        .expect("append");
    }
    let sealed = log.sealed_segments();
    assert!(sealed.len() >= 4);
    let tiered_up_to = sealed[2].next_offset;
    let policy = RetentionPolicy {
        bytes_max: Some(0),
        age_max_ms: None,
    };
    let deleted = log
        .apply_retention(policy, 0, |s| s.next_offset <= tiered_up_to)
        .expect("retention");
    assert_eq!(deleted.len(), 3);
    assert_eq!(log.log_start(), tiered_up_to);
    for gone in &deleted {
        assert!(
            storage.contents(&gone.path).is_err(),
            "{} still exists",
            gone.path.display()
        );
    }
    let err = log
        .read(Offset::ZERO, 100, log.log_end())
        .expect_err("read below start");
    match err {
        LogError::OffsetOutOfRange {
            requested,
            log_start,
            log_end,
        } => {
            assert_eq!(
                (requested, log_start, log_end),
                (Offset::ZERO, tiered_up_to, Offset::new(160))
            );
        }
        other => panic!("expected OffsetOutOfRange, got {other:?}"),
    }
    drop(log);
    let log = open_crash(&storage, small_config());
    assert_eq!(log.log_start(), tiered_up_to);
    assert_eq!(
        read_all(&log, tiered_up_to).len() as u64,
        160 - tiered_up_to.get()
    );
}

#[test]
fn retention_by_age_keeps_recent_segments() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..40 {
        log.append(&batch("r", 4, i64::from(i) * 1000), LeaderEpoch::new(1))
            .expect("append");
    }
    let sealed = log.sealed_segments();
    let cutoff_segment = &sealed[1];
    // Everything in segments 0 and 1 is older than max_timestamp(1) + 1.
    let now = cutoff_segment.max_timestamp + 1 + 5_000;
    let policy = RetentionPolicy {
        bytes_max: None,
        age_max_ms: Some(5_000),
    };
    let deleted = log
        .apply_retention(policy, now, |_| true)
        .expect("retention");
    assert_eq!(deleted.len(), 2);
    assert_eq!(log.log_start(), sealed[2].base_offset);
}

#[test]
fn truncation_removes_records_at_and_after_a_batch_boundary() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..40 {
        log.append(
            &batch(&format!("r{i}"), 4, 0),
            LeaderEpoch::new(u32::from(i >= 20) + 1),
        )
        .expect("append");
    }
    let err = log
        .truncate(Offset::new(41))
        .expect_err("mid-batch truncation");
    assert!(
        matches!(err, LogError::NotBatchBoundary { offset, batch_base } if offset.get() == 41 && batch_base.get() == 40)
    );
    log.truncate(Offset::new(44)).expect("truncate");
    assert_eq!(log.log_end(), Offset::new(44));
    assert_eq!(log.epoch_history().latest().map(|e| e.epoch.get()), Some(1));
    let next = log
        .append(&batch("new", 1, 0), LeaderEpoch::new(3))
        .expect("append after truncate");
    assert_eq!(next.base_offset, Offset::new(44));
    drop(log);
    let log = open_crash(&storage, small_config());
    let all = read_all(&log, Offset::ZERO);
    assert_eq!(all.len(), 45);
    assert_eq!(all[44].1, b"new-0");
    let epochs: Vec<_> = log
        .epoch_history()
        .entries()
        .iter()
        .map(|e| (e.epoch.get(), e.start_offset.get()))
        .collect();
    assert_eq!(epochs, vec![(1, 0), (3, 44)]);
}

#[test]
fn a_stale_leader_epoch_is_refused() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    log.append(&batch("a", 1, 0), LeaderEpoch::new(5))
        .expect("append");
    let err = log
        .append(&batch("b", 1, 0), LeaderEpoch::new(4))
        .expect_err("older epoch");
    assert!(
        matches!(
            err,
            LogError::StaleEpoch { epoch, latest }
                if epoch == LeaderEpoch::new(4) && latest == LeaderEpoch::new(5)
        ),
        "{err:?}"
    );
}

#[test]
fn replicated_batches_must_continue_the_log() {
    let leader_storage = CrashStorage::new();
    let leader = open_crash(&leader_storage, small_config());
    leader
        .append(&batch("a", 2, 0), LeaderEpoch::new(7))
        .expect("append");
    leader
        .append(&batch("b", 3, 0), LeaderEpoch::new(7))
        .expect("append");
    let stored = leader
        .read(Offset::ZERO, 1 << 20, leader.log_end())
        .expect("read")
        .bytes;
    let first_len = floe_wire::batch::peek_batch_length(&stored).expect("length") as usize;
    let follower_storage = CrashStorage::new();
    let follower = open_crash(&follower_storage, small_config());
    let err = follower
        .append_replicated(&stored[first_len..])
        .expect_err("gap");
    assert!(matches!(err, LogError::NonContiguous { .. }), "{err:?}");
    follower
        .append_replicated(&stored[..first_len])
        .expect("first");
    follower
        .append_replicated(&stored[first_len..])
        .expect("second");
    assert_eq!(
        follower
            .read(Offset::ZERO, 1 << 20, follower.log_end())
            .expect("read")
            .bytes,
        stored
    );
    assert_eq!(
        follower.epoch_history().latest().map(|e| e.epoch.get()),
        Some(7)
    );
}

#[test]
fn a_retried_producer_batch_gets_its_original_offsets_across_restarts_and_rolls() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    log.append(&batch("filler", 3, 0), LeaderEpoch::new(1))
        .expect("append");
    let first = log
        .append(&producer_batch(42, 0, 0, 2), LeaderEpoch::new(1))
        .expect("append");
    let retry = log
        .append(&producer_batch(42, 0, 0, 2), LeaderEpoch::new(1))
        .expect("retry");
    assert!(retry.duplicate);
    assert_eq!(
        (retry.base_offset, retry.last_offset),
        (first.base_offset, first.last_offset)
    );
    let second = log
        .append(&producer_batch(42, 0, 2, 2), LeaderEpoch::new(1))
        .expect("append");
    // Roll the segment so the state comes from a snapshot, then from a replay.
    log.roll().expect("roll");
    drop(log);
    let log = open_crash(&storage, small_config());
    let retry = log
        .append(&producer_batch(42, 0, 2, 2), LeaderEpoch::new(1))
        .expect("retry after restart");
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, second.base_offset);
    let gap = log
        .append(&producer_batch(42, 0, 9, 1), LeaderEpoch::new(1))
        .expect_err("gap");
    assert!(
        matches!(
            gap,
            LogError::OutOfOrderSequence {
                expected: 4,
                found: 9,
                ..
            }
        ),
        "{gap:?}"
    );
    let next = log
        .append(&producer_batch(42, 0, 4, 1), LeaderEpoch::new(1))
        .expect("next");
    drop(log);
    let log = open_crash(&storage, small_config());
    assert!(
        log.append(&producer_batch(42, 0, 4, 1), LeaderEpoch::new(1))
            .expect("retry")
            .duplicate
    );
    assert_eq!(log.log_end(), next.next_offset());
}

#[test]
fn invalid_and_oversized_batches_are_refused_and_write_nothing() {
    let storage = CrashStorage::new();
    let config = LogConfig {
        batch_bytes_max: 2048,
        ..small_config()
    };
    let log = open_crash(&storage, config);
    let mut bad = batch("a", 2, 0);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        log.append(&bad, LeaderEpoch::new(1)),
        Err(LogError::InvalidBatch(_))
    ));
    let big = sized_batch(3, 1000, 0);
    assert!(matches!(
        log.append(&big, LeaderEpoch::new(1)),
        Err(LogError::BatchTooLarge { max: 2048, .. })
    ));
    let mut two = batch("a", 1, 0);
    two.extend_from_slice(&batch("b", 1, 0));
    assert!(matches!(
        log.append(&two, LeaderEpoch::new(1)),
        Err(LogError::InvalidBatch(_))
    ));
    assert_eq!(log.log_end(), Offset::ZERO);
    log.append(&batch("ok", 1, 0), LeaderEpoch::new(1))
        .expect("a good batch still appends");
}

#[test]
fn high_watermark_is_stored_atomically_and_clamped_to_the_log() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    log.append(&batch("a", 10, 0), LeaderEpoch::new(1))
        .expect("append");
    log.store_high_watermark(Offset::new(7)).expect("store");
    drop(log);
    let log = open_crash(&storage, small_config());
    assert_eq!(log.high_watermark(), Offset::new(7));
    log.truncate(Offset::ZERO).expect("truncate");
    assert_eq!(log.high_watermark(), Offset::ZERO);
}

#[test]
fn synced_data_behind_the_window_leaves_the_page_cache_and_still_reads_back() {
    let released = |window: Option<u64>| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            segment_bytes_max: 6 << 20,
            page_cache_bytes: window,
            ..LogConfig::default()
        };
        let log = Log::open(Arc::new(FsStorage), tmp.path(), config).expect("open");
        for i in 0..16 {
            log.append(&sized_batch(4, 256 << 10, i), LeaderEpoch::new(1))
                .expect("append");
            // One sync per batch, as a steady producer gets.
            log.wait_synced_blocking(log.log_end()).expect("synced");
        }
        assert!(log.sealed_segments().len() >= 2, "the log rolled");
        // Released or not, every record reads back (from the disk).
        assert_eq!(read_all(&log, Offset::ZERO).len(), 64);
        // Releases are chores of their own thread; closing finishes them.
        log.close().expect("close");
        log.stats()
            .released_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // 16 MiB written with a 2 MiB window: everything but the window's worth is released,
    // sealed segments included; in steps, so a little more may stay.
    let with_window = released(Some(2 << 20));
    assert!(
        (12 << 20..=14 << 20).contains(&with_window),
        "released {with_window} bytes"
    );
    assert_eq!(released(None), 0, "no window: the page cache is left alone");
}

/// Bytes this thread has caused to be fetched from storage (`/proc/thread-self/io`).
fn thread_read_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("read_bytes")
}

#[test]
fn uncached_reads_return_the_same_bytes_and_leave_no_pages_behind() {
    use floe_hot_log::storage::{
        DIRECT_ALIGN, aligned_buffer, read_exact_at, read_exact_uncached_at,
    };
    // On the build disk: a tmpfs /tmp would refuse O_DIRECT and hide the direct path.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let len = (1usize << 20) + 1000; // whole blocks and an unaligned tail
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let file = FsStorage
        .open(&tmp.path().join("segment"), true)
        .expect("open");
    file.write_all_at(&data, 0).expect("write");
    // Read before any sync: the kernel writes dirty pages back before a direct read.
    let (mut backing, at) = aligned_buffer(len + DIRECT_ALIGN);
    let aligned = &mut backing[at..at + len];
    read_exact_uncached_at(file.as_ref(), aligned, 0).expect("read");
    assert!(aligned == &data[..], "unsynced data reads back directly");
    file.sync_data().expect("sync");

    // Dropped from the page cache, read around it, then read through it: the second read
    // still has to go to the disk, which it would not if the first had filled the cache.
    file.release_cache(0, len as u64);
    aligned.fill(0);
    read_exact_uncached_at(file.as_ref(), aligned, 0).expect("read");
    assert!(aligned == &data[..]);
    let before = thread_read_bytes();
    let mut through_cache = vec![0u8; len];
    read_exact_at(file.as_ref(), &mut through_cache, 0).expect("read");
    let fetched = thread_read_bytes() - before;
    assert!(
        fetched >= (len / 2) as u64,
        "the buffered read found the data cached ({fetched} bytes fetched): the uncached read filled the page cache"
    );

    // Positions and buffers that are not aligned alike, and lengths shorter than a block,
    // fall back to the page cache and read the same bytes.
    for (position, buf_at, n) in [
        (4096usize, 1usize, 8192usize),
        (100, 0, 9000),
        (8192, 0, 100),
        (0, 0, len),
    ] {
        let buf = &mut backing[at + buf_at..at + buf_at + n];
        read_exact_uncached_at(file.as_ref(), buf, position as u64).expect("read");
        assert!(
            buf == &data[position..position + n],
            "at {position}, {n} bytes"
        );
    }
    // Past the end: an error, as for the buffered read.
    let buf = &mut backing[at..at + 2 * DIRECT_ALIGN];
    let past = (len / DIRECT_ALIGN * DIRECT_ALIGN) as u64;
    let err = read_exact_uncached_at(file.as_ref(), buf, past).expect_err("short");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);

    // A storage without direct reads serves them through `read_at`.
    let crash = CrashStorage::new();
    crash.create_dir_all(tmp.path()).expect("dir");
    let file = crash.open(&tmp.path().join("c"), true).expect("open");
    file.write_all_at(&data, 0).expect("write");
    let aligned = &mut backing[at..at + len];
    aligned.fill(0);
    read_exact_uncached_at(file.as_ref(), aligned, 0).expect("read");
    assert!(aligned == &data[..]);
}

#[test]
fn reads_of_released_segments_go_around_the_page_cache() {
    // On the build disk: a tmpfs /tmp would refuse O_DIRECT and hide the direct path.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let config = LogConfig {
        segment_bytes_max: 1 << 20,
        page_cache_bytes: Some(256 << 10),
        ..LogConfig::default()
    };
    let log = Log::open(Arc::new(FsStorage), tmp.path(), config).expect("open");
    // Batches of 30,000-odd bytes: positions that are not block-aligned.
    let mut expected = Vec::new();
    for i in 0..160 {
        let batch = sized_batch(3, 10_000 + i as usize, i);
        expected.extend(
            records(&bytes::Bytes::from(batch.clone()))
                .into_iter()
                .map(|(_, v)| v),
        );
        log.append(&batch, LeaderEpoch::new(1)).expect("append");
        log.wait_synced_blocking(log.log_end()).expect("synced");
    }
    assert!(log.sealed_segments().len() >= 3, "the log rolled");
    // Everything reads back, from every starting offset's batch, in reads of any size.
    for max_bytes in [1, 64 << 10, 1 << 20] {
        let mut values = Vec::new();
        let mut at = Offset::ZERO;
        while at < log.log_end() {
            let read = log.read(at, max_bytes, log.log_end()).expect("read");
            values.extend(records(&read.bytes).into_iter().map(|(_, v)| v));
            at = read.next_offset;
        }
        assert!(values == expected, "reads of {max_bytes} bytes");
    }
    // The oldest segment is released: reading it twice fetches it from the disk twice. A
    // buffered read would have cached it the first time.
    let oldest = log
        .read(Offset::ZERO, 1 << 20, log.log_end())
        .expect("read");
    let before = thread_read_bytes();
    let again = log
        .read(Offset::ZERO, 1 << 20, log.log_end())
        .expect("read");
    let fetched = thread_read_bytes() - before;
    assert_eq!(again.bytes, oldest.bytes);
    assert!(
        fetched >= oldest.bytes.len() as u64 / 2,
        "the second read found the segment cached ({fetched} bytes fetched)"
    );
}

#[test]
fn segment_limits_change_on_a_running_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes_max: 1 << 30,
        ..LogConfig::default()
    };
    let log = Log::open(Arc::new(FsStorage), tmp.path(), config).expect("open");
    let append = |i: i64| {
        log.append(&sized_batch(1, 4_000, i), LeaderEpoch::new(1))
            .expect("append");
    };
    for i in 0..10 {
        append(i);
    }
    assert!(log.sealed_segments().is_empty(), "far below 1 GiB");
    // Out of range: refused, and nothing changes.
    assert!(log.set_segment_limits(0, Duration::from_secs(600)).is_err());
    log.set_segment_limits(16 << 10, Duration::from_secs(600))
        .expect("in range");
    for i in 10..30 {
        append(i);
    }
    let sealed = log.sealed_segments().len();
    assert!(
        sealed >= 4,
        "20 batches of 4 KB in 16 KiB segments: {sealed}"
    );
    // By age: the next maintenance seals the active segment.
    log.set_segment_limits(1 << 30, Duration::ZERO)
        .expect("in range");
    assert!(log.maintain(Instant::now()).expect("maintain"));
    assert_eq!(log.sealed_segments().len(), sealed + 1);
    assert_eq!(
        read_all(&log, Offset::ZERO).len(),
        30,
        "every record is kept"
    );
}

#[test]
fn a_damaged_sealed_segment_is_replaced_by_a_good_copy_and_a_crash_leaves_one_or_the_other() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..20 {
        log.append(&batch(&format!("r{i}"), 4, 0), LeaderEpoch::new(1))
            .expect("append");
    }
    log.wait_synced_blocking(log.log_end()).expect("synced");
    // Reopened, so that the rolls' indexes are written before the crash images below are
    // taken: a sealed segment without its index is scanned when the log opens, and this
    // one's rot would be found then.
    drop(log);
    let log = open_crash(&storage, small_config());
    let everything = read_everything(&log).expect("read");
    let sealed = log.sealed_segments();
    assert!(sealed.len() >= 3, "{} sealed segments", sealed.len());
    let target = &sealed[1];
    let good = storage.contents(&target.path).expect("contents");
    let mut bad = good.clone();
    bad[100] ^= 0xff; // inside the records of the first batch
    storage
        .replace_contents(&target.path, bad.clone())
        .expect("rot");
    assert!(matches!(
        read_everything(&log),
        Err(LogError::Corrupt { .. })
    ));

    // Copies that are not the segment's batches are refused and change nothing.
    let other = storage.contents(&sealed[2].path).expect("contents");
    for (what, copy) in [
        ("short", &good[..good.len() - 1]),
        ("damaged", &bad[..]),
        ("another segment", &other[..]),
    ] {
        match log.replace_sealed(target.base_offset, copy) {
            Err(LogError::ReplacementMismatch { base_offset, .. }) => {
                assert_eq!(base_offset, target.base_offset, "{what}")
            }
            other => panic!("a {what} copy: {other:?}"),
        }
    }
    assert_eq!(storage.contents(&target.path).expect("contents"), bad);
    let active = log.log_end();
    assert!(
        log.replace_sealed(sealed.last().expect("sealed").next_offset, &good)
            .is_err(),
        "the active segment (at {active}) is not replaced"
    );

    // The good copy replaces the damaged file; a crash at any sync on the way leaves the
    // one or the other, whole, and the log opens.
    let images = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = images.clone();
    storage.on_sync(move |_, image| seen.lock().expect("images").push(image));
    log.replace_sealed(target.base_offset, &good)
        .expect("replace");
    assert_eq!(read_everything(&log).expect("read healed"), everything);
    assert_eq!(storage.contents(&target.path).expect("contents"), good);
    drop(log);
    let images = images.lock().expect("images").clone();
    assert!(!images.is_empty(), "the replacement syncs");
    for (i, image) in images.iter().enumerate() {
        for seed in 0..4 {
            let restored = image.restore(seed);
            let contents = restored.contents(&target.path).expect("the segment file");
            assert!(
                contents == good || contents == bad,
                "image {i} seed {seed}: {} bytes, neither copy",
                contents.len()
            );
            let log = open_crash(&restored, small_config());
            assert_eq!(log.log_end(), active, "image {i} seed {seed}");
        }
    }
}

/// Opens the log and returns where its open found damage.
fn damage(storage: &CrashStorage, config: LogConfig) -> (std::path::PathBuf, u64) {
    match Log::open(Arc::new(storage.clone()), &dir(), config) {
        Err(LogError::Corrupt { file, position, .. }) => (file, position),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_repair_cuts_rot_in_the_active_segment_only_as_planned() {
    let storage = CrashStorage::new();
    let (path, positions) = ten_synced_batches(&storage);
    let whole = storage.contents(&path).expect("contents");
    let mut bytes = whole.clone();
    // Inside the fourth batch (offsets 300..400).
    let damaged = positions[3] as usize + 40;
    for byte in &mut bytes[damaged..damaged + 8] {
        *byte ^= 0xff;
    }
    storage.replace_contents(&path, bytes.clone()).expect("rot");
    let (file, position) = damage(&storage, active_config());
    let plan = Log::plan_repair(
        &storage,
        &dir(),
        &active_config(),
        &file,
        position,
        Offset::ZERO,
    )
    .expect("plan");
    assert_eq!(plan.discard_from, Offset::new(300));
    assert_eq!(plan.position, positions[3]);
    assert_eq!(plan.discarded_bytes, bytes.len() as u64 - positions[3]);
    assert_eq!((plan.discarded_segments, plan.restart), (0, false));
    assert_eq!(
        storage.contents(&path).expect("contents"),
        bytes,
        "planning changed the file"
    );
    let log = Log::apply_repair(Arc::new(storage.clone()), &dir(), active_config(), &plan)
        .expect("repair");
    assert_eq!(log.log_end(), Offset::new(300));
    assert_eq!(read_everything(&log).expect("read"), positions[3] as usize);
    // The log goes on from the cut.
    let a = log
        .append(&batch("after", 5, 0), LeaderEpoch::new(1))
        .expect("append");
    assert_eq!(a.base_offset, Offset::new(300));
    log.wait_synced_blocking(a.next_offset()).expect("sync");
    drop(log);
    let log = open_crash(&storage, active_config());
    assert_eq!(log.log_end(), Offset::new(305));
    assert_eq!(
        storage.contents(&path).expect("contents")[..positions[3] as usize],
        whole[..positions[3] as usize],
        "the batches before the damage changed"
    );
}

#[test]
fn a_repair_of_a_sealed_segment_discards_the_segments_after_it() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..20 {
        log.append(&batch(&format!("r{i}"), 4, 0), LeaderEpoch::new(1))
            .expect("append");
    }
    let sealed = log.sealed_segments();
    let end = log.log_end();
    drop(log);
    assert!(sealed.len() >= 3, "{} sealed segments", sealed.len());
    let damaged = &sealed[1];
    let mut bytes = storage.contents(&damaged.path).expect("contents");
    bytes[40] ^= 0xff;
    storage
        .replace_contents(&damaged.path, bytes)
        .expect("corrupt");
    storage
        .remove_file(&segment_path(&dir(), damaged.base_offset.get(), "index"))
        .expect("remove index");
    let (file, position) = damage(&storage, small_config());
    assert_eq!(file, damaged.path);
    let plan = Log::plan_repair(
        &storage,
        &dir(),
        &small_config(),
        &file,
        position,
        Offset::ZERO,
    )
    .expect("plan");
    assert_eq!(
        plan.discard_from, damaged.base_offset,
        "the first batch is damaged"
    );
    assert!(!plan.restart);
    let later = storage
        .list_dir(&dir())
        .expect("list")
        .iter()
        .filter(|n| n.ends_with(".log"))
        .count()
        - 2;
    assert_eq!(plan.discarded_segments, later);
    let log = Log::apply_repair(Arc::new(storage.clone()), &dir(), small_config(), &plan)
        .expect("repair");
    assert_eq!(log.log_end(), damaged.base_offset);
    assert!(log.log_end() < end);
    assert_eq!(
        read_everything(&log).expect("read") as u64,
        sealed[0].size_bytes
    );
    drop(log);
    // A damaged range that object storage still holds is not lost: the local log starts
    // again where that copy ends.
    let tiered_end = end;
    let (file, position) = (damaged.path.clone(), 0);
    let plan = Log::plan_repair(
        &storage,
        &dir(),
        &small_config(),
        &file,
        position,
        tiered_end,
    )
    .expect("plan");
    assert!(plan.restart);
    assert_eq!(plan.discard_from, tiered_end);
    let log = Log::apply_repair(Arc::new(storage.clone()), &dir(), small_config(), &plan)
        .expect("repair");
    assert_eq!((log.log_start(), log.log_end()), (tiered_end, tiered_end));
}

#[test]
fn a_repair_names_only_segments_of_the_log() {
    let storage = CrashStorage::new();
    let (_, _) = ten_synced_batches(&storage);
    let err = Log::plan_repair(
        &storage,
        &dir(),
        &active_config(),
        &dir().join("epochs"),
        0,
        Offset::ZERO,
    )
    .expect_err("planned a repair of a state file");
    assert!(err.to_string().contains("not one"), "{err}");
}

#[test]
fn what_a_roll_leaves_to_write_never_lands_after_a_truncation_below_it() {
    // The sealed segment's index and the producers' snapshot at its end are written off
    // the writer's path; a truncation right after the roll must not find them landing
    // after it (a snapshot above the cut would bring truncated producer state back).
    let storage = CrashStorage::new();
    let config = LogConfig {
        segment_bytes_max: 1 << 20,
        ..small_config()
    };
    // The snapshot's write is slow: the truncation comes while it is under way.
    storage.slow_syncs(".producers.tmp", Duration::from_millis(100));
    let log = open_crash(&storage, config);
    for tag in ["a", "b", "c"] {
        log.append(&batch(tag, 3, 0), LeaderEpoch::new(1))
            .expect("append");
    }
    log.roll().expect("roll");
    log.truncate(Offset::new(3)).expect("truncate");
    log.close().expect("close");
    let names = storage.list_dir(&dir()).expect("list");
    // The only snapshot, at 9, went with the records after the cut.
    assert!(
        !names.iter().any(|n| n.ends_with(".producers")),
        "a snapshot survived the cut: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n == "00000000000000000009.log"),
        "the segment after the cut is still there: {names:?}"
    );
}

#[test]
fn a_roll_writes_the_index_and_the_snapshot_soon_after() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    log.append(&batch("a", 3, 0), LeaderEpoch::new(1))
        .expect("append");
    log.roll().expect("roll");
    let deadline = Instant::now() + Duration::from_secs(10);
    let written = |name: &str| storage.contents(&dir().join(name)).is_ok();
    while !(written("00000000000000000000.index") && written("00000000000000000003.producers")) {
        assert!(
            Instant::now() < deadline,
            "the roll's state files were not written"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_high_watermark_stored_while_retention_runs_is_stored() {
    // The high watermark is stored outside the writer's lock, so retention (or a
    // truncation) may list the directory while its temp file is being written.
    let storage = CrashStorage::new();
    let log = Arc::new(open_crash(&storage, small_config()));
    for i in 0..20 {
        log.append(&batch(&format!("r{i}"), 4, 0), LeaderEpoch::new(1))
            .expect("append");
    }
    log.wait_synced_blocking(log.log_end()).expect("synced");
    assert!(log.sealed_segments().len() >= 2, "the log rolled");
    storage.slow_syncs("high-watermark.tmp", Duration::from_millis(200));
    let storing = {
        let log = log.clone();
        std::thread::spawn(move || log.store_high_watermark(Offset::new(6)))
    };
    std::thread::sleep(Duration::from_millis(50));
    let policy = RetentionPolicy {
        bytes_max: Some(1),
        age_max_ms: None,
    };
    let deleted = log.apply_retention(policy, 0, |_| true).expect("retention");
    assert!(!deleted.is_empty(), "retention deleted segments");
    storing
        .join()
        .expect("thread")
        .expect("the high watermark is stored");
    assert_eq!(log.high_watermark(), Offset::new(6));
}

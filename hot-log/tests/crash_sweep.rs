//! Crash at every sync point: a randomized workload runs against `CrashStorage`, which hands
//! over a crash image just before each sync takes effect. Every image, restored with several
//! choices of which unsynced writes survive, must recover to a prefix of what was appended
//! that holds every batch whose sync had been acknowledged when the image was taken. Some
//! appends meet a full disk on the way, and are refused without harm to the log.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use floe_hot_log::storage::{CrashImage, SyncPoint};
use floe_hot_log::{CrashStorage, Log, LogConfig, LogError, RetentionPolicy, Storage};
use floe_wire::{LeaderEpoch, Offset};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Restorations tried per image.
const RESTORES_PER_IMAGE: u64 = 3;

struct Captured {
    point: SyncPoint,
    image: CrashImage,
    /// Batches acknowledged as synced when the image was taken.
    acked: usize,
}

/// Every record appended, in order: (offset, value), and where each batch ends.
#[derive(Default)]
struct History {
    records: Vec<(u64, Vec<u8>)>,
    batch_ends: Vec<usize>,
    /// Appends refused on a full disk.
    refused: usize,
}

fn run_workload(seed: u64, storage: &CrashStorage, acked: &AtomicUsize) -> History {
    let mut rng = SmallRng::seed_from_u64(seed);
    let log = open_crash(storage, small_config());
    let mut history = History::default();
    for op in 0..60 {
        let count = rng.random_range(1..=6);
        // Some batches are large enough to be written in two pieces (stamped header, rest).
        let tag = if rng.random_bool(0.1) {
            format!("s{seed}-op{op}-{}", "x".repeat(80_000 / count as usize))
        } else {
            format!("s{seed}-op{op}")
        };
        // Now and then the disk is full for this append (or the roll before it): refused,
        // undone, and the log goes on once space returns.
        let full = rng.random_bool(0.08);
        if full {
            storage.fail_writes_after(rng.random_range(0..300));
        }
        let result = log.append(
            &batch(&tag, count, op),
            LeaderEpoch::new(1 + (op / 20) as u32),
        );
        storage.allow_writes();
        let appended = match result {
            Ok(appended) => appended,
            Err(LogError::DiskFull { .. }) if full => {
                history.refused += 1;
                continue;
            }
            Err(e) => panic!("append: {e}"),
        };
        for i in 0..count {
            history.records.push((
                appended.base_offset.get() + u64::from(i),
                format!("{tag}-{i}").into_bytes(),
            ));
        }
        history.batch_ends.push(history.records.len());
        if rng.random_bool(0.5) {
            log.wait_synced_blocking(appended.next_offset())
                .expect("sync");
            acked.store(history.batch_ends.len(), Ordering::SeqCst);
        }
        if rng.random_bool(0.05) {
            log.roll().expect("roll");
        }
        if rng.random_bool(0.05) {
            let policy = RetentionPolicy {
                bytes_max: Some(2048),
                age_max_ms: None,
            };
            log.apply_retention(policy, 0, |_| true).expect("retention");
        }
        if rng.random_bool(0.05) {
            log.store_high_watermark(log.synced_end())
                .expect("high watermark");
        }
    }
    drop(log);
    history
}

fn check_recovery(seed: u64, captured: &Captured, history: &History, restore_seed: u64) {
    let context = format!(
        "workload seed {seed}, sync point {} ({}), restore seed {restore_seed}",
        captured.point.index,
        captured.point.path.display()
    );
    let storage = captured.image.restore(restore_seed);
    let log = Log::open(
        Arc::new(storage.clone()) as Arc<dyn Storage>,
        &dir(),
        small_config(),
    )
    .unwrap_or_else(|e| panic!("{context}: open failed: {e}"));
    let start = log.log_start().get();
    let recovered = read_all(&log, log.log_start());
    let skip = history
        .records
        .iter()
        .position(|(o, _)| *o == start)
        .unwrap_or(history.records.len());
    assert!(
        recovered.len() <= history.records.len() - skip,
        "{context}: recovered more than was appended"
    );
    assert_eq!(
        recovered[..],
        history.records[skip..skip + recovered.len()],
        "{context}: recovered log is not a prefix of the appended records"
    );
    let acked_records = captured
        .acked
        .checked_sub(1)
        .map_or(0, |b| history.batch_ends[b]);
    let end = start as usize + recovered.len();
    assert!(
        end >= acked_records,
        "{context}: lost acknowledged records: recovered up to {end}, acknowledged {acked_records}"
    );
    // The recovered log accepts writes, and reopening it again changes nothing.
    let next = log
        .append(&batch("after", 1, 0), LeaderEpoch::new(9))
        .unwrap_or_else(|e| panic!("{context}: append: {e}"));
    assert_eq!(next.base_offset.get(), end as u64, "{context}");
    log.wait_synced_blocking(next.next_offset())
        .unwrap_or_else(|e| panic!("{context}: sync: {e}"));
    drop(log);
    let again = Log::open(
        Arc::new(storage) as Arc<dyn Storage>,
        &dir(),
        small_config(),
    )
    .unwrap_or_else(|e| panic!("{context}: second open failed: {e}"));
    assert_eq!(again.log_end(), next.next_offset(), "{context}");
}

/// Returns the sync points exercised and the appends refused on a full disk.
fn sweep(seed: u64) -> (usize, usize) {
    let storage = CrashStorage::new();
    let acked = Arc::new(AtomicUsize::new(0));
    let captured = Arc::new(Mutex::new(Vec::new()));
    {
        let acked = acked.clone();
        let captured = captured.clone();
        storage.on_sync(move |point, image| {
            let acked = acked.load(Ordering::SeqCst);
            captured.lock().expect("lock").push(Captured {
                point,
                image,
                acked,
            });
        });
    }
    let history = run_workload(seed, &storage, &acked);
    let captured = std::mem::take(&mut *captured.lock().expect("lock"));
    for image in &captured {
        for restore_seed in 0..RESTORES_PER_IMAGE {
            check_recovery(seed, image, &history, seed * 1000 + restore_seed);
        }
    }
    // And the state after the workload ended, everything durable.
    let end = Captured {
        point: SyncPoint {
            index: u64::MAX,
            path: dir(),
        },
        image: storage.crash_image(),
        acked: history.batch_ends.len(),
    };
    check_recovery(seed, &end, &history, 0);
    (captured.len(), history.refused)
}

#[test]
fn a_crash_at_any_sync_point_keeps_every_acknowledged_batch() {
    let seeds: u64 = std::env::var("FLOE_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let (mut points, mut refused) = (0, 0);
    for seed in 0..seeds {
        let (p, r) = sweep(seed);
        points += p;
        refused += r;
    }
    assert!(
        points > seeds as usize * 50,
        "only {points} sync points exercised"
    );
    assert!(refused > 0, "no append met a full disk");
}

#[test]
fn a_crash_during_truncation_leaves_the_kept_prefix_intact() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    let mut values = Vec::new();
    for i in 0..30 {
        let a = log
            .append(&batch(&format!("t{i}"), 3, 0), LeaderEpoch::new(1))
            .expect("append");
        values.push(a);
    }
    log.wait_synced_blocking(log.log_end()).expect("sync");
    let before = read_all(&log, Offset::ZERO);
    let to = values[7].base_offset;
    let captured = Arc::new(Mutex::new(Vec::new()));
    {
        let captured = captured.clone();
        storage.on_sync(move |_, image| captured.lock().expect("lock").push(image));
    }
    log.truncate(to).expect("truncate");
    drop(log);
    let images = std::mem::take(&mut *captured.lock().expect("lock"));
    assert!(
        images.len() >= 3,
        "truncation synced only {} times",
        images.len()
    );
    for (i, image) in images.iter().enumerate() {
        for seed in 0..4 {
            let restored = image.restore(seed);
            let log = Log::open(
                Arc::new(restored) as Arc<dyn Storage>,
                &dir(),
                LogConfig { ..small_config() },
            )
            .unwrap_or_else(|e| panic!("image {i} seed {seed}: {e}"));
            let after = read_all(&log, Offset::ZERO);
            assert!(
                after.len() >= to.get() as usize,
                "image {i} seed {seed}: lost records below the truncation point"
            );
            assert_eq!(
                after[..],
                before[..after.len()],
                "image {i} seed {seed}: not a prefix"
            );
        }
    }
}

#[test]
fn a_reset_is_all_or_nothing_across_a_crash() {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..30 {
        log.append(&batch(&format!("r{i}"), 3, 0), LeaderEpoch::new(1))
            .expect("append");
    }
    log.wait_synced_blocking(log.log_end()).expect("sync");
    log.store_high_watermark(Offset::new(40)).expect("hw");
    let before = read_all(&log, Offset::ZERO);
    let start = Offset::new(500);
    let captured = Arc::new(Mutex::new(Vec::new()));
    {
        let captured = captured.clone();
        storage.on_sync(move |_, image| captured.lock().expect("lock").push(image));
    }
    log.reset(start, LeaderEpoch::new(3)).expect("reset");
    assert_eq!((log.log_start(), log.log_end()), (start, start));
    assert_eq!(log.synced_end(), start);
    assert_eq!(log.high_watermark(), start);
    // Only the epoch of the entry below the new start is kept.
    let base = floe_hot_log::EpochStart {
        epoch: LeaderEpoch::new(3),
        start_offset: Offset::new(499),
    };
    assert_eq!(log.epoch_history().entries(), &[base]);
    let next = log
        .append(&batch("after", 2, 0), LeaderEpoch::new(4))
        .expect("append after reset");
    assert_eq!(next.base_offset, start);
    log.wait_synced_blocking(next.next_offset()).expect("sync");
    drop(log);
    let images = std::mem::take(&mut *captured.lock().expect("lock"));
    assert!(
        images.len() >= 3,
        "reset synced only {} times",
        images.len()
    );
    let mut reset_seen = false;
    for (i, image) in images.iter().enumerate() {
        for seed in 0..4 {
            let restored = image.restore(seed);
            let log = Log::open(
                Arc::new(restored) as Arc<dyn Storage>,
                &dir(),
                small_config(),
            )
            .unwrap_or_else(|e| panic!("image {i} seed {seed}: {e}"));
            if log.log_start() == start {
                // The reset happened: nothing of the old log is left.
                reset_seen = true;
                let after = read_all(&log, start);
                assert!(after.len() <= 2, "image {i} seed {seed}: {after:?}");
                assert_eq!(
                    log.epoch_history().entries().first(),
                    Some(&base),
                    "image {i} seed {seed}: the base epoch is lost"
                );
                assert!(log.high_watermark() <= log.log_end());
            } else {
                // It did not: the whole old log is there.
                assert_eq!(log.log_start(), Offset::ZERO, "image {i} seed {seed}");
                assert_eq!(
                    read_all(&log, Offset::ZERO),
                    before,
                    "image {i} seed {seed}: a partial reset"
                );
            }
        }
    }
    assert!(reset_seen, "no crash image after the reset took effect");
}

#[test]
fn a_directory_whose_parent_was_never_synced_is_lost_at_a_crash_with_its_files() {
    let storage = CrashStorage::new();
    let dir = std::path::Path::new("/data/streams/orders/0");
    let made = storage.create_dir_all(dir).expect("directories");
    let expected: Vec<std::path::PathBuf> = ["/", "/data", "/data/streams", "/data/streams/orders"]
        .into_iter()
        .map(Into::into)
        .chain([dir.to_path_buf()])
        .collect();
    assert_eq!(made, expected);
    let path = dir.join("00000000000000000000.log");
    let file = storage.open(&path, true).expect("create");
    file.write_all_at(b"synced", 0).expect("write");
    file.sync_data().expect("sync");
    storage.sync_dir(dir).expect("sync the directory");
    // The file's name is durable in its directory, but the directory's own name is not.
    let image = storage.crash_image();
    assert!(
        (0..64).any(|seed| image.restore(seed).list_dir(dir).is_err()),
        "no crash lost a directory never made durable"
    );
    for parent in made.iter().filter_map(|d| d.parent()) {
        storage.sync_dir(parent).expect("sync a parent");
    }
    let image = storage.crash_image();
    for seed in 0..64 {
        assert_eq!(
            image.restore(seed).contents(&path).expect("file survives"),
            b"synced",
            "seed {seed}"
        );
    }
}

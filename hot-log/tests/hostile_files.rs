//! Whatever bytes a log directory holds, opening it returns a log or a typed error: never a
//! panic, never an allocation the files do not justify. A recovered log serves only valid
//! batches and accepts writes.

mod common;

use std::sync::Arc;

use common::*;
use floe_hot_log::{CrashStorage, Log, Storage};
use floe_wire::{LeaderEpoch, Offset};
use proptest::prelude::*;

fn write(storage: &CrashStorage, name: &str, bytes: &[u8]) {
    let path = dir().join(name);
    let file = storage.open(&path, true).expect("create");
    file.write_all_at(bytes, 0).expect("write");
    file.sync_data().expect("sync");
    storage.sync_dir(&dir()).expect("sync dir");
}

/// A valid log's files with some bytes replaced by arbitrary ones.
fn damaged_log(flips: &[(usize, u8)], tails: &[u8]) -> CrashStorage {
    let storage = CrashStorage::new();
    let log = open_crash(&storage, small_config());
    for i in 0..12 {
        log.append(&producer_batch(1, 0, i * 3, 3), LeaderEpoch::new(1))
            .expect("append");
    }
    log.store_high_watermark(Offset::new(20)).expect("hw");
    drop(log);
    let mut names = storage.list_dir(&dir()).expect("list");
    names.sort();
    for (i, &(at, byte)) in flips.iter().enumerate() {
        let path = dir().join(&names[i % names.len()]);
        let mut bytes = storage.contents(&path).expect("contents");
        if !bytes.is_empty() {
            let at = at % bytes.len();
            bytes[at] = byte;
            storage.replace_contents(&path, bytes).expect("replace");
        }
    }
    if let Some(last) = names.iter().rev().find(|n| n.ends_with(".log")) {
        let path = dir().join(last);
        let mut bytes = storage.contents(&path).expect("contents");
        bytes.extend_from_slice(tails);
        storage.replace_contents(&path, bytes).expect("replace");
    }
    storage
}

fn exercise(storage: CrashStorage) {
    let Ok(log) = Log::open(
        Arc::new(storage) as Arc<dyn Storage>,
        &dir(),
        small_config(),
    ) else {
        return; // a typed error is an acceptable answer
    };
    let mut at = log.log_start();
    while at < log.log_end() {
        match log.read(at, 4096, log.log_end()) {
            Ok(read) if !read.bytes.is_empty() => {
                let _ = records(&read.bytes); // panics if an invalid batch was served
                at = read.next_offset;
            }
            _ => break,
        }
    }
    let _ = log.offset_for_timestamp(1_000);
    if let Ok(a) = log.append(&batch("after", 2, 0), LeaderEpoch::new(2)) {
        let _ = log.wait_synced_blocking(a.next_offset());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_files_never_panic_the_open(
        segment in proptest::collection::vec(any::<u8>(), 0..2048),
        index in proptest::collection::vec(any::<u8>(), 0..256),
        epochs in proptest::collection::vec(any::<u8>(), 0..64),
        snapshot in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let storage = CrashStorage::new();
        storage.create_dir_all(&dir()).expect("dir");
        write(&storage, "00000000000000000000.log", &segment);
        write(&storage, "00000000000000000000.index", &index);
        write(&storage, "00000000000000000007.log", &segment);
        write(&storage, "leader-epoch", &epochs);
        write(&storage, "00000000000000000007.producers", &snapshot);
        exercise(storage);
    }

    #[test]
    fn damaged_valid_logs_never_panic_or_serve_bad_batches(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        tail in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        exercise(damaged_log(&flips, &tail));
    }
}

//! Opens a log directory whose files come from the fuzzer: either raw files, or a valid log's
//! files with bytes overwritten and a tail appended. Opening must return a log or a typed
//! error — never panic — and a log that opens must serve only valid batches and accept writes.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use floe_hot_log::{CrashStorage, Log, LogConfig, Storage};
use floe_wire::{BatchBuilder, Offset, RecordBatch};
use libfuzzer_sys::fuzz_target;

/// The files a log directory may hold; the last is a reset's marker, which opening finishes
/// first (its payload names the new start and the epoch below it).
const RAW_FILES: [&str; 7] = [
    "00000000000000000000.log",
    "00000000000000000000.index",
    "00000000000000000007.log",
    "00000000000000000007.producers",
    "leader-epoch",
    "high-watermark",
    "reset",
];

fn dir() -> PathBuf {
    PathBuf::from("/fuzz/p0")
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

fn batch(producer: Option<(i64, i32)>, count: u32) -> Vec<u8> {
    let mut b = BatchBuilder::new(1 << 16);
    if let Some((id, seq)) = producer {
        b.producer(id, 0, seq);
    }
    for i in 0..count {
        b.push(1_000 + i64::from(i), Some(b"k"), b"value", &[("h", b"v")])
            .expect("push");
    }
    b.finish().expect("finish").to_vec()
}

fn write(storage: &CrashStorage, path: &Path, bytes: &[u8]) {
    let file = storage.open(path, true).expect("create");
    file.set_len(0).expect("truncate");
    file.write_all_at(bytes, 0).expect("write");
    file.sync_data().expect("sync");
}

/// Raw mode: `u16 length, bytes` for each of RAW_FILES in turn (missing ones are absent).
fn raw_files(mut data: &[u8]) -> CrashStorage {
    let storage = CrashStorage::new();
    storage.create_dir_all(&dir()).expect("dir");
    for name in RAW_FILES {
        if data.len() < 2 {
            break;
        }
        let len = usize::from(u16::from_le_bytes([data[0], data[1]])).min(data.len() - 2);
        write(&storage, &dir().join(name), &data[2..2 + len]);
        data = &data[2 + len..];
    }
    storage.sync_dir(&dir()).expect("sync dir");
    storage
}

/// Damage mode: a valid log, then `(u16 position, u8 byte)` overwrites across its files in
/// name order, the remaining bytes appended to the last segment.
fn damaged_log(data: &[u8]) -> CrashStorage {
    let storage = CrashStorage::new();
    {
        let log = Log::open(
            Arc::new(storage.clone()) as Arc<dyn Storage>,
            &dir(),
            config(),
        )
        .expect("open");
        for i in 0..10 {
            log.append(
                &batch(Some((1, i * 2)), 2),
                floe_wire::LeaderEpoch::new(1 + (i / 5) as u32),
            )
            .expect("append");
        }
        log.store_high_watermark(Offset::new(9)).expect("hw");
    }
    let mut names = storage.list_dir(&dir()).expect("list");
    names.sort();
    let flips = usize::from(data.first().copied().unwrap_or(0) % 8);
    let mut rest = data.get(1..).unwrap_or_default();
    for i in 0..flips {
        if rest.len() < 3 {
            break;
        }
        let path = dir().join(&names[i % names.len()]);
        let mut bytes = storage.contents(&path).expect("contents");
        if !bytes.is_empty() {
            let at = usize::from(u16::from_le_bytes([rest[0], rest[1]])) % bytes.len();
            bytes[at] = rest[2];
            storage.replace_contents(&path, bytes).expect("replace");
        }
        rest = &rest[3..];
    }
    if let Some(last) = names.iter().rev().find(|n| n.ends_with(".log")) {
        let path = dir().join(last);
        let mut bytes = storage.contents(&path).expect("contents");
        bytes.extend_from_slice(rest);
        storage.replace_contents(&path, bytes).expect("replace");
    }
    storage
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let storage = if mode % 2 == 0 {
        raw_files(rest)
    } else {
        damaged_log(rest)
    };
    let Ok(log) = Log::open(Arc::new(storage) as Arc<dyn Storage>, &dir(), config()) else {
        return;
    };
    let mut at = log.log_start();
    while at < log.log_end() {
        let Ok(read) = log.read(at, 512, log.log_end()) else {
            break;
        };
        if read.bytes.is_empty() {
            break;
        }
        let mut bytes = read.bytes.clone();
        while !bytes.is_empty() {
            let (_, tail) =
                RecordBatch::decode_prefix(&bytes).expect("the log served an invalid batch");
            bytes = tail;
        }
        assert!(read.next_offset > at, "read made no progress");
        at = read.next_offset;
    }
    let _ = log.offset_for_timestamp(1_001);
    if let Ok(appended) = log.append(&batch(Some((1, 20)), 1), floe_wire::LeaderEpoch::new(3)) {
        log.wait_synced_blocking(appended.next_offset())
            .expect("sync on healthy storage");
    }
});

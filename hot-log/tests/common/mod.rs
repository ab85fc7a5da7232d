//! Helpers shared by the hot-log integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_hot_log::{CrashStorage, Log, LogConfig, Storage};
use floe_wire::{BatchBuilder, Offset, RecordBatch};

/// A batch of `count` records whose values are `"{tag}-{i}"`, timestamps from `timestamp`.
pub fn batch(tag: &str, count: u32, timestamp: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(1 << 24);
    for i in 0..count {
        let value = format!("{tag}-{i}");
        b.push(timestamp + i64::from(i), None, value.as_bytes(), &[])
            .expect("push");
    }
    b.finish().expect("finish").to_vec()
}

/// A batch of `count` records of `size` bytes each.
pub fn sized_batch(count: u32, size: usize, timestamp: i64) -> Vec<u8> {
    let value = vec![b'x'; size];
    let mut b = BatchBuilder::new(1 << 25);
    for i in 0..count {
        b.push(timestamp + i64::from(i), None, &value, &[])
            .expect("push");
    }
    b.finish().expect("finish").to_vec()
}

/// An idempotent producer's batch.
pub fn producer_batch(producer_id: i64, epoch: u16, sequence: i32, count: u32) -> Vec<u8> {
    let mut b = BatchBuilder::new(1 << 20);
    b.producer(producer_id, epoch, sequence);
    for i in 0..count {
        let value = format!("p{producer_id}-s{}", sequence + i as i32);
        b.push(1_000 + i64::from(i), None, value.as_bytes(), &[])
            .expect("push");
    }
    b.finish().expect("finish").to_vec()
}

/// Every record in concatenated batches, as (offset, value).
pub fn records(bytes: &Bytes) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = bytes.clone();
    while !rest.is_empty() {
        let (batch, tail) = RecordBatch::decode_prefix(&rest).expect("stored batch is valid");
        let base = batch.header().base_offset.get();
        for r in batch.records() {
            out.push((base + u64::from(r.offset_delta), r.value.to_vec()));
        }
        rest = tail;
    }
    out
}

/// Reads every record from `from` to the log end.
pub fn read_all(log: &Log, from: Offset) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = from;
    let end = log.log_end();
    while at < end {
        let read = log.read(at, 64 * 1024, end).expect("read");
        assert!(!read.bytes.is_empty(), "no progress at {at}");
        out.extend(
            records(&read.bytes)
                .into_iter()
                .filter(|(o, _)| *o >= at.get()),
        );
        at = read.next_offset;
    }
    out
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1024,
        index_interval_bytes: 128,
        segment_age_max: Duration::from_secs(3600),
        ..LogConfig::default()
    }
}

pub fn dir() -> PathBuf {
    PathBuf::from("/log/p0")
}

pub fn open_crash(storage: &CrashStorage, config: LogConfig) -> Log {
    Log::open(
        Arc::new(storage.clone()) as Arc<dyn Storage>,
        &dir(),
        config,
    )
    .expect("open")
}

pub fn segment_path(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}"))
}

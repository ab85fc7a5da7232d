//! Helpers shared by the tier's integration tests: stores to run against, a hot log with
//! sealed segments, and batch decoding.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use floe_hot_log::{FsStorage, Log, LogConfig};
use floe_tier::{S3Settings, TierStore};
use floe_wire::{BatchBuilder, RecordBatch};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A store under test and what keeps it alive.
pub struct TestStore {
    pub name: &'static str,
    pub store: TierStore,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

/// A fresh local-directory store.
pub fn local_store() -> TestStore {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}/bucket/prefix", dir.path().display());
    let store = TierStore::open(&url, &S3Settings::default()).expect("local store");
    TestStore {
        name: "local",
        store,
        url,
        _dir: Some(dir),
    }
}

/// A fresh bucket on the S3-compatible server named by `FLOE_TEST_S3_ENDPOINT`, if set.
pub async fn s3_store() -> Option<TestStore> {
    let endpoint = std::env::var("FLOE_TEST_S3_ENDPOINT").ok()?;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let bucket = format!(
        "floe-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    create_bucket(&endpoint, &bucket).await;
    let settings = S3Settings {
        endpoint: Some(endpoint),
        region: Some("us-east-1".into()),
        access_key_id: Some("test".into()),
        secret_access_key: Some("test".into()),
        session_token: None,
        allow_http: true,
    };
    let url = format!("s3://{bucket}/some/prefix");
    let store = TierStore::open(&url, &settings).expect("s3 store");
    Some(TestStore {
        name: "s3",
        store,
        url,
        _dir: None,
    })
}

/// Every store to run a test against: the local directory always, S3 when configured.
pub async fn stores() -> Vec<TestStore> {
    let mut all = vec![local_store()];
    all.extend(s3_store().await);
    all
}

/// The S3-compatible test server accepts an unsigned `PUT /bucket`.
async fn create_bucket(endpoint: &str, bucket: &str) {
    let authority = endpoint
        .strip_prefix("http://")
        .expect("the test endpoint is plain http")
        .trim_end_matches('/');
    let mut conn = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect to the S3 test server");
    let request = format!(
        "PUT /{bucket} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    conn.read_to_end(&mut response).await.expect("receive");
    let status = String::from_utf8_lossy(&response);
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "creating bucket {bucket}: {status}"
    );
}

/// A batch of `count` records whose values are `"{tag}-{i}"` padded to `size` bytes.
pub fn batch(tag: &str, count: u32, size: usize, timestamp: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(1 << 25);
    for i in 0..count {
        let mut value = format!("{tag}-{i}").into_bytes();
        value.resize(size.max(value.len()), b'.');
        b.push(timestamp + i64::from(i), None, &value, &[])
            .expect("push");
    }
    b.finish().expect("finish").to_vec()
}

/// A log in `dir` whose segments seal at `segment_bytes`.
pub fn open_log(dir: &Path, segment_bytes: u64) -> Log {
    let config = LogConfig {
        segment_bytes_max: segment_bytes,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    Log::open(Arc::new(FsStorage), dir, config).expect("open log")
}

/// Appends `batches` batches of `count` records of `size` bytes, then seals the active
/// segment. Returns every batch as stored, in order.
pub fn fill_log(log: &Log, tag: &str, batches: u32, count: u32, size: usize) -> Vec<Bytes> {
    let mut stored = Vec::new();
    for i in 0..batches {
        let appended = log
            .append(
                &batch(&format!("{tag}{i}"), count, size, 1_000 + i64::from(i)),
                floe_wire::LeaderEpoch::new(1),
            )
            .expect("append");
        let read = log
            .read(appended.base_offset, 1, floe_wire::Offset::MAX)
            .expect("read back");
        stored.push(read.bytes);
    }
    log.roll().expect("seal");
    stored
}

/// Splits concatenated batches.
pub fn split_batches(bytes: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut rest = bytes.clone();
    while !rest.is_empty() {
        let (batch, tail) = RecordBatch::decode_prefix(&rest).expect("a valid batch");
        out.push(batch.into_bytes());
        rest = tail;
    }
    out
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

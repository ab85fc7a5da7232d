//! Each failed request is retried by one layer only: object_store for an S3 store, Floe's
//! `RetryPolicy` for what no layer below retried (`docs/tiering.md`, "Retries"). Against an
//! S3 endpoint that answers every request with `503`, an upload run makes as many requests as
//! object_store's own retries allow, not that many times the uploader's attempts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use floe_tier::{
    PartitionPath, S3Settings, TierError, TierStore, Uploader, UploaderConfig, request_retry,
};
use floe_wire::{LeaderEpoch, Offset};

/// An HTTP server on loopback that answers every request `503 Service Unavailable` and
/// counts them. Its thread lives as long as the test process.
struct Unavailable {
    url: String,
    requests: Arc<AtomicU64>,
}

impl Unavailable {
    fn start() -> Unavailable {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        std::thread::spawn(move || {
            for connection in listener.incoming().flatten() {
                // A connection that breaks mid-request is the client's business.
                let _ = answer_503(connection, &counted);
            }
        });
        Unavailable { url, requests }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads one request (its headers and any body) and answers `503`, closing the connection.
fn answer_503(connection: TcpStream, requests: &AtomicU64) -> std::io::Result<()> {
    let mut reader = BufReader::new(connection.try_clone()?);
    let mut body_bytes = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(length) = lower.strip_prefix("content-length:") {
            body_bytes = length.trim().parse().unwrap_or(0);
        }
    }
    std::io::copy(
        &mut reader.by_ref().take(body_bytes as u64),
        &mut std::io::sink(),
    )?;
    requests.fetch_add(1, Ordering::SeqCst);
    let mut connection = connection;
    connection.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
}

#[tokio::test]
async fn an_s3_outage_is_retried_by_object_store_alone() {
    let server = Unavailable::start();
    let settings = S3Settings {
        endpoint: Some(server.url.clone()),
        region: Some("us-east-1".into()),
        access_key_id: Some("floe-test".into()),
        secret_access_key: Some("floe-test".into()),
        allow_http: true,
        ..S3Settings::default()
    };
    let store = TierStore::open("s3://bucket/prefix", &settings).expect("an s3 store");
    let partition = PartitionPath::new("orders", 0).expect("a partition");
    let uploader = Uploader::new(store.clone(), partition, UploaderConfig::default());

    // The run's first request lists the manifest; it fails once object_store gives up.
    let failed = uploader.run(&[], Offset::ZERO, LeaderEpoch::new(1)).await;
    let Err(error) = failed else {
        panic!("an unavailable store fails the run: {failed:?}");
    };
    assert!(matches!(error, TierError::Unavailable { .. }), "{error:?}");
    let tries = 1 + request_retry().max_retries as u64;
    assert_eq!(
        server.requests(),
        tries,
        "object_store's tries of the one request, and no second layer around them \
         ({} attempts would have made {})",
        UploaderConfig::default().retry.attempts,
        tries * u64::from(UploaderConfig::default().retry.attempts),
    );
    assert!(
        error.is_retryable(),
        "the run itself may be tried again later"
    );
    assert!(
        !store.worth_retrying(&error),
        "but not at once, around object_store"
    );
}

#[test]
fn a_local_directory_leaves_retries_to_floe() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("file://{}", dir.path().display());
    let store = TierStore::open(&url, &S3Settings::default()).expect("a local store");
    let full_disk = TierError::Unavailable {
        operation: "put",
        key: "orders/0/segments/x.seg".into(),
        source: Arc::new(object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::other("no space left on device")),
        }),
    };
    assert!(store.worth_retrying(&full_disk));
    let fenced = TierError::Fenced {
        writer: LeaderEpoch::new(1),
        committed: LeaderEpoch::new(2),
    };
    assert!(!store.worth_retrying(&fenced), "never worth retrying");
}

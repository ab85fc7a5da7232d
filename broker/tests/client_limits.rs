//! Floods a real `floe-broker dev` process over real QUIC on loopback, past each limit of its
//! client port: connections refused at accept with a named, retryable refusal, request bytes
//! bounded broker-wide, and streams that claim large payloads or are left open. The broker's
//! memory (its RSS, from /proc) stays bounded and a well-behaved publisher stays served.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use floe_wire::frame::{CreateStream, ErrorCode, Message, Produce, StreamSettings};
use floe_wire::{AckMode, BatchBuilder, PartitionId, StreamName};

const MIB: u64 = 1 << 20;

/// Says Hello as the dev administrator: `Ok` on `HelloAck`, else how the broker closed the
/// connection (its application code and reason).
async fn say_hello(conn: &quinn::Connection, ca: &Path) -> Result<(), (u64, String)> {
    let hello = encode(&hello_as(dev_admin_token(ca).as_deref()), 1);
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.ok()?;
        send.write_all(&hello).await.ok()?;
        let _ = send.finish();
        recv.read_to_end(1 << 20).await.ok()
    };
    if let Ok(Some(answer)) = tokio::time::timeout(Duration::from_secs(10), exchange).await {
        match decode_response(&answer.into()) {
            Message::HelloAck(_) => return Ok(()),
            other => panic!("Hello answered {other:?}"),
        }
    }
    match tokio::time::timeout(Duration::from_secs(10), conn.closed()).await {
        Ok(quinn::ConnectionError::ApplicationClosed(close)) => Err((
            close.error_code.into_inner(),
            String::from_utf8_lossy(&close.reason).into_owned(),
        )),
        other => panic!("neither HelloAck nor an application close: {other:?}"),
    }
}

fn batch(len: usize) -> bytes::Bytes {
    let mut b = BatchBuilder::new(2 << 20);
    b.push(1_000, None, &vec![7u8; len], &[]).expect("push");
    b.finish().expect("finish")
}

async fn create_stream(conn: &quinn::Connection, name: &str) {
    let create = Message::from(CreateStream {
        name: StreamName::new(name).expect("name"),
        partition_count: 1,
        ack_mode: AckMode::Leader,
        settings: StreamSettings::default(),
    });
    let answer = request(conn, &create).await;
    assert!(
        matches!(answer, Message::CreateStreamResponse(_)),
        "{answer:?}"
    );
}

fn produce(stream: &str, batch: bytes::Bytes) -> Message {
    Message::Produce(Produce {
        stream: StreamName::new(stream).expect("name"),
        partition: PartitionId::new(0),
        batches: vec![batch],
    })
}

/// Opens `count` connections from `local` at once, each saying Hello: those accepted, and
/// how the others were closed.
async fn flood(
    count: usize,
    local: &'static str,
    addr: SocketAddr,
    ca: &Path,
) -> (Vec<quinn::Connection>, Vec<(u64, String)>) {
    let attempts: Vec<_> = (0..count)
        .map(|_| {
            let ca = ca.to_path_buf();
            tokio::spawn(async move {
                let conn = connect_from(local, addr, &ca).await;
                let answer = say_hello(&conn, &ca).await;
                (conn, answer)
            })
        })
        .collect();
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for attempt in attempts {
        match attempt.await.expect("a connection attempt") {
            (conn, Ok(())) => kept.push(conn),
            (_, Err(closed)) => refused.push(closed),
        }
    }
    (kept, refused)
}

/// Publishes one batch at a time on `conn` until `stop`; every publish must be acknowledged.
/// Returns the acknowledgements and the slowest one.
fn keep_publishing(
    conn: quinn::Connection,
    stream: &'static str,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut slowest = Duration::ZERO;
        let batch = batch(4096);
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            match request(&conn, &produce(stream, batch.clone())).await {
                Message::ProduceAck(ack) => assert!(ack.results[0].is_ok(), "{ack:?}"),
                other => panic!("a publish beside the flood was refused: {other:?}"),
            }
            slowest = slowest.max(started.elapsed());
            acked.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slowest
    })
}

async fn metrics_text(broker: &BrokerProcess) -> String {
    let addr = broker.profile.metrics.clone().expect("metrics address");
    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches("/metrics");
    http_get(addr, "/metrics").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_is_refused_by_name_while_a_publisher_keeps_publishing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "--max-connections",
        "12",
        "--max-connections-per-address",
        "8",
    ];
    let broker = BrokerProcess::start_with(dir.path(), "127.0.0.1:0", &args, &[]);
    let (addr, ca) = (broker.addr(), broker.ca().to_path_buf());
    let publisher = ready(addr, &ca).await;
    create_stream(&publisher, "steady").await;
    let (stop, acked) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let publishing = keep_publishing(publisher, "steady", stop.clone(), acked.clone());

    // 200 at once from 127.0.0.1, where the publisher is: 7 get in, then the per-address
    // limit.
    let flooding = Instant::now();
    let acked_before = acked.load(Ordering::Relaxed);
    let (mut kept, refused) = flood(200, "127.0.0.1", addr, &ca).await;
    assert_eq!(kept.len(), 7, "the publisher and 7 more from one address");
    assert_eq!(refused.len(), 193);
    for (code, reason) in &refused {
        assert_eq!(*code, u64::from(ErrorCode::TooManyConnections.as_u16()));
        assert!(
            reason.contains("--max-connections-per-address") && reason.contains("127.0.0.1"),
            "{reason}"
        );
    }
    // 100 at once from 127.0.0.2: 4 fill the broker's 12, then the broker-wide limit.
    let (more, refused_broker) = flood(100, "127.0.0.2", addr, &ca).await;
    let flooded = flooding.elapsed();
    let acked_during = acked.load(Ordering::Relaxed) - acked_before;
    assert!(acked_during > 0, "no publish acknowledged during the flood");
    kept.extend(more);
    assert_eq!(kept.len(), 11, "12 in all, the publisher included");
    assert_eq!(refused_broker.len(), 96);
    for (code, reason) in &refused_broker {
        assert_eq!(*code, u64::from(ErrorCode::TooManyConnections.as_u16()));
        assert!(
            reason.contains("limit of 12 client connections"),
            "{reason}"
        );
    }

    // The client library reports the refusal as retryable, with its code and reason.
    let config = floe_client::ClientConfig::from_profile(&broker.profile);
    let error = floe_client::Client::connect(config.clone())
        .await
        .expect_err("no room for one more");
    assert_eq!(error.code(), Some(ErrorCode::TooManyConnections), "{error}");
    assert!(error.is_retryable(), "{error}");
    eprintln!("the client library reports: {error}");

    let text = metrics_text(&broker).await;
    let by_address = metric(&text, "floe_connections_refused_total{reason=\"address\"}");
    let by_broker = metric(&text, "floe_connections_refused_total{reason=\"broker\"}");
    assert_eq!(
        (by_address, by_broker),
        (193.0, 97.0),
        "refusals counted by limit"
    );
    assert_eq!(metric(&text, "floe_connections "), 12.0);

    // Closing the flood frees the places: a new client gets in (polled, with a deadline).
    drop(kept);
    let deadline = Instant::now() + Duration::from_secs(10);
    let _client = loop {
        match floe_client::Client::connect(config.clone()).await {
            Ok(client) => break client,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.code(), Some(ErrorCode::TooManyConnections), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no place freed within 10 s: {e}"),
        }
    };

    stop.store(true, Ordering::Relaxed);
    let slowest = publishing.await.expect("the publisher never failed");
    let acked = acked.load(Ordering::Relaxed);
    eprintln!(
        "flood: 300 connections in {flooded:?}, 289 refused (193 per address, 96 \
         broker-wide), then 1 from the client library; the publisher had {acked_during} \
         publishes acknowledged during the flood, {acked} in all, the slowest in {slowest:?}"
    );
    assert!(acked > 0);
    assert!(
        slowest < Duration::from_secs(1),
        "slowest publish {slowest:?}"
    );
}

/// Opens a stream on `conn` and sends `bytes` on it without finishing it; the stream is
/// kept open by the caller.
async fn leave_open(
    conn: &quinn::Connection,
    bytes: &[u8],
) -> (quinn::SendStream, quinn::RecvStream) {
    let (mut send, recv) = conn.open_bi().await.expect("a stream");
    send.write_all(bytes).await.expect("send");
    (send, recv)
}

/// The header of a produce frame claiming `payload_len` bytes of payload.
fn claimed_produce_header(payload_len: u32) -> Vec<u8> {
    let mut header = encode(&produce("steady", batch(16)), 7)[..20].to_vec();
    header[16..20].copy_from_slice(&payload_len.to_le_bytes());
    header
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_payloads_and_open_streams_keep_broker_memory_bounded_and_others_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "--request-memory",
        "64MiB",
        "--request-wait",
        "1s",
        "--request-payload-timeout",
        "2s",
        "--hello-timeout",
        "3s",
    ];
    let broker = BrokerProcess::start_with(dir.path(), "127.0.0.1:0", &args, &[]);
    let (addr, ca) = (broker.addr(), broker.ca().to_path_buf());
    let publisher = ready(addr, &ca).await;
    create_stream(&publisher, "steady").await;
    for _ in 0..50 {
        let answer = request(&publisher, &produce("steady", batch(4096))).await;
        assert!(matches!(answer, Message::ProduceAck(_)), "{answer:?}");
    }
    let rss_before = broker.rss_bytes();
    let (stop, acked) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let publishing = keep_publishing(publisher, "steady", stop.clone(), acked.clone());

    // 16 authenticated connections, each with 250 streams: 200 claim a 16 MiB payload and
    // never send a byte of it, 50 send half a frame header and stay open. Claimed in all:
    // 16 × 200 × 16 MiB = 50 GiB.
    let claim = claimed_produce_header((16 << 20) - 20);
    let mut hostile = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..16 {
        let conn = ready(addr, &ca).await;
        for i in 0..250 {
            let bytes = if i < 200 { &claim[..] } else { &claim[..10] };
            streams.push(leave_open(&conn, bytes).await);
        }
        hostile.push(conn);
    }
    // 32 anonymous connections that never say Hello, each claiming 16 MiB payloads before
    // it: refused from the header, and closed at the Hello timeout.
    let mut anonymous = Vec::new();
    for _ in 0..32 {
        let conn = connect(addr, &ca).await;
        for _ in 0..8 {
            streams.push(leave_open(&conn, &claim).await);
        }
        anonymous.push(conn);
    }

    // Sample the broker's memory for 4 s, past the Hello timeout.
    let mut rss_max = 0;
    let sampling = Instant::now() + Duration::from_secs(4);
    while Instant::now() < sampling {
        rss_max = rss_max.max(broker.rss_bytes());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let growth = rss_max.saturating_sub(rss_before);
    stop.store(true, Ordering::Relaxed);
    let slowest = publishing.await.expect("the publisher never failed");
    let acked = acked.load(Ordering::Relaxed);
    eprintln!(
        "4,000 streams claiming 50 GiB and 800 open, 32 anonymous connections: broker RSS \
         {} MiB before, at most {} MiB during (+{} MiB, --request-memory 64 MiB); the \
         publisher had {acked} publishes acknowledged, the slowest in {slowest:?}",
        rss_before / MIB,
        rss_max / MIB,
        growth / MIB,
    );
    assert!(growth < 64 * MIB, "the broker grew by {} MiB", growth / MIB);
    assert!(acked >= 20, "only {acked} publishes in 4 s");
    assert!(
        slowest < Duration::from_secs(1),
        "slowest publish {slowest:?}"
    );

    // The anonymous connections were closed at the Hello timeout, by name.
    for conn in &anonymous {
        match tokio::time::timeout(Duration::from_secs(5), conn.closed()).await {
            Ok(quinn::ConnectionError::ApplicationClosed(close)) => {
                assert_eq!(
                    close.error_code.into_inner(),
                    u64::from(ErrorCode::HandshakeRequired.as_u16())
                );
            }
            other => panic!("an anonymous connection outlived its Hello timeout: {other:?}"),
        }
    }
    let text = metrics_text(&broker).await;
    assert_eq!(
        metric(&text, "floe_connections_refused_total{reason=\"hello\"}"),
        32.0
    );
    assert_eq!(metric(&text, "floe_request_bytes_in_flight "), 0.0);
    drop(streams);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_broker_wide_budget_are_throttled_by_name_then_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "--request-memory",
        "32MiB",
        "--request-wait",
        "1s",
        "--request-payload-timeout",
        "3s",
    ];
    let broker = BrokerProcess::start_with(dir.path(), "127.0.0.1:0", &args, &[]);
    let (addr, ca) = (broker.addr(), broker.ca().to_path_buf());
    let publisher = ready(addr, &ca).await;
    create_stream(&publisher, "steady").await;

    // Two connections each claim 16 MiB and send one byte of it: the broker-wide 32 MiB is
    // held until the payload timeout.
    let mut claim = claimed_produce_header((16 << 20) - 20);
    claim.push(0);
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let conn = ready(addr, &ca).await;
        stalled.push((leave_open(&conn, &claim).await, conn));
    }
    let text = async {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = metrics_text(&broker).await;
            if metric(&text, "floe_request_bytes_in_flight ") >= (2 * ((16 << 20) - 20)) as f64 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the claims never held the budget"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    text.await;

    // A publisher then waits the request wait, and is told to retry, by name.
    let started = Instant::now();
    match request(&publisher, &produce("steady", batch(4096))).await {
        Message::Error(e) => {
            assert_eq!(e.code, ErrorCode::Throttled);
            assert_eq!(e.code.retry_class(), floe_wire::frame::RetryClass::Retry);
            assert!(e.message.contains("--request-memory"), "{}", e.message);
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "answered after {waited:?}"
    );

    // The stalled claims are answered Throttled at the payload timeout, and their bytes go
    // back: the publisher's retry is served.
    for ((_, recv), _) in &mut stalled {
        let answer = tokio::time::timeout(Duration::from_secs(5), recv.read_to_end(1 << 20))
            .await
            .expect("answered within the payload timeout")
            .expect("an answer");
        match decode_response(&answer.into()) {
            Message::Error(e) => {
                assert_eq!(e.code, ErrorCode::Throttled);
                assert!(
                    e.message.contains("--request-payload-timeout"),
                    "{}",
                    e.message
                );
            }
            other => panic!("expected Throttled, got {other:?}"),
        }
    }
    let answer = request(&publisher, &produce("steady", batch(4096))).await;
    assert!(matches!(answer, Message::ProduceAck(_)), "{answer:?}");
    eprintln!("a publish behind 32 MiB of stalled claims was throttled after {waited:?}");
}

//! The operators' HTTP port of a real broker: liveness, readiness and metrics, as a load
//! balancer's health check and a Prometheus scrape see them.

mod common;

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over HTTP/1.1: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn a_standalone_broker_is_alive_and_ready_once_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = common::start_broker(dir.path()).await;
    let addr = broker.running.metrics_addr.expect("a metrics port");

    let (status, body) = get(addr, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!((status, body.trim()), (200, "ready"));
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("floe_connections"), "{body}");
    let build = format!(
        "floe_build_info{{version=\"{}\",commit=\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(body.contains(&build), "{body}");
    let (status, _) = get(addr, "/nothing-here").await;
    assert_eq!(status, 404);

    broker.running.shutdown().await.expect("shutdown");
}

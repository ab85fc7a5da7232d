//! Helpers for broker tests: an in-process broker with dev certificates and a raw QUIC client
//! that can send any bytes.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_broker::run::{self, Running};
use floe_broker::tls::{ALPN, DevCertificates};
use floe_wire::frame::{self, FrameLimits, Hello, Message, ProtocolVersion, RequestId};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The `floe-broker` binary the tests and benchmarks start: this build's, or the one
/// `FLOE_BENCH_BROKER_BIN` names (a benchmark comparing two builds of the broker in one run,
/// the client side unchanged).
pub fn broker_program() -> std::path::PathBuf {
    std::env::var_os("FLOE_BENCH_BROKER_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_floe-broker").into())
}

pub fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

pub struct TestBroker {
    pub running: Running,
    pub ca: PathBuf,
    pub data_dir: PathBuf,
}

/// Starts a broker in this process on an ephemeral port.
pub async fn start_broker(dir: &Path) -> TestBroker {
    install_crypto();
    let certs = DevCertificates::ensure(&dir.join("tls")).expect("certificates");
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let mut settings = run::Settings::new(dir.join("data"), listen, certs.server.clone());
    settings.metrics_listen = Some("127.0.0.1:0".parse().expect("addr"));
    // The mark the test command gives spawned brokers (`--disk-high-water` reads this
    // variable): an in-process broker too must not refuse publishes because the machine's
    // disk happens to be nearly full.
    if let Ok(mark) = std::env::var("FLOE_DISK_HIGH_WATER") {
        settings.disk_high_water = mark.parse().expect("FLOE_DISK_HIGH_WATER");
    }
    let running = run::start(settings).await.expect("broker starts");
    TestBroker {
        running,
        ca: certs.ca,
        data_dir: dir.join("data"),
    }
}

/// A QUIC connection to the broker, with nothing sent yet.
pub async fn connect(addr: SocketAddr, ca: &Path) -> quinn::Connection {
    connect_from("127.0.0.1", addr, ca).await
}

/// A QUIC connection to `addr` from a socket bound to `local` (another loopback address
/// counts as another client address), with nothing sent yet.
pub async fn connect_from(local: &str, addr: SocketAddr, ca: &Path) -> quinn::Connection {
    install_crypto();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca file") {
        roots.add(cert.expect("ca cert")).expect("add root");
    }
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let bind: SocketAddr = format!("{local}:0").parse().expect("local address");
    let mut endpoint = quinn::Endpoint::client(bind).expect("endpoint");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint
        .connect(addr, "localhost")
        .expect("connect")
        .await
        .expect("handshake")
}

/// Sends `bytes` on a new stream, finishes it and returns everything the broker answered.
pub async fn exchange_raw(conn: &quinn::Connection, bytes: &[u8]) -> Result<Bytes, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(bytes).await.map_err(|e| e.to_string())?;
    let _ = send.finish();
    let answer = tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(64 << 20))
        .await
        .map_err(|_| "no answer within 10 s".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(Bytes::from(answer))
}

/// Decodes exactly one response frame.
pub fn decode_response(bytes: &Bytes) -> Message {
    let limits = FrameLimits::FORMAT_MAX;
    let (frame, consumed) = frame::decode_frame(bytes, &limits)
        .expect("valid frame")
        .expect("whole frame");
    assert_eq!(consumed, bytes.len(), "trailing bytes after the response");
    frame.message(&limits).expect("valid message")
}

pub fn encode(message: &Message, request_id: u64) -> Bytes {
    let mut buf = BytesMut::new();
    message
        .encode(ProtocolVersion::V1, RequestId::new(request_id), &mut buf)
        .expect("encode");
    buf.freeze()
}

/// Sends a message and decodes the answer.
pub async fn request(conn: &quinn::Connection, message: &Message) -> Message {
    let answer = exchange_raw(conn, &encode(message, 1))
        .await
        .expect("exchange");
    decode_response(&answer)
}

pub fn hello() -> Message {
    hello_as(None)
}

/// A `Hello` presenting `token`.
pub fn hello_as(token: Option<&str>) -> Message {
    Message::Hello(Hello {
        min_version: 1,
        max_version: 1,
        client_name: "test".into(),
        auth_token: token.map(|t| floe_wire::frame::AuthToken::new(t.as_bytes().to_vec())),
    })
}

/// The administrator's token of the `floe-broker dev` whose CA is `ca` (`dev` keeps both in
/// its data directory: `tls/ca.pem`, `tokens/admin`), if there is one.
pub fn dev_admin_token(ca: &Path) -> Option<String> {
    let data = ca.parent()?.parent()?;
    std::fs::read_to_string(data.join("tokens").join("admin"))
        .ok()
        .map(|t| t.trim().to_owned())
}

/// A connection that has said Hello, as the administrator of a `floe-broker dev` broker.
pub async fn ready(addr: SocketAddr, ca: &Path) -> quinn::Connection {
    let conn = connect(addr, ca).await;
    let token = dev_admin_token(ca);
    match request(&conn, &hello_as(token.as_deref())).await {
        Message::HelloAck(_) => conn,
        other => panic!("expected HelloAck, got {other:?}"),
    }
}

/// A `floe-broker dev` process, killed and reaped on drop.
pub struct BrokerProcess {
    pub child: std::process::Child,
    pub data_dir: PathBuf,
    pub profile: floe_wire::ClientProfile,
    pub profile_path: PathBuf,
    pub log_path: PathBuf,
}

impl BrokerProcess {
    /// Starts `floe-broker dev` on ephemeral ports with its data under `dir`, and waits until
    /// it has written its client profile.
    pub fn start(dir: &Path) -> BrokerProcess {
        BrokerProcess::start_on(dir, "127.0.0.1:0")
    }

    /// Like [`BrokerProcess::start`], on a given QUIC address (to restart on the same port).
    pub fn start_on(dir: &Path, listen: &str) -> BrokerProcess {
        BrokerProcess::start_with(dir, listen, &[], &[])
    }

    /// Like [`BrokerProcess::start_on`], with more `dev` flags and environment variables.
    pub fn start_with(
        dir: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> BrokerProcess {
        use std::io::{BufRead, Write};
        std::fs::create_dir_all(dir).expect("broker directory");
        let profile_path = dir.join("profile.json");
        let _ = std::fs::remove_file(&profile_path);
        let data_dir = dir.join("data");
        let log_path = dir.join("broker.log");
        let mut child = std::process::Command::new(broker_program())
            .args(["dev", "--listen", listen, "--metrics-listen", "127.0.0.1:0"])
            .args(["--controlplane-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--profile")
            .arg(&profile_path)
            .args(args)
            // No read replicas unless a test asks (env overrides): they would take the
            // history reads most tests look at on the broker.
            .env("FLOE_DEV_READ_REPLICAS", "0")
            .env("FLOE_DEV_MAX_READ_REPLICAS", "0")
            .envs(env.iter().copied())
            // `FLOE_TEST_BROKER_LOG` overrides the broker's log filter (e.g. to debug a module).
            .env(
                "FLOE_LOG",
                std::env::var("FLOE_TEST_BROKER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn floe-broker");
        // Copy the broker's stderr to a log file and tell us when it announces its profile.
        let stderr = child.stderr.take().expect("stderr");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("log file");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = writeln!(log, "{line}");
                if line.contains("client profile") {
                    let _ = ready_tx.send(());
                }
            }
        });
        if ready_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "floe-broker did not come up: {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        let bytes = std::fs::read(&profile_path).expect("profile written");
        let profile = serde_json::from_slice(&bytes).expect("profile parses");
        BrokerProcess {
            child,
            data_dir,
            profile,
            profile_path,
            log_path,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.profile.endpoint.parse().expect("endpoint")
    }

    pub fn ca(&self) -> &Path {
        &self.profile.ca_cert
    }

    /// Resident memory of the broker process, from /proc.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .expect("VmRSS");
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("VmRSS value");
        kib * 1024
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The response to an empty-bodied request to an HTTP/1.1 server at `addr`.
pub async fn http_request(addr: &str, method: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.expect("request");
    let mut response = String::new();
    socket
        .read_to_string(&mut response)
        .await
        .expect("response");
    response
}

/// The body and headers of `GET path` from an HTTP/1.1 server at `addr`.
pub async fn http_get(addr: &str, path: &str) -> String {
    http_request(addr, "GET", path).await
}

/// Bytes of history a broker served from the tier, from its `/metrics`.
pub async fn tier_bytes(metrics_addr: &str) -> f64 {
    metric(
        &http_get(metrics_addr, "/metrics").await,
        "floe_fetch_tier_bytes_total",
    )
}

/// Producer batch size for tests that need a history spread over many sealed segments: above
/// their streams' 64–128 KiB segments, so each batch seals one, whatever the producer's
/// default batch is.
pub const SEGMENT_SPANNING_BATCH_BYTES: u32 = 256 * 1024;

/// A producer of [`SEGMENT_SPANNING_BATCH_BYTES`] batches, otherwise the defaults.
pub async fn segment_spanning_producer(
    client: &floe_client::Client,
    stream: &floe_client::StreamName,
) -> floe_client::Producer {
    let config = floe_client::ProducerConfig {
        max_batch_bytes: SEGMENT_SPANNING_BATCH_BYTES,
        ..floe_client::ProducerConfig::default()
    };
    floe_client::Producer::new(client, stream.clone(), config)
        .await
        .expect("producer")
}

/// The value of one series in a Prometheus text exposition (0 when absent).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).map(str::trim))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
pub mod cluster;
pub mod link;
pub mod moto;
pub mod port_block;
pub mod small_disk;
pub mod write_refusing_bucket;

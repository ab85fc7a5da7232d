//! The machine's own limits, measured beside the broker: sequential write + `fdatasync` and a
//! raw QUIC transfer over loopback with the broker's TLS and socket settings.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_broker::tls::{self, ALPN, CertificatePaths};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// MiB/s of `write` + `fdatasync` of `chunk` bytes at a time into a fresh file, `total` bytes,
/// the better of two passes. The file is deleted after each, so the second pass appends into
/// blocks the first one freed. On a thinly provisioned virtual disk a block's first write
/// costs far more than later ones (here 240–330 MiB/s against about 1,100 MiB/s), and a
/// broker's log soon appends into freed blocks too: the faster pass is the disk's limit.
pub fn fsync_bandwidth(dir: &Path, chunk: usize, total: u64) -> std::io::Result<f64> {
    let first = fsync_pass(dir, chunk, total)?;
    let second = fsync_pass(dir, chunk, total)?;
    Ok(first.max(second))
}

fn fsync_pass(dir: &Path, chunk: usize, total: u64) -> std::io::Result<f64> {
    let path = dir.join("raw-fsync.bin");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let buf = vec![0x5au8; chunk];
    let started = Instant::now();
    let mut written = 0u64;
    while written < total {
        file.write_all(&buf)?;
        file.sync_data()?;
        written += chunk as u64;
    }
    let elapsed = started.elapsed();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(mib_per_s(written, elapsed))
}

/// The whole machine's busy CPU time (user, system, interrupts; every process and kernel
/// thread, not steal), from `/proc/stat`. A phase's cost is the difference of two samples.
#[derive(Clone, Copy, Debug)]
pub struct MachineCpu {
    busy_ticks: u64,
}

impl MachineCpu {
    pub fn sample() -> std::io::Result<MachineCpu> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let line = stat
            .lines()
            .next()
            .filter(|l| l.starts_with("cpu "))
            .ok_or_else(|| std::io::Error::other("/proc/stat has no cpu line"))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal …
        let busy_ticks = [0, 1, 2, 5, 6]
            .iter()
            .map(|&i| fields.get(i).copied().unwrap_or(0))
            .sum();
        Ok(MachineCpu { busy_ticks })
    }

    /// CPU seconds the machine spent busy since `self` (the kernel counts in 1/100 s).
    pub fn seconds_since(self) -> f64 {
        let now = MachineCpu::sample().map_or(self.busy_ticks, |n| n.busy_ticks);
        now.saturating_sub(self.busy_ticks) as f64 / 100.0
    }
}

/// CPU seconds per GiB moved.
pub fn cpu_per_gib(cpu_seconds: f64, bytes: u64) -> f64 {
    cpu_seconds / (bytes as f64 / (1u64 << 30) as f64).max(1e-9)
}

pub fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64().max(1e-9)
}

/// MiB/s of one QUIC stream carrying `total` bytes from a client to a server on loopback,
/// with the broker's transport, TLS and 4 MiB socket buffers.
pub async fn quic_bandwidth(
    certs: &CertificatePaths,
    ca: &Path,
    total: u64,
) -> anyhow::Result<f64> {
    let transport = tls::transport_config(16, Duration::from_secs(30))?;
    let server_config = tls::server_config(certs, None, transport)?;
    let listen: SocketAddr = "127.0.0.1:0".parse()?;
    let server = floe_broker::quic::endpoint(listen, server_config, &[7u8; 32])?;
    let addr = server.local_addr()?;
    let sink = tokio::spawn(async move {
        let connection = server
            .accept()
            .await
            .ok_or_else(|| anyhow::anyhow!("no connection"))?
            .await?;
        let (mut send, mut recv) = connection.accept_bi().await?;
        let mut buf = vec![0u8; 1 << 20];
        let mut received = 0u64;
        while let Some(n) = recv.read(&mut buf).await? {
            received += n as u64;
        }
        send.write_all(&received.to_le_bytes()).await?;
        send.finish()?;
        connection.closed().await;
        anyhow::Ok(received)
    });

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let mut client_tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(client_tls)?;
    let mut client_config = quinn::ClientConfig::new(Arc::new(crypto));
    client_config.transport_config(Arc::new(tls::transport_config(
        16,
        Duration::from_secs(30),
    )?));
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    floe_broker::quic::set_socket_buffers(&socket);
    let runtime = quinn::default_runtime().ok_or_else(|| anyhow::anyhow!("no runtime"))?;
    let mut client = quinn::Endpoint::new(
        floe_client::datagrams::endpoint_config(quinn::EndpointConfig::default()),
        None,
        socket,
        runtime,
    )?;
    client.set_default_client_config(client_config);
    let connection = client.connect(addr, "localhost")?.await?;
    let (mut send, mut recv) = connection.open_bi().await?;
    let chunk = bytes::Bytes::from(vec![0xa5u8; 1 << 20]);
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        send.write_chunk(chunk.clone()).await?;
        sent += chunk.len() as u64;
    }
    send.finish()?;
    let mut ack = [0u8; 8];
    recv.read_exact(&mut ack).await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        u64::from_le_bytes(ack) == sent,
        "the server received a different byte count"
    );
    connection.close(0u32.into(), b"done");
    let _ = sink.await;
    Ok(mib_per_s(sent, elapsed))
}

//! The machine's own limits, measured in the same run as the benchmarks they bound:
//!
//! - 1 MiB `write` + `fdatasync` into a fresh file: the disk's durable bandwidth (the better
//!   of two passes: a thin virtual disk's first write to a block costs far more than later
//!   ones, and a log soon appends into freed blocks too);
//! - a 4 KiB append + `fdatasync`, one at a time: the latency of one durable write;
//! - a 1 KiB request and a 16-byte answer on a new bidirectional QUIC stream over loopback,
//!   one at a time (TLS 1.3, 4 MiB socket buffers; the shape of a Floe produce request).
//!
//! A durable acknowledgement over QUIC cannot beat the last two added up: `floor_us`.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use serde_json::json;

use crate::figures::{micros, new_histogram, percentiles_us};

#[derive(Args, Debug)]
pub struct Limits {
    /// Directory on the disk under test (the brokers' data directories' disk).
    #[arg(long)]
    dir: PathBuf,
    /// MiB written per bandwidth pass.
    #[arg(long, default_value_t = 256)]
    mib: u64,
    /// Durable writes and QUIC round trips timed, each.
    #[arg(long, default_value_t = 2000)]
    samples: u32,
    /// Print JSON (the only output).
    #[arg(long)]
    json: bool,
}

const ALPN: &[u8] = b"floe-bench-peers";

pub async fn run(args: Limits) -> Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    let fsync_mib_s = fsync_bandwidth(&args.dir, 1 << 20, args.mib << 20)?;
    let fsync = fsync_latency(&args.dir, 4096, args.samples)?;
    let quic = quic_round_trips(1024, args.samples).await?;
    let floor = fsync.value_at_quantile(0.5) + quic.value_at_quantile(0.5);
    let figures = json!({
        "fsync_1mib_mib_s": fsync_mib_s,
        "fdatasync_4kib_us": percentiles_us(&fsync),
        "quic_rtt_1kib_us": percentiles_us(&quic),
        "floor_us": floor,
    });
    #[allow(clippy::print_stdout)]
    {
        println!("{figures}");
    }
    Ok(())
}

fn fsync_bandwidth(dir: &Path, chunk: usize, total: u64) -> Result<f64> {
    let first = fsync_pass(dir, chunk, total)?;
    let second = fsync_pass(dir, chunk, total)?;
    Ok(first.max(second))
}

fn fsync_pass(dir: &Path, chunk: usize, total: u64) -> Result<f64> {
    let path = dir.join("limits-fsync.bin");
    let mut file = std::fs::File::create(&path).context("creating the fsync file")?;
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
    Ok(written as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64().max(1e-9))
}

/// Latency of `samples` appends of `size` bytes, each followed by `fdatasync`, µs.
fn fsync_latency(dir: &Path, size: usize, samples: u32) -> Result<Histogram<u64>> {
    let path = dir.join("limits-latency.bin");
    let mut file = std::fs::File::create(&path).context("creating the latency file")?;
    let buf = vec![0xa5u8; size];
    let mut latency = new_histogram()?;
    for _ in 0..samples {
        let started = Instant::now();
        file.write_all(&buf)?;
        file.sync_data()?;
        latency.saturating_record(micros(started.elapsed()));
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(latency)
}

/// Round trips of a `size`-byte request and a 16-byte answer, one stream each, µs.
async fn quic_round_trips(size: usize, samples: u32) -> Result<Histogram<u64>> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key.into())?;
    server_tls.alpn_protocols = vec![ALPN.to_vec()];
    let server_config =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(server_tls)?));
    let server = endpoint(Some(server_config))?;
    let address = server.local_addr()?;
    let echo = tokio::spawn(async move {
        let connection = server.accept().await.context("no connection")?.await?;
        while let Ok((mut send, mut recv)) = connection.accept_bi().await {
            recv.read_to_end(1 << 20).await?;
            send.write_all(&[0u8; 16]).await?;
            send.finish()?;
        }
        anyhow::Ok(())
    });

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut client = endpoint(None)?;
    client.set_default_client_config(quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(client_tls)?,
    )));
    let connection = client.connect(address, "localhost")?.await?;
    let request = vec![0x5au8; size];
    let mut latency = new_histogram()?;
    // A few round trips first, so that the congestion window and the path are warm.
    for sample in 0..samples + 100 {
        let started = Instant::now();
        let (mut send, mut recv) = connection.open_bi().await?;
        send.write_all(&request).await?;
        send.finish()?;
        let answer = recv.read_to_end(64).await?;
        let elapsed = started.elapsed();
        anyhow::ensure!(answer.len() == 16, "a short answer");
        if sample >= 100 {
            latency.saturating_record(micros(elapsed));
        }
    }
    connection.close(0u32.into(), b"done");
    client.wait_idle().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), echo).await;
    Ok(latency)
}

/// A loopback endpoint with 4 MiB socket buffers, as Floe's brokers and clients use.
fn endpoint(server: Option<quinn::ServerConfig>) -> Result<quinn::Endpoint> {
    let socket = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let reference = socket2::SockRef::from(&socket);
    reference.set_recv_buffer_size(4 << 20)?;
    reference.set_send_buffer_size(4 << 20)?;
    let runtime = quinn::default_runtime().context("no async runtime for QUIC")?;
    Ok(quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        socket,
        runtime,
    )?)
}

//! QUIC plumbing shared by the client port, the peer port and read replicas: the endpoint and
//! its socket, the stateless-reset key, the accept loop, and reading a frame's payload. No
//! protocol here: what a stream carries is its server's business.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use floe_wire::BufferPool;
use tokio::sync::watch;

/// Creates the QUIC endpoint with socket buffers large enough not to drop packets at speed.
///
/// `reset_key` signs stateless resets. Kept across restarts (see [`load_reset_key`]), it lets
/// a restarted broker tell clients at once that their old connection is gone, instead of
/// leaving them to wait for the idle timeout.
pub fn endpoint(
    listen: SocketAddr,
    config: quinn::ServerConfig,
    reset_key: &[u8],
) -> Result<quinn::Endpoint> {
    let socket = std::net::UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
    set_socket_buffers(&socket);
    let runtime = quinn::default_runtime().context("no async runtime")?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let endpoint_config =
        floe_client::datagrams::endpoint_config(quinn::EndpointConfig::new(Arc::new(key)));
    quinn::Endpoint::new(endpoint_config, Some(config), socket, runtime)
        .context("creating the QUIC endpoint")
}

/// The stateless-reset key in `data_dir/reset-key`, created (32 random bytes, mode 0600) when
/// missing.
pub fn load_reset_key(data_dir: &Path) -> Result<Vec<u8>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("reset-key");
    match std::fs::read(&path) {
        Ok(key) if key.len() == 32 => return Ok(key),
        Ok(key) => anyhow::bail!("{} holds {} bytes, not 32", path.display(), key.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let mut key = vec![0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| anyhow::anyhow!("no system randomness"))?;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(&key)?;
    file.sync_all()?;
    Ok(key)
}

/// Asks for 4 MiB socket buffers; the kernel may grant less (net.core.*mem_max).
pub fn set_socket_buffers(socket: &std::net::UdpSocket) {
    let socket = socket2::SockRef::from(socket);
    for result in [
        socket.set_recv_buffer_size(4 << 20),
        socket.set_send_buffer_size(4 << 20),
    ] {
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not enlarge the UDP socket buffers");
        }
    }
}

/// Hands every connection `endpoint` accepts to `serve` on a task of its own, until
/// `shutdown` turns true; then closes the endpoint.
pub(crate) async fn accept<F, Fut>(
    endpoint: quinn::Endpoint,
    mut shutdown: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(quinn::Connection) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let serve = serve.clone();
                // The handshake runs on the connection's own task, never in this loop.
                tokio::spawn(async move {
                    match incoming.await {
                        Ok(connection) => serve(connection).await,
                        Err(e) => tracing::debug!(error = %e, "handshake failed"),
                    }
                });
            }
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => break,
        }
    }
    endpoint.close(0u32.into(), b"shutting down");
}

/// Payload buffers, shared by every connection on the client and peer ports: at most 16
/// allocations of at most 2 MiB each are kept (32 MiB). A larger payload gets a buffer of
/// its own.
static BUFFERS: BufferPool = BufferPool::new(16, 2 << 20);

/// The next `len` bytes of `recv`: a frame's payload. Copied once out of QUIC's chunks into
/// a reused buffer (never zero-filled first, and free of page faults once the pool is warm),
/// or handed over as is when one chunk holds it all.
pub(crate) async fn read_payload(recv: &mut quinn::RecvStream, len: usize) -> Result<Bytes> {
    let mut payload = None;
    let mut filled = 0;
    while filled < len {
        let Some(chunk) = recv.read_chunk(len - filled, true).await? else {
            anyhow::bail!("the stream ended {filled} bytes into a {len}-byte payload");
        };
        if chunk.bytes.len() == len {
            return Ok(chunk.bytes);
        }
        let payload = payload.get_or_insert_with(|| BUFFERS.take(len));
        payload.extend_from_slice(&chunk.bytes);
        filled = payload.len();
    }
    Ok(payload.map(bytes::BytesMut::freeze).unwrap_or_default())
}

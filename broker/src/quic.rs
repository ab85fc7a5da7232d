//! QUIC plumbing shared by the client port, the peer port and read replicas: the endpoint and
//! its socket, the stateless-reset key, the accept loop, and reading a frame's payload. No
//! protocol here: what a stream carries is its server's business.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use floe_wire::BufferPool;
use tokio::sync::watch;

/// Why an endpoint could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("cannot bind {listen}")]
    Bind {
        listen: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("no async runtime to drive QUIC")]
    NoRuntime,
    #[error("cannot create the QUIC endpoint")]
    Create(#[source] std::io::Error),
    #[error("cannot {op} the stateless-reset key {path}")]
    ResetKey {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the stateless-reset key {path} holds {len} bytes, not 32")]
    ResetKeyLength {
        path: std::path::PathBuf,
        len: usize,
    },
    #[error("no system randomness for the stateless-reset key")]
    NoRandomness,
}

/// Why a frame's payload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error(transparent)]
    Read(#[from] quinn::ReadError),
    #[error("the stream ended {filled} bytes into a {len}-byte payload")]
    EndedEarly { filled: usize, len: usize },
}

/// Creates the QUIC endpoint with socket buffers large enough not to drop packets at speed.
///
/// `reset_key` signs stateless resets. Kept across restarts (see [`load_reset_key`]), it lets
/// a restarted broker tell clients at once that their old connection is gone, instead of
/// leaving them to wait for the idle timeout.
pub fn endpoint(
    listen: SocketAddr,
    config: quinn::ServerConfig,
    reset_key: &[u8],
) -> Result<quinn::Endpoint, QuicError> {
    let socket =
        std::net::UdpSocket::bind(listen).map_err(|source| QuicError::Bind { listen, source })?;
    set_socket_buffers(&socket);
    let runtime = quinn::default_runtime().ok_or(QuicError::NoRuntime)?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let endpoint_config =
        floe_client::datagrams::endpoint_config(quinn::EndpointConfig::new(Arc::new(key)));
    quinn::Endpoint::new(endpoint_config, Some(config), socket, runtime).map_err(QuicError::Create)
}

/// The stateless-reset key in `data_dir/reset-key`, created (32 random bytes, mode 0600) when
/// missing.
pub fn load_reset_key(data_dir: &Path) -> Result<Vec<u8>, QuicError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("reset-key");
    let failed = |op| {
        let path = path.clone();
        move |source| QuicError::ResetKey { op, path, source }
    };
    match std::fs::read(&path) {
        Ok(key) if key.len() == 32 => return Ok(key),
        Ok(key) => {
            return Err(QuicError::ResetKeyLength {
                path,
                len: key.len(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed("read")(e)),
    }
    let mut key = vec![0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| QuicError::NoRandomness)?;
    crate::state_file::create_dir_all(data_dir).map_err(failed("create the directory of"))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(failed("create"))?;
    file.write_all(&key).map_err(failed("write"))?;
    file.sync_all().map_err(failed("sync"))?;
    crate::state_file::sync_dir(data_dir).map_err(failed("sync the directory of"))?;
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
pub(crate) async fn read_payload(
    recv: &mut quinn::RecvStream,
    len: usize,
) -> Result<Bytes, PayloadError> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let first = first_chunk(recv, len).await?;
    read_rest(first, recv, len).await
}

/// The first bytes of a `len`-byte payload (`len` > 0), as soon as any arrive.
pub(crate) async fn first_chunk(
    recv: &mut quinn::RecvStream,
    len: usize,
) -> Result<Bytes, PayloadError> {
    match recv.read_chunk(len, true).await? {
        Some(chunk) => Ok(chunk.bytes),
        None => Err(PayloadError::EndedEarly { filled: 0, len }),
    }
}

/// The rest of a `len`-byte payload whose first bytes are `first`; see [`read_payload`].
pub(crate) async fn read_rest(
    first: Bytes,
    recv: &mut quinn::RecvStream,
    len: usize,
) -> Result<Bytes, PayloadError> {
    if first.len() >= len {
        return Ok(first);
    }
    let mut payload = BUFFERS.take(len);
    payload.extend_from_slice(&first);
    while payload.len() < len {
        let filled = payload.len();
        let Some(chunk) = recv.read_chunk(len - filled, true).await? else {
            return Err(PayloadError::EndedEarly { filled, len });
        };
        payload.extend_from_slice(&chunk.bytes);
    }
    Ok(payload.freeze())
}

/// Why a client port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ClientPortError {
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Quic(#[from] QuicError),
    #[error("cannot read the client port's bound address")]
    LocalAddr(#[source] std::io::Error),
    #[error("the advertised address `{address}` is not host:port")]
    Advertised {
        address: String,
        #[source]
        source: floe_wire::EndpointError,
    },
}

/// The port clients connect to (a broker's or a read replica's): its endpoint, the address
/// it is bound to, the address advertised to clients, and the stateless-reset key it signs
/// with (kept in the data directory, see [`load_reset_key`]).
pub struct ClientPort {
    pub endpoint: quinn::Endpoint,
    pub local_addr: SocketAddr,
    pub advertised: floe_wire::Endpoint,
    pub reset_key: Vec<u8>,
}

impl std::fmt::Debug for ClientPort {
    /// Without the reset key, a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPort")
            .field("local_addr", &self.local_addr)
            .field("advertised", &self.advertised)
            .finish_non_exhaustive()
    }
}

impl ClientPort {
    /// Binds `listen` with the server certificate in `certificates` (and clients'
    /// certificates signed by `client_ca` accepted), allowing
    /// `streams_per_connection` concurrent requests per connection. `advertised` is the
    /// address clients are told to use; the bound address when `None`.
    pub fn bind(
        listen: SocketAddr,
        certificates: &crate::tls::CertificatePaths,
        client_ca: Option<&Path>,
        streams_per_connection: u32,
        data_dir: &Path,
        advertised: Option<&str>,
    ) -> Result<ClientPort, ClientPortError> {
        let mut transport = crate::tls::transport_config(
            streams_per_connection,
            std::time::Duration::from_secs(30),
        )?;
        // Raised to the full window once the connection's `Hello` is accepted.
        transport.receive_window(crate::tls::PRE_HELLO_RECEIVE_WINDOW.into());
        let config = crate::tls::server_config(certificates, client_ca, transport)?;
        let reset_key = load_reset_key(data_dir)?;
        let endpoint = endpoint(listen, config, &reset_key)?;
        let local_addr = endpoint.local_addr().map_err(ClientPortError::LocalAddr)?;
        let address = advertised.map_or_else(|| local_addr.to_string(), str::to_owned);
        let advertised = floe_wire::Endpoint::new(address.clone())
            .map_err(|source| ClientPortError::Advertised { address, source })?;
        Ok(ClientPort {
            endpoint,
            local_addr,
            advertised,
            reset_key,
        })
    }
}

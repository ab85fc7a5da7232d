//! Establishing a session: the QUIC endpoint with its TLS trust, the handshake, and the
//! `Hello`/`HelloAck` exchange that fixes the protocol version and the connection's limits.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floe_wire::frame::{
    AuthToken, ConnectionLimits, FrameLimits, Hello, Message, ProtocolVersion, RequestId,
};
use floe_wire::{BrokerId, frame};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::exchange;
use crate::config::ClientConfig;
use crate::error::{ConfigError, ConnectFailure, Error};

/// What a client reads before the broker has announced its limits: a `HelloAck` or an
/// `Error` is a few dozen bytes.
const PRE_HANDSHAKE_LIMITS: FrameLimits = FrameLimits {
    max_frame_bytes: 64 * 1024,
    max_batch_bytes: floe_wire::batch::HEADER_LEN as u32,
    max_list_entries: 16,
};

/// UDP socket buffers: quinn drops packets on loopback at speed with the kernel defaults.
const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// One established connection and what the broker announced on it.
#[derive(Debug)]
pub(crate) struct Session {
    pub connection: quinn::Connection,
    pub version: ProtocolVersion,
    pub limits: ConnectionLimits,
    pub broker_id: BrokerId,
}

impl Session {
    pub fn is_open(&self) -> bool {
        self.connection.close_reason().is_none()
    }
}

/// The client's QUIC endpoint and the TLS configuration it dials with.
#[derive(Debug)]
pub(crate) struct Transport {
    pub endpoint: quinn::Endpoint,
    quic: quinn::ClientConfig,
    ipv6: bool,
}

impl Transport {
    /// A client endpoint of the address family of `remote`, trusting only the configured CA.
    pub fn new(config: &ClientConfig, remote: SocketAddr) -> Result<Transport, Error> {
        let quic = quic_config(
            &config.ca_cert,
            config.client_certificate.as_ref(),
            config.idle_timeout,
        )?;
        let local: SocketAddr = if remote.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let connect_error = |reason| Error::Connect {
            endpoint: config.endpoint.clone(),
            reason,
        };
        let socket = UdpSocket::bind(local)
            .map_err(|e| connect_error(ConnectFailure::Socket(Arc::new(e))))?;
        enlarge_socket_buffers(&socket);
        let runtime = quinn::default_runtime().ok_or_else(|| {
            connect_error(ConnectFailure::Socket(Arc::new(std::io::Error::other(
                "no async runtime: call from within tokio",
            ))))
        })?;
        let endpoint = quinn::Endpoint::new(
            crate::datagrams::endpoint_config(quinn::EndpointConfig::default()),
            None,
            socket,
            runtime,
        )
        .map_err(|e| connect_error(ConnectFailure::Socket(Arc::new(e))))?;
        Ok(Transport {
            endpoint,
            quic,
            ipv6: remote.is_ipv6(),
        })
    }

    /// Resolves the endpoint, dials it and says `Hello`, all within the connect timeout.
    pub async fn establish(
        &self,
        config: &ClientConfig,
        hello_id: RequestId,
    ) -> Result<Session, Error> {
        let connect_error = |reason| Error::Connect {
            endpoint: config.endpoint.clone(),
            reason,
        };
        let attempt = async {
            let addresses = resolve(&config.endpoint).await?;
            let remote = addresses
                .iter()
                .find(|a| a.is_ipv6() == self.ipv6)
                .or(addresses.first())
                .copied()
                .ok_or(ConnectFailure::NoAddress)?;
            let connecting =
                self.endpoint
                    .connect_with(self.quic.clone(), remote, &config.server_name)?;
            let connection = connecting.await?;
            hello(connection, config, hello_id).await
        };
        match tokio::time::timeout(config.connect_timeout, attempt).await {
            Ok(result) => result.map_err(connect_error),
            Err(_) => Err(connect_error(ConnectFailure::Timeout(
                config.connect_timeout,
            ))),
        }
    }
}

/// Every address `host:port` resolves to.
pub(crate) async fn resolve(endpoint: &str) -> Result<Vec<SocketAddr>, ConnectFailure> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host(endpoint)
        .await
        .map_err(|e| ConnectFailure::Resolve(Arc::new(e)))?
        .collect();
    if addresses.is_empty() {
        return Err(ConnectFailure::NoAddress);
    }
    Ok(addresses)
}

async fn hello(
    connection: quinn::Connection,
    config: &ClientConfig,
    id: RequestId,
) -> Result<Session, ConnectFailure> {
    let request = Message::Hello(Hello {
        min_version: ProtocolVersion::OLDEST.as_u8(),
        max_version: ProtocolVersion::CURRENT.as_u8(),
        client_name: config.client_name.clone(),
        auth_token: config
            .token
            .as_ref()
            .map(|token| AuthToken::new(token.expose().as_bytes().to_vec())),
    });
    let streams = connection.open_bi().await.map_err(refused_at_accept)?;
    let answer = exchange::run(
        streams,
        &request,
        ProtocolVersion::OLDEST,
        id,
        &PRE_HANDSHAKE_LIMITS,
    )
    .await;
    match answer {
        Ok(Message::HelloAck(ack)) => Ok(Session {
            connection,
            version: ack.version,
            limits: ack.limits,
            broker_id: ack.broker_id,
        }),
        Ok(_) => Err(ConnectFailure::Hello(Box::new(Error::Protocol(
            crate::error::ProtocolViolation::UnexpectedResponse {
                request: "Hello",
                found: "another message",
            },
        )))),
        Err(Error::Broker { code, message, .. }) => {
            connection.close(0u32.into(), b"hello refused");
            Err(ConnectFailure::HelloRefused { code, message })
        }
        Err(Error::ConnectionLost(lost)) => Err(refused_at_accept(lost)),
        Err(other) => Err(ConnectFailure::Hello(Box::new(other))),
    }
}

/// A connection the broker closed with one of Floe's error codes (`TooManyConnections`
/// when it holds its connection limit) is a refusal naming that code and the reason the
/// broker gave; any other loss stays what it was.
fn refused_at_accept(lost: quinn::ConnectionError) -> ConnectFailure {
    if let quinn::ConnectionError::ApplicationClosed(close) = &lost
        && let Ok(value) = u16::try_from(close.error_code.into_inner())
        && let Some(code) = floe_wire::frame::ErrorCode::from_u16(value)
    {
        return ConnectFailure::HelloRefused {
            code,
            message: String::from_utf8_lossy(&close.reason).into_owned(),
        };
    }
    ConnectFailure::Handshake(lost)
}

/// QUIC client settings: TLS 1.3 trusting only `ca_cert`, presenting `certificate` when
/// given (mutual TLS), ALPN `floe/1`, keep-alives so an idle connection outlives the
/// broker's idle timeout, and windows wide enough for a full-size fetch response in flight.
fn quic_config(
    ca_cert: &Path,
    certificate: Option<&crate::config::ClientCertificate>,
    idle_timeout: Duration,
) -> Result<quinn::ClientConfig, ConfigError> {
    let pem = std::fs::read(ca_cert).map_err(|source| ConfigError::Read {
        path: ca_cert.to_path_buf(),
        source: Arc::new(source),
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| ConfigError::Invalid {
            field: "ca_cert",
            reason: format!("{}: {e}", ca_cert.display()),
        })?;
        roots.add(cert).map_err(|source| ConfigError::Certificate {
            path: ca_cert.to_path_buf(),
            source,
        })?;
    }
    if roots.is_empty() {
        return Err(ConfigError::NoCertificate {
            path: ca_cert.to_path_buf(),
        });
    }
    // An explicit provider: the library works whether or not the program installed one.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ConfigError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let mut tls = match certificate {
        None => builder.with_no_client_auth(),
        Some(certificate) => {
            let (chain, key) = certificate.load()?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ConfigError::Invalid {
                    field: "client_certificate",
                    reason: format!(
                        "{} and {}: {e}",
                        certificate.cert.display(),
                        certificate.key.display()
                    ),
                })?
        }
    };
    tls.alpn_protocols = vec![frame::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| ConfigError::Tls(e.to_string()))?;
    let mut quic = quinn::ClientConfig::new(Arc::new(crypto));
    quic.transport_config(Arc::new(transport_config(idle_timeout)?));
    Ok(quic)
}

fn transport_config(idle_timeout: Duration) -> Result<quinn::TransportConfig, ConfigError> {
    let idle = quinn::IdleTimeout::try_from(idle_timeout).map_err(|_| ConfigError::Invalid {
        field: "idle_timeout",
        reason: format!("{idle_timeout:?} is too long"),
    })?;
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_uni_streams(0u32.into())
        .stream_receive_window((16u32 * 1024 * 1024).into())
        .receive_window((64u32 * 1024 * 1024).into())
        .send_window(64 * 1024 * 1024)
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(idle_timeout / 4));
    crate::datagrams::discover_path_mtu(&mut transport);
    Ok(transport)
}

fn enlarge_socket_buffers(socket: &UdpSocket) {
    let state = match quinn::udp::UdpSocketState::new(socket.into()) {
        Ok(state) => state,
        Err(e) => {
            tracing::warn!(error = %e, "cannot inspect the UDP socket");
            return;
        }
    };
    for result in [
        state.set_recv_buffer_size(socket.into(), SOCKET_BUFFER_BYTES),
        state.set_send_buffer_size(socket.into(), SOCKET_BUFFER_BYTES),
    ] {
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not enlarge the UDP socket buffers");
        }
    }
}

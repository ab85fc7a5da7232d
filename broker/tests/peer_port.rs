//! The peer port takes only brokers of its cluster, each as the broker its certificate names:
//! mutual TLS against the cluster's CA, and the broker id in the certificate
//! (`floe:broker:<id>`) checked against the one a peer claims or is dialed as.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use common::cluster::{Cluster, PeerCertificates, Timing};
use common::install_crypto;
use floe_broker::peer_identity::{IDENTITY_REFUSED, MismatchCounter, MismatchReason};
use floe_broker::tls::{
    CertificatePaths, ClusterCertificates, PEER_ALPN, peer_client_config, peer_credentials,
    peer_server_config,
};
use floe_client::{Client, Producer, ProducerConfig, ProducerRecord, StreamName};
use floe_wire::frame::{Hello, Message, ProtocolVersion, RequestId};
use floe_wire::{BrokerId, PartitionId};

/// A mismatch counter that remembers what it counted.
fn recorder() -> (MismatchCounter, Arc<Mutex<Vec<MismatchReason>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let counted = seen.clone();
    let counter: MismatchCounter = Arc::new(move |reason| {
        counted.lock().expect("lock").push(reason);
    });
    (counter, seen)
}

/// Connects with `client` to `server` as `name` and writes on a stream; whether the server
/// accepted the connection.
async fn connects(server: &quinn::Endpoint, client: quinn::ClientConfig, name: &str) -> bool {
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    endpoint.set_default_client_config(client);
    let addr = server.local_addr().expect("addr");
    let accepted = async {
        let incoming = server.accept().await?;
        incoming.await.ok()
    };
    let connecting = async {
        let connection = endpoint.connect(addr, name).ok()?.await.ok()?;
        let mut stream = connection.open_uni().await.ok()?;
        stream.write_all(b"x").await.ok()?;
        Some(connection)
    };
    let (accepted, _connected) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(accepted, connecting)
    })
    .await
    .unwrap_or((None, None));
    accepted.is_some()
}

fn peer(certs: &ClusterCertificates, id: u32) -> CertificatePaths {
    certs
        .peer_certificate(BrokerId::new(id))
        .expect("peer certificate")
}

#[tokio::test]
async fn only_certificates_of_the_cluster_ca_get_in() {
    install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = ClusterCertificates::ensure(&dir.path().join("cluster")).expect("certificates");
    let stranger = ClusterCertificates::ensure(&dir.path().join("stranger")).expect("certificates");
    let ca = &cluster.files.ca;
    let server_config = peer_server_config(
        peer_credentials(&peer(&cluster, 1)).expect("credentials"),
        ca,
    )
    .expect("server config");
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().expect("addr"))
        .expect("server");
    let (counter, _) = recorder();

    // A broker of the cluster.
    let member = peer_client_config(
        peer_credentials(&peer(&cluster, 2)).expect("credentials"),
        ca,
        counter.clone(),
    )
    .expect("client config");
    assert!(
        connects(&server, member, "floe-broker-1").await,
        "a cluster member was refused"
    );

    // A certificate from another CA, trusting the cluster's: refused by the server.
    let impostor = peer_client_config(
        peer_credentials(&peer(&stranger, 2)).expect("credentials"),
        ca,
        counter,
    )
    .expect("client config");
    assert!(
        !connects(&server, impostor, "floe-broker-1").await,
        "a foreign certificate got in"
    );

    // No client certificate at all.
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("cert")).expect("root");
    }
    let mut anonymous = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    anonymous.alpn_protocols = vec![PEER_ALPN.to_vec()];
    let anonymous = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(anonymous).expect("quic tls"),
    ));
    assert!(
        !connects(&server, anonymous, "localhost").await,
        "a client without a certificate got in"
    );
}

#[tokio::test]
async fn a_dialed_peer_must_present_the_certificate_of_the_broker_dialed() {
    install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = ClusterCertificates::ensure(&dir.path().join("cluster")).expect("certificates");
    let ca = &cluster.files.ca;
    // Broker 2 listens where broker 1 is expected (an address taken over, a stale one).
    let server_config = peer_server_config(
        peer_credentials(&peer(&cluster, 2)).expect("credentials"),
        ca,
    )
    .expect("server config");
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().expect("addr"))
        .expect("server");
    let (counter, seen) = recorder();
    let client = peer_client_config(
        peer_credentials(&peer(&cluster, 3)).expect("credentials"),
        ca,
        counter,
    )
    .expect("client config");

    assert!(
        !connects(&server, client.clone(), "floe-broker-1").await,
        "a peer presenting broker 2's certificate passed for broker 1"
    );
    assert_eq!(*seen.lock().expect("lock"), vec![MismatchReason::Dialed]);
    assert!(
        connects(&server, client, "floe-broker-2").await,
        "broker 2 was refused as itself"
    );
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

/// Publishes `count` records to `stream`'s partition 0 through `client`; every one must be
/// acknowledged (the stream acknowledges on a quorum).
async fn publish_all(client: &Client, stream: &str, label: &str, count: usize) {
    let stream = StreamName::new(stream).expect("name");
    let config = ProducerConfig {
        delivery_timeout: Duration::from_secs(10),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, stream, config)
        .await
        .expect("producer");
    let mut pending = Vec::new();
    for i in 0..count {
        let record =
            ProducerRecord::new(format!("{label}-{i}")).with_partition(PartitionId::new(0));
        pending.push(producer.send(record).await.expect("send"));
    }
    for delivery in pending {
        delivery.await.expect("acknowledged on a quorum");
    }
}

/// Waits until the leader reports every follower of `stream` caught up with `end` records.
async fn wait_replicated(cluster: &Cluster, stream: &str, end: u64) {
    cluster
        .wait_for("every follower caught up", async |c: &Cluster| {
            let partition = c.partition(stream, 0).await?;
            let followers = partition.replicas.len() - 1;
            let caught_up = partition.high_watermark? >= end
                && partition.replica_lag.len() == followers
                && partition.replica_lag.iter().all(|lag| lag.records == 0);
            caught_up.then_some(())
        })
        .await;
}

/// The client side of a peer connection as a broker sets it up, presenting `certificate`.
fn as_broker(cluster: &Cluster, certificate: &CertificatePaths) -> quinn::ClientConfig {
    let (counter, _) = recorder();
    peer_client_config(
        peer_credentials(certificate).expect("credentials"),
        &cluster.certificates.files.ca,
        counter,
    )
    .expect("client config")
}

/// Trusts any server: the side of a test that connects to a broker to misbehave.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &rustls::pki_types::CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client presenting any certificate and key, e.g. one that names no broker.
fn presenting(certificate: &CertificatePaths) -> quinn::ClientConfig {
    let (chain, key) = floe_broker::tls::load(certificate).expect("certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_client_auth_cert(chain, key)
        .expect("client certificate");
    config.alpn_protocols = vec![PEER_ALPN.to_vec()];
    quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(config).expect("quic tls"),
    ))
}

/// Opens a peer connection to process `target`'s peer port with `client`, and sends a
/// stream whose `Hello` claims to be broker `claimed`. The close code the broker answers
/// with, if it closes within the deadline.
async fn claim(
    cluster: &Cluster,
    target: usize,
    client: quinn::ClientConfig,
    claimed: u32,
) -> Option<u64> {
    let target_id = cluster.brokers[target].broker_id().expect("registered");
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    endpoint.set_default_client_config(client);
    let addr = format!("127.0.0.1:{}", cluster.peer_port(target))
        .parse()
        .expect("addr");
    let connection = endpoint
        .connect(addr, &format!("floe-broker-{}", target_id.get()))
        .expect("connect")
        .await
        .expect("the TLS handshake (the certificate is from the cluster's CA)");
    let hello = Message::Hello(Hello {
        min_version: 1,
        max_version: 1,
        client_name: format!("floe-peer {claimed}"),
        auth_token: None,
    });
    let mut frame = BytesMut::new();
    hello
        .encode(ProtocolVersion::V1, RequestId::new(0), &mut frame)
        .expect("encode");
    // The broker may close the connection before the stream is open or written.
    if let Ok(mut stream) = connection.open_uni().await {
        let _ = stream.write_all(&frame).await;
    }
    let closed = tokio::time::timeout(Duration::from_secs(10), connection.closed()).await;
    match closed {
        Ok(quinn::ConnectionError::ApplicationClosed(close)) => Some(close.error_code.into()),
        _ => None,
    }
}

async fn mismatches(cluster: &Cluster, i: usize, reason: &str) -> f64 {
    let text = common::http_get(&cluster.metrics_addr(i), "/metrics").await;
    common::metric(
        &text,
        &format!("floe_peer_identity_mismatches_total{{reason=\"{reason}\"}}"),
    )
}

#[tokio::test]
async fn a_peer_with_broker_2s_certificate_claiming_broker_1_is_refused() {
    let cluster = Cluster::start(3, Timing::default()).await;
    let stream = "identities";
    let (leader, _) = cluster.create_replicated(stream).await;
    // The brokers' certificates, issued by the controlplane, let them replicate.
    let client = cluster.client(leader).await;
    publish_all(&client, stream, "before", 20).await;
    wait_replicated(&cluster, stream, 20).await;

    // Broker 2's certificate (from the cluster's CA, as if its key were stolen), presented to
    // broker 3 by someone claiming to be broker 1.
    let target = cluster.index_of(BrokerId::new(3));
    let stolen = peer(&cluster.certificates, 2);
    assert_eq!(
        claim(&cluster, target, as_broker(&cluster, &stolen), 1).await,
        Some(u64::from(IDENTITY_REFUSED)),
        "the impostor's connection was not closed\n{}",
        cluster.diagnostics()
    );
    assert_eq!(mismatches(&cluster, target, "claim").await, 1.0);

    // A certificate naming no broker (a shared one, like the client port's) gets nowhere.
    assert_eq!(
        claim(
            &cluster,
            target,
            presenting(&cluster.certificates.files.server),
            1
        )
        .await,
        Some(u64::from(IDENTITY_REFUSED))
    );
    assert_eq!(mismatches(&cluster, target, "no_identity").await, 1.0);

    // The real brokers still replicate.
    publish_all(&client, stream, "after", 20).await;
    wait_replicated(&cluster, stream, 40).await;
    assert_eq!(mismatches(&cluster, target, "claim").await, 1.0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn brokers_with_certificates_of_their_own_register_as_named_and_replicate() {
    let cluster =
        Cluster::start_with_peer_certificates(3, Timing::default(), PeerCertificates::Static).await;
    for (i, broker) in cluster.brokers.iter().enumerate() {
        let named = BrokerId::new(u32::try_from(i + 1).expect("id"));
        assert_eq!(broker.broker_id(), Some(named), "process {i}");
    }
    let stream = "own-certificates";
    let (leader, _) = cluster.create_replicated(stream).await;
    let client = cluster.client(leader).await;
    publish_all(&client, stream, "r", 20).await;
    wait_replicated(&cluster, stream, 20).await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_broker_given_another_brokers_certificate_refuses_to_start() {
    let mut cluster =
        Cluster::start_with_peer_certificates(2, Timing::default(), PeerCertificates::Static).await;
    // Process 0 is broker 1 (its data directory says so); give it broker 2's certificate.
    let other = peer(&cluster.certificates, 2);
    cluster.restart_with_peer_certificate(0, other);
    cluster
        .wait_for("broker 1 to exit", async |c: &Cluster| {
            (c.brokers[0].state() == "exited").then_some(())
        })
        .await;
    let log = cluster.brokers[0].log();
    assert!(
        log.contains("the peer certificate names broker 2, but this data directory is broker 1's"),
        "{log}"
    );
    cluster.shutdown().await;
}

/// The issued peer certificate process `i` keeps in its data directory.
fn kept_certificate(cluster: &Cluster, i: usize) -> Option<Vec<u8>> {
    std::fs::read(
        cluster.brokers[i]
            .dir
            .join("data")
            .join("peer-certificate.pem"),
    )
    .ok()
}

#[tokio::test]
async fn issued_certificates_are_renewed_and_peers_reconnect_with_the_new_ones() {
    let timing = Timing {
        peer_certificate_lifetime: Duration::from_secs(4),
        ..Timing::default()
    };
    let mut cluster = Cluster::start(3, timing).await;
    let stream = "renewed";
    let (leader, _) = cluster.create_replicated(stream).await;
    let client = cluster.client(leader).await;
    publish_all(&client, stream, "first", 10).await;
    wait_replicated(&cluster, stream, 10).await;

    // Two renewals each: the first certificates have expired by then.
    let first: Vec<Vec<u8>> = (0..3)
        .map(|i| kept_certificate(&cluster, i).expect("an issued certificate"))
        .collect();
    let mut seen: Vec<Vec<Vec<u8>>> = first.iter().map(|c| vec![c.clone()]).collect();
    cluster
        .wait_for("two renewals on every broker", async |c: &Cluster| {
            for (i, versions) in seen.iter_mut().enumerate() {
                let now = kept_certificate(c, i)?;
                if versions.last() != Some(&now) {
                    versions.push(now);
                }
            }
            seen.iter()
                .all(|versions| versions.len() >= 3)
                .then_some(())
        })
        .await;

    // A follower restarted now connects, both ways, with renewed certificates only.
    let follower = cluster
        .partition(stream, 0)
        .await
        .expect("the partition")
        .replicas
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.restart(cluster.index_of(follower));
    publish_all(&client, stream, "second", 10).await;
    wait_replicated(&cluster, stream, 20).await;
    cluster.shutdown().await;
}

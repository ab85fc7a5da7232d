//! The peer port takes only brokers of its cluster: mutual TLS against the cluster's CA.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::install_crypto;
use floe_broker::tls::{
    DevCertificates, PEER_ALPN, PeerTls, peer_client_config, peer_server_config,
};

fn tls(certs: &DevCertificates, ca: &DevCertificates) -> PeerTls {
    PeerTls {
        certificate: certs.server.clone(),
        ca: ca.ca.clone(),
    }
}

/// Connects with `client` and writes on a stream; whether the server accepted the connection.
async fn connects(server: &quinn::Endpoint, client: quinn::ClientConfig) -> bool {
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    endpoint.set_default_client_config(client);
    let addr = server.local_addr().expect("addr");
    let accepted = async {
        let incoming = server.accept().await?;
        incoming.await.ok()
    };
    let connecting = async {
        let connection = endpoint.connect(addr, "localhost").ok()?.await.ok()?;
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

#[tokio::test]
async fn only_certificates_of_the_cluster_ca_get_in() {
    install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = DevCertificates::ensure(&dir.path().join("cluster")).expect("certificates");
    let stranger = DevCertificates::ensure(&dir.path().join("stranger")).expect("certificates");
    let server_config = peer_server_config(&tls(&cluster, &cluster)).expect("server config");
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().expect("addr"))
        .expect("server");

    // A broker of the cluster.
    let member = peer_client_config(&tls(&cluster, &cluster)).expect("client config");
    assert!(
        connects(&server, member).await,
        "a cluster member was refused"
    );

    // A certificate from another CA, trusting the cluster's: refused by the server.
    let impostor = peer_client_config(&tls(&stranger, &cluster)).expect("client config");
    assert!(
        !connects(&server, impostor).await,
        "a foreign certificate got in"
    );

    // No client certificate at all.
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(&cluster.ca).expect("ca") {
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
        !connects(&server, anonymous).await,
        "a client without a certificate got in"
    );
}

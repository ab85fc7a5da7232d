//! Floe's QUIC endpoints find and keep large datagrams on a path that carries them.
//!
//! Loopback carries 64 KiB datagrams, so a peer link between two brokers on one machine must
//! end a transfer at `MAX_DATAGRAM_BYTES`, with nothing lost. Two ways this has failed: an
//! endpoint that never advertises more than quinn's 1,472 bytes (the path stays at 1,452),
//! and datagrams so large that ten of them overflow one segmentation-offload send (the sends
//! fail, black-hole detection drops the path to 1,200 bytes).

mod common;

use std::time::Duration;

use std::sync::Arc;

use floe_broker::tls::{
    ClusterCertificates, peer_client_config, peer_credentials, peer_server_config,
};
use floe_client::datagrams::MAX_DATAGRAM_BYTES;
use floe_wire::BrokerId;

#[tokio::test]
async fn a_peer_link_on_loopback_reaches_the_largest_datagram() {
    common::install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = ClusterCertificates::ensure(&dir.path().join("cluster")).expect("certificates");
    let ca = certs.files.ca.clone();
    let credentials = |id| {
        let paths = certs
            .peer_certificate(BrokerId::new(id))
            .expect("peer certificate");
        peer_credentials(&paths).expect("credentials")
    };
    let (receiving, sending) = (credentials(1), credentials(2));
    let loopback = "127.0.0.1:0".parse().expect("addr");
    let key = [3u8; 32];
    let server = floe_broker::quic::endpoint(
        loopback,
        peer_server_config(receiving, &ca).expect("server config"),
        &key,
    )
    .expect("server endpoint");
    let client = floe_broker::quic::endpoint(
        loopback,
        peer_server_config(sending.clone(), &ca).expect("server config"),
        &key,
    )
    .expect("client endpoint");
    let addr = server.local_addr().expect("addr");

    const TOTAL: usize = 64 << 20;
    let receiver = tokio::spawn(async move {
        let connection = server
            .accept()
            .await
            .expect("incoming")
            .await
            .expect("accepted");
        let mut stream = connection.accept_uni().await.expect("a stream");
        let mut received = 0;
        while let Some(chunk) = stream.read_chunk(1 << 20, true).await.expect("read") {
            received += chunk.bytes.len();
        }
        (received, connection)
    });
    let connection = client
        .connect_with(
            peer_client_config(sending, &ca, Arc::new(|_| {})).expect("client config"),
            addr,
            "floe-broker-1",
        )
        .expect("connect")
        .await
        .expect("connected");
    let mut stream = connection.open_uni().await.expect("a stream");
    let chunk = bytes::Bytes::from(vec![0x5a; 1 << 20]);
    for _ in 0..TOTAL >> 20 {
        stream.write_chunk(chunk.clone()).await.expect("write");
    }
    stream.finish().expect("finish");
    let (received, server_side) = tokio::time::timeout(Duration::from_secs(60), receiver)
        .await
        .expect("the transfer ended within a minute")
        .expect("receiver");
    assert_eq!(received, TOTAL);

    let path = connection.stats().path;
    assert_eq!(
        path.current_mtu, MAX_DATAGRAM_BYTES,
        "the sender's datagrams at the end of the transfer ({path:?})"
    );
    assert_eq!(path.black_holes_detected, 0, "{path:?}");
    assert_eq!(
        server_side.stats().path.current_mtu,
        MAX_DATAGRAM_BYTES,
        "the receiver's path MTU"
    );
}

//! Who may use a broker's client port, on a real `floe-broker dev` (its controlplane keeps
//! the principals, the broker fetches them): every request type × {no token, unknown token,
//! revoked token, token without the grant, token with it}; a refused request changes
//! nothing; revocation reaches open connections; an administrative request the broker
//! forwards is decided on the caller, not the broker.

mod common;

use std::time::{Duration, Instant};

use common::*;
use floe_client::rest::Controlplane;
use floe_wire::admin::CreatePrincipalRequest;
use floe_wire::frame::{
    CreateStream, DeleteStream, ErrorCode, Fetch, FetchPosition, Message, MetadataRequest, Produce,
    StreamSettings,
};
use floe_wire::{AckMode, BatchBuilder, PartitionId, StreamName};

fn name(text: &str) -> StreamName {
    StreamName::new(text).expect("name")
}

fn create(stream: &str) -> Message {
    Message::from(CreateStream {
        name: name(stream),
        partition_count: 1,
        ack_mode: AckMode::Leader,
        settings: StreamSettings::default(),
    })
}

fn delete(stream: &str) -> Message {
    Message::DeleteStream(DeleteStream { name: name(stream) })
}

fn produce(stream: &str) -> Message {
    let mut batch = BatchBuilder::new(1 << 20);
    batch.push(1_000, None, b"v", &[]).expect("push");
    Message::Produce(Produce {
        stream: name(stream),
        partition: PartitionId::new(0),
        batches: vec![batch.finish().expect("finish")],
    })
}

fn fetch(stream: &str) -> Message {
    Message::Fetch(Fetch {
        stream: name(stream),
        partition: PartitionId::new(0),
        position: FetchPosition::Earliest,
        max_bytes: 1 << 20,
        max_wait_ms: 0,
    })
}

fn metadata(stream: &str) -> Message {
    Message::MetadataRequest(MetadataRequest {
        streams: vec![name(stream)],
    })
}

/// The error code of an answer; `None` when it is not an error. A metadata answer's code is
/// its one stream's.
fn code(answer: &Message) -> Option<ErrorCode> {
    match answer {
        Message::Error(e) => Some(e.code),
        Message::MetadataResponse(r) => r.streams[0].result.as_ref().err().copied(),
        Message::ProduceAck(ack) => ack.results[0].as_ref().err().copied(),
        _ => None,
    }
}

/// A connection that said `Hello` with `token`, or the code the `Hello` was refused with.
async fn connect_as(
    broker: &BrokerProcess,
    token: Option<&str>,
) -> Result<quinn::Connection, ErrorCode> {
    let conn = connect(broker.addr(), broker.ca()).await;
    match request(&conn, &hello_as(token)).await {
        Message::HelloAck(_) => Ok(conn),
        Message::Error(e) => Err(e.code),
        other => panic!("expected HelloAck or an error, got {other:?}"),
    }
}

async fn token(controlplane: &Controlplane, principal: &str, grants: &[&str]) -> String {
    controlplane
        .create_principal(&CreatePrincipalRequest {
            name: principal.into(),
            kind: floe_wire::auth::PrincipalKind::User,
            grants: grants.iter().map(|g| g.parse().expect("grant")).collect(),
            broker_id: None,
        })
        .await
        .expect("create principal")
        .token
}

/// The high watermark of `stream`'s partition 0, read as the administrator.
async fn records(admin: &quinn::Connection, stream: &str) -> u64 {
    match request(admin, &fetch(stream)).await {
        Message::FetchResponse(r) => r.high_watermark.get(),
        other => panic!("{other:?}"),
    }
}

/// Polls `check` every 100 ms until it holds or `within` passes; returns how long it took.
async fn within<F, Fut>(what: &str, within: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_checked_against_the_callers_grants() {
    install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let admin_token = broker
        .profile
        .token
        .as_ref()
        .expect("dev writes its administrator's token into the profile")
        .expose()
        .to_owned();
    let controlplane = Controlplane::new(
        broker
            .profile
            .controlplane
            .as_deref()
            .expect("controlplane"),
        Some(admin_token.clone()),
    )
    .expect("controlplane");
    let publisher = token(&controlplane, "publisher", &["publish:orders"]).await;
    let reader = token(&controlplane, "reader", &["consume:orders"]).await;
    let orders_admin = token(&controlplane, "orders-admin", &["admin:orders*"]).await;
    let revoked = token(&controlplane, "revoked", &["admin:*", "publish:*"]).await;
    controlplane
        .revoke_principal("revoked")
        .await
        .expect("revoke");
    let unknown = format!("floe_{}_{}", "0".repeat(16), "1".repeat(64));

    let admin = connect_as(&broker, Some(&admin_token))
        .await
        .expect("admin");
    assert!(matches!(
        request(&admin, &create("orders")).await,
        Message::CreateStreamResponse(_)
    ));
    assert_eq!(code(&request(&admin, &produce("orders")).await), None);

    // Without a token, with an unknown one, with a revoked one: the Hello is refused. The
    // broker learns of the revocation from the controlplane within seconds.
    assert_eq!(
        connect_as(&broker, None).await.err(),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(
        connect_as(&broker, Some(&unknown)).await.err(),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(
        connect_as(&broker, Some("not a token")).await.err(),
        Some(ErrorCode::Unauthorized)
    );
    within(
        "the revoked token refused",
        Duration::from_secs(10),
        || async {
            connect_as(&broker, Some(&revoked)).await.err() == Some(ErrorCode::Unauthorized)
        },
    )
    .await;

    // Each request type: without the grant Forbidden, with it answered; nothing changes on
    // a refusal.
    let as_reader = connect_as(&broker, Some(&reader)).await.expect("reader");
    let as_publisher = connect_as(&broker, Some(&publisher))
        .await
        .expect("publisher");
    let as_orders_admin = connect_as(&broker, Some(&orders_admin))
        .await
        .expect("orders admin");
    let before = records(&admin, "orders").await;
    for (request_name, message, allowed, refused) in [
        ("produce", produce("orders"), &as_publisher, &as_reader),
        ("fetch", fetch("orders"), &as_reader, &as_publisher),
        ("metadata", metadata("orders"), &as_reader, &as_orders_admin),
        ("create", create("orders-2"), &as_orders_admin, &as_reader),
        (
            "delete",
            delete("orders-2"),
            &as_orders_admin,
            &as_publisher,
        ),
    ] {
        // `orders-admin` may describe `orders` through its admin grant: check a stream it
        // holds nothing on instead.
        let refused_message = if request_name == "metadata" {
            metadata("payments")
        } else {
            message.clone()
        };
        assert_eq!(
            code(&request(refused, &refused_message).await),
            Some(ErrorCode::Forbidden),
            "{request_name} without the grant"
        );
        assert_eq!(
            code(&request(allowed, &message).await),
            None,
            "{request_name} with the grant"
        );
    }
    // One produce was allowed; the refused one added nothing.
    assert_eq!(records(&admin, "orders").await, before + 1);

    // The Forbidden answer names the principal, the action and the stream.
    match request(&as_reader, &produce("orders")).await {
        Message::Error(e) => {
            let text = format!("{e:?}");
            assert!(
                text.contains("reader") && text.contains("publish:orders"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }

    // A listing of every stream shows only what the caller may describe.
    assert!(matches!(
        request(&admin, &create("payments")).await,
        Message::CreateStreamResponse(_)
    ));
    match request(
        &as_reader,
        &Message::MetadataRequest(MetadataRequest { streams: vec![] }),
    )
    .await
    {
        Message::MetadataResponse(r) => {
            let names: Vec<&str> = r.streams.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["orders"]);
        }
        other => panic!("{other:?}"),
    }

    // Creates and deletes the broker forwards to the controlplane: refused for a caller
    // without the grant (the broker forwards the caller's token, never its own).
    assert_eq!(
        code(&request(&as_reader, &create("orders-3")).await),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(
        code(&request(&as_publisher, &delete("payments")).await),
        Some(ErrorCode::Forbidden)
    );
    let streams = controlplane.streams().await.expect("streams").streams;
    let names: Vec<&str> = streams.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["orders", "payments"],
        "refused requests changed nothing"
    );

    // Revocation reaches an open connection within 10 s.
    controlplane
        .revoke_principal("publisher")
        .await
        .expect("revoke");
    let took = within(
        "the open connection refused",
        Duration::from_secs(10),
        || async {
            code(&request(&as_publisher, &produce("orders")).await) == Some(ErrorCode::Unauthorized)
        },
    )
    .await;
    eprintln!("revocation reached the open connection in {took:?}");
}

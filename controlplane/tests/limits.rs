//! The cluster's limits on creates, over real HTTP: partitions per broker and streams per
//! principal. Each refusal is `429 limit_exceeded`, names the limit and its flag, creates
//! nothing, and stops applying once streams are deleted.

mod common;

use std::net::SocketAddr;

use common::{Reply, call, start_sqlite};
use floe_controlplane::BootstrapTokens;
use serde_json::json;

const ADMIN: &str = "admin-secret";
const BROKERS: &str = "broker-secret";

async fn start(
    dir: &std::path::Path,
    adjust: impl FnOnce(&mut floe_controlplane::Config),
) -> floe_controlplane::Running {
    start_sqlite(dir, |config| {
        config.auth = Some(BootstrapTokens {
            admin: ADMIN.to_owned(),
            broker: Some(BROKERS.to_owned()),
            read_replica: None,
        });
        config.default_replication_factor = 1;
        adjust(config);
    })
    .await
}

async fn create(addr: SocketAddr, token: &str, name: &str, partitions: u32) -> Reply {
    let body = json!({ "name": name, "partitions": partitions });
    call(addr, "POST", "/v1/streams", Some(&body), Some(token)).await
}

async fn delete(addr: SocketAddr, token: &str, name: &str) {
    let path = format!("/v1/streams/{name}");
    let reply = call(addr, "DELETE", &path, None, Some(token)).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
}

async fn exists(addr: SocketAddr, name: &str) -> bool {
    let path = format!("/v1/streams/{name}");
    call(addr, "GET", &path, None, Some(ADMIN)).await.status == 200
}

fn message(reply: &Reply) -> &str {
    reply.body["message"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_create_past_the_partitions_per_broker_is_refused_by_name_and_nothing_is_placed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path(), |config| config.max_partitions_per_broker = 10).await;
    let addr = running.local_addr();
    common::live_broker(addr, 7100, Some(BROKERS)).await;
    common::live_broker(addr, 7200, Some(BROKERS)).await;

    // 8 + 12 partitions spread over two brokers: 10 each, the limit.
    assert_eq!(create(addr, ADMIN, "first", 8).await.status, 201);
    assert_eq!(create(addr, ADMIN, "second", 12).await.status, 201);
    let refused = create(addr, ADMIN, "third", 1).await;
    assert_eq!((refused.status, refused.code()), (429, "limit_exceeded"));
    let text = message(&refused);
    assert!(
        text.contains("limit of 10 partitions per broker")
            && text.contains("--max-partitions-per-broker"),
        "{text}"
    );
    assert!(
        !exists(addr, "third").await,
        "a refused create places nothing"
    );
    let brokers = call(addr, "GET", "/v1/brokers", None, Some(ADMIN)).await;
    let held: Vec<u64> = brokers.body["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .map(|broker| broker["replicas"].as_u64().expect("replicas"))
        .collect();
    assert_eq!(held, vec![10, 10]);

    // Deleting a stream makes room: the same create, retried, is placed.
    delete(addr, ADMIN, "first").await;
    assert_eq!(create(addr, ADMIN, "third", 1).await.status, 201);
    eprintln!("refused: {text}");
}

/// Creates a principal with `grants`; returns its token.
async fn token(addr: SocketAddr, name: &str, grants: &[&str]) -> String {
    let body = json!({ "name": name, "grants": grants });
    let reply = call(addr, "POST", "/v1/principals", Some(&body), Some(ADMIN)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply.body["token"].as_str().expect("token").to_owned()
}

#[tokio::test]
async fn a_principal_past_its_streams_is_refused_by_name_and_others_are_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path(), |config| config.max_streams_per_principal = 2).await;
    let addr = running.local_addr();
    common::live_broker(addr, 7100, Some(BROKERS)).await;
    let team_a = token(addr, "team-a", &["admin:a-*"]).await;
    let team_b = token(addr, "team-b", &["admin:b-*"]).await;

    assert_eq!(create(addr, &team_a, "a-1", 1).await.status, 201);
    assert_eq!(create(addr, &team_a, "a-2", 1).await.status, 201);
    let refused = create(addr, &team_a, "a-3", 1).await;
    assert_eq!((refused.status, refused.code()), (429, "limit_exceeded"));
    let text = message(&refused);
    assert!(
        text.contains("principal `team-a` has created 2 streams")
            && text.contains("--max-streams-per-principal"),
        "{text}"
    );
    assert!(
        !exists(addr, "a-3").await,
        "a refused create creates nothing"
    );

    // Another principal's streams are its own count.
    assert_eq!(create(addr, &team_b, "b-1", 1).await.status, 201);
    assert_eq!(create(addr, &team_b, "b-2", 1).await.status, 201);

    // Streams it deletes no longer count: the refused create, retried, succeeds.
    delete(addr, &team_a, "a-1").await;
    assert_eq!(create(addr, &team_a, "a-3", 1).await.status, 201);
    assert_eq!(create(addr, &team_a, "a-4", 1).await.status, 429);
    eprintln!("refused: {text}");
}

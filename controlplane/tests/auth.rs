//! Who may call what on the REST API: every route × {no token, unknown token, revoked
//! token, token without the grant, token with it}, and that a refused call changes nothing.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Reply, call, get, start_sqlite};
use floe_controlplane::BootstrapTokens;
use serde_json::{Value, json};

const ADMIN: &str = "admin-secret";
const BROKERS: &str = "broker-secret";
const REPLICAS: &str = "replica-secret";

async fn start(dir: &std::path::Path) -> floe_controlplane::Running {
    start_sqlite(dir, |config| {
        config.auth = Some(BootstrapTokens {
            admin: ADMIN.to_owned(),
            broker: Some(BROKERS.to_owned()),
            read_replica: Some(REPLICAS.to_owned()),
        });
    })
    .await
}

/// Creates a principal with `grants`; returns its token.
async fn token(addr: SocketAddr, name: &str, grants: &[&str]) -> String {
    let reply = call(
        addr,
        "POST",
        "/v1/principals",
        Some(&json!({ "name": name, "grants": grants })),
        Some(ADMIN),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.body["name"], name);
    reply.body["token"].as_str().expect("token").to_owned()
}

fn status(reply: &Reply) -> (u16, String) {
    (reply.status, reply.code().to_owned())
}

#[tokio::test]
async fn tokens_are_required_checked_against_grants_and_revocable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let addr = running.local_addr();
    // A broker registers with the brokers' token, so that streams can be placed.
    common::live_broker(addr, 7100, Some(BROKERS)).await;

    let orders_admin = token(addr, "orders-admin", &["admin:orders*"]).await;
    let reader = token(addr, "reader", &["consume:orders"]).await;
    let revoked = token(addr, "gone", &["admin:*"]).await;
    let revoke = call(addr, "DELETE", "/v1/principals/gone", None, Some(ADMIN)).await;
    assert_eq!(revoke.status, 204, "{:?}", revoke.body);

    let create = json!({ "name": "orders", "partitions": 1, "replication_factor": 1 });
    // No token, an unknown one, a revoked one: 401. Without the grant: 403. Nothing made.
    for (token, expected) in [
        (None, (401, "unauthorized")),
        (
            Some("floe_0000000000000000_".to_owned() + &"0".repeat(64)),
            (401, "unauthorized"),
        ),
        (Some("not-a-token".to_owned()), (401, "unauthorized")),
        (Some(revoked.clone()), (401, "unauthorized")),
        (Some(reader.clone()), (403, "forbidden")),
        (Some(BROKERS.to_owned()), (403, "forbidden")),
    ] {
        let reply = call(addr, "POST", "/v1/streams", Some(&create), token.as_deref()).await;
        assert_eq!(
            status(&reply),
            (expected.0, expected.1.to_owned()),
            "{token:?}: {:?}",
            reply.body
        );
    }
    let list = call(addr, "GET", "/v1/streams", None, Some(ADMIN)).await;
    assert_eq!(
        list.body["streams"],
        json!([]),
        "a refused create made nothing"
    );

    // With the grant: created; the prefix grant covers `orders` but not `payments`.
    let made = call(
        addr,
        "POST",
        "/v1/streams",
        Some(&create),
        Some(&orders_admin),
    )
    .await;
    assert_eq!(made.status, 201, "{:?}", made.body);
    let other = json!({ "name": "payments", "partitions": 1, "replication_factor": 1 });
    let refused = call(
        addr,
        "POST",
        "/v1/streams",
        Some(&other),
        Some(&orders_admin),
    )
    .await;
    assert_eq!(status(&refused), (403, "forbidden".to_owned()));
    assert!(
        refused.body["message"]
            .as_str()
            .expect("as set up")
            .contains("admin:payments"),
        "the refusal names the grant: {:?}",
        refused.body
    );
    let made = call(addr, "POST", "/v1/streams", Some(&other), Some(ADMIN)).await;
    assert_eq!(made.status, 201);

    // Lists show only what the caller may describe.
    let names = |reply: &Reply| -> Vec<String> {
        reply.body["streams"]
            .as_array()
            .expect("as set up")
            .iter()
            .map(|s| s["name"].as_str().expect("as set up").to_owned())
            .collect()
    };
    let seen = call(addr, "GET", "/v1/streams", None, Some(&reader)).await;
    assert_eq!(names(&seen), ["orders"]);
    let seen = call(addr, "GET", "/v1/streams", None, Some(ADMIN)).await;
    assert_eq!(names(&seen), ["orders", "payments"]);
    let describe = call(addr, "GET", "/v1/streams/payments", None, Some(&reader)).await;
    assert_eq!(describe.status, 403);

    // A reader may not delete or alter; the stream stays.
    for (method, path, body) in [
        ("DELETE", "/v1/streams/orders", None),
        (
            "PATCH",
            "/v1/streams/orders",
            Some(json!({ "ack_mode": "leader" })),
        ),
        ("PUT", "/v1/streams/orders/retention", Some(json!({}))),
    ] {
        let reply = call(addr, method, path, body.as_ref(), Some(&reader)).await;
        assert_eq!(reply.status, 403, "{method} {path}: {:?}", reply.body);
    }
    assert_eq!(
        call(addr, "GET", "/v1/streams/orders", None, Some(&reader))
            .await
            .status,
        200
    );

    // Commits need consume on every stream named.
    let commit =
        |stream: &str| json!({ "offsets": [{ "stream": stream, "partition": 0, "offset": 5 }] });
    let ok = call(
        addr,
        "POST",
        "/v1/groups/g/offsets",
        Some(&commit("orders")),
        Some(&reader),
    )
    .await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    let no = call(
        addr,
        "POST",
        "/v1/groups/g/offsets",
        Some(&commit("payments")),
        Some(&reader),
    )
    .await;
    assert_eq!(no.status, 403);

    // Cluster administration needs cluster-admin; members' routes need their kind.
    for (method, path, body) in [
        ("POST", "/v1/brokers/1/drain", None),
        ("GET", "/v1/scaling-policy", None),
        ("GET", "/v1/principals", None),
        ("GET", "/v1/groups", None),
        ("POST", "/v1/principals", Some(json!({ "name": "x" }))),
        (
            "POST",
            "/v1/brokers",
            Some(json!({ "client_endpoint": "127.0.0.1:1", "peer_endpoint": "127.0.0.1:2" })),
        ),
        ("GET", "/v1/auth/credentials", None),
    ] {
        let reply = call(addr, method, path, body.as_ref(), Some(&orders_admin)).await;
        assert_eq!(
            status(&reply),
            (403, "forbidden".to_owned()),
            "{method} {path}"
        );
    }
    let replica = json!({ "endpoint": "127.0.0.1:7150" });
    let as_broker = call(
        addr,
        "POST",
        "/v1/read-replicas",
        Some(&replica),
        Some(BROKERS),
    )
    .await;
    assert_eq!(as_broker.status, 403);
    let as_replica = call(
        addr,
        "POST",
        "/v1/read-replicas",
        Some(&replica),
        Some(REPLICAS),
    )
    .await;
    assert_eq!(as_replica.status, 200, "{:?}", as_replica.body);
    // Discovery is for any principal.
    assert_eq!(
        call(addr, "GET", "/v1/brokers", None, Some(&reader))
            .await
            .status,
        200
    );
    assert_eq!(
        call(addr, "GET", "/v1/read-replicas", None, Some(&reader))
            .await
            .status,
        200
    );
    // The probes and the document need nothing.
    for path in [
        "/v1/health",
        "/v1/ready",
        "/v1/openapi.json",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert_eq!(get(addr, path).await.status, 200, "{path}");
    }
    assert_eq!(get(addr, "/v1/brokers").await.status, 401);
    running.shutdown().await;
}

#[tokio::test]
async fn principals_are_listed_rotated_and_revoked_without_showing_secrets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let addr = running.local_addr();
    let first = token(addr, "ci", &["publish:builds", "describe:*"]).await;
    let whoami = call(addr, "GET", "/v1/auth/whoami", None, Some(&first)).await;
    assert_eq!(whoami.body["name"], "ci");
    assert_eq!(
        whoami.body["grants"],
        json!(["publish:builds", "describe:*"])
    );

    // A second token for rotation; both work until the first is revoked.
    let rotated = call(addr, "POST", "/v1/principals/ci/tokens", None, Some(ADMIN)).await;
    assert_eq!(rotated.status, 201, "{:?}", rotated.body);
    let second = rotated.body["token"]
        .as_str()
        .expect("as set up")
        .to_owned();
    let first_key = first.split('_').nth(1).expect("as set up").to_owned();
    for token in [&first, &second] {
        assert_eq!(
            call(addr, "GET", "/v1/auth/whoami", None, Some(token))
                .await
                .status,
            200
        );
    }
    let list = call(addr, "GET", "/v1/principals", None, Some(ADMIN)).await;
    let text = list.body.to_string();
    assert!(
        !text.contains(&first[22..]) && !text.contains(&second[22..]),
        "{text}"
    );
    let ci = list.body["principals"]
        .as_array()
        .expect("as set up")
        .iter()
        .find(|p| p["name"] == "ci")
        .expect("listed")
        .clone();
    assert_eq!(ci["tokens"].as_array().expect("as set up").len(), 2);
    let bootstrap: Vec<&Value> = list.body["principals"]
        .as_array()
        .expect("as set up")
        .iter()
        .filter(|p| p["bootstrap"] == true)
        .collect();
    assert_eq!(bootstrap.len(), 3, "admin, brokers, read-replicas");

    let path = format!("/v1/principals/ci/tokens/{first_key}");
    assert_eq!(
        call(addr, "DELETE", &path, None, Some(ADMIN)).await.status,
        204
    );
    assert_eq!(
        call(addr, "GET", "/v1/auth/whoami", None, Some(&first))
            .await
            .status,
        401
    );
    assert_eq!(
        call(addr, "GET", "/v1/auth/whoami", None, Some(&second))
            .await
            .status,
        200
    );
    assert_eq!(
        call(addr, "DELETE", &path, None, Some(ADMIN)).await.status,
        404
    );

    // Names are checked; taken names, bootstrap names and grants on other kinds refused.
    for (body, expected) in [
        (json!({ "name": "ci" }), 409),
        (json!({ "name": "admin" }), 409),
        (json!({ "name": "bad name" }), 422),
        (json!({ "name": "x", "grants": ["write:orders"] }), 422),
        (
            json!({ "name": "x", "kind": "broker", "grants": ["admin:*"] }),
            422,
        ),
        (json!({ "name": "x", "secret": "mine" }), 422),
    ] {
        let reply = call(addr, "POST", "/v1/principals", Some(&body), Some(ADMIN)).await;
        assert_eq!(reply.status, expected, "{body}: {:?}", reply.body);
    }
    assert_eq!(
        call(addr, "DELETE", "/v1/principals/admin", None, Some(ADMIN))
            .await
            .status,
        409
    );
    assert_eq!(
        call(addr, "DELETE", "/v1/principals/nobody", None, Some(ADMIN))
            .await
            .status,
        404
    );

    // Brokers and read replicas read the table of hashes; it holds no token.
    let table = call(addr, "GET", "/v1/auth/credentials", None, Some(BROKERS)).await;
    assert_eq!(table.status, 200);
    assert!(!table.body.to_string().contains(&second[22..]));
    assert!(!table.body.to_string().contains(ADMIN));
    running.shutdown().await;
}

/// A revocation made through another controlplane's store (or any writer) is seen within
/// the cache's recheck interval.
#[tokio::test]
async fn a_revoked_token_stops_working_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let addr = running.local_addr();
    let temp = token(addr, "temp", &["describe:*"]).await;
    assert_eq!(
        call(addr, "GET", "/v1/streams", None, Some(&temp))
            .await
            .status,
        200
    );
    assert_eq!(
        call(addr, "DELETE", "/v1/principals/temp", None, Some(ADMIN))
            .await
            .status,
        204
    );
    let started = std::time::Instant::now();
    assert_eq!(
        call(addr, "GET", "/v1/streams", None, Some(&temp))
            .await
            .status,
        401
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    running.shutdown().await;
}

/// A principal of kind `broker` bound to a broker id acts for that broker only: it registers
/// as it (given no id, it gets its own), heartbeats, reads assignments and reports elections
/// for it, and is refused `403` naming its id for any other; the shared bootstrap `brokers`
/// stays unbound. Only a broker can be bound.
#[tokio::test]
async fn a_broker_principal_bound_to_an_id_acts_for_that_broker_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let addr = running.local_addr();

    let made = call(
        addr,
        "POST",
        "/v1/principals",
        Some(&json!({ "name": "broker-2", "kind": "broker", "broker_id": 2 })),
        Some(ADMIN),
    )
    .await;
    assert_eq!(made.status, 201, "{:?}", made.body);
    let bound = made.body["token"].as_str().expect("token").to_owned();
    for body in [
        json!({ "name": "user-3", "broker_id": 3 }),
        json!({ "name": "replica-3", "kind": "read-replica", "broker_id": 3 }),
        json!({ "name": "broker-0", "kind": "broker", "broker_id": 0 }),
    ] {
        let reply = call(addr, "POST", "/v1/principals", Some(&body), Some(ADMIN)).await;
        assert_eq!(
            status(&reply),
            (422, "invalid_argument".to_owned()),
            "{body}"
        );
    }
    let list = call(addr, "GET", "/v1/principals", None, Some(ADMIN)).await;
    let listed = list.body["principals"]
        .as_array()
        .expect("principals")
        .iter()
        .find(|p| p["name"] == "broker-2")
        .cloned()
        .expect("listed");
    assert_eq!(listed["broker_id"], 2, "{listed}");

    // The bootstrap principal registers broker 1; the bound one, asking for no id, is
    // given its own.
    let one = common::live_broker(addr, 7100, Some(BROKERS)).await;
    assert_eq!(one, 1);
    let two = common::live_broker(addr, 7200, Some(&bound)).await;
    assert_eq!(two, 2, "a bound principal registers its own broker");

    // For broker 1, everything is refused, naming the id it is bound to.
    let register_as_one = json!({
        "broker_id": 1, "client_endpoint": "127.0.0.1:7300", "peer_endpoint": "127.0.0.1:7301",
    });
    let election = json!({ "stream": "s", "partition": 0, "epoch": 1, "log_end": 0 });
    for (method, path, body) in [
        ("POST", "/v1/brokers", Some(register_as_one)),
        ("POST", "/v1/brokers/1/heartbeat", Some(json!({}))),
        ("GET", "/v1/brokers/1/assignments", None),
        ("POST", "/v1/brokers/1/elections", Some(election)),
        ("POST", "/v1/brokers/1/peer-certificate", Some(json!({}))),
    ] {
        let reply = call(addr, method, path, body.as_ref(), Some(&bound)).await;
        assert_eq!(
            status(&reply),
            (403, "forbidden".to_owned()),
            "{method} {path}: {:?}",
            reply.body
        );
        let message = reply.body["message"].as_str().expect("a message");
        assert!(
            message.contains("broker-2") && message.contains("broker 2 only"),
            "{method} {path}: {message}"
        );
    }
    // Broker 1 is as the bootstrap principal left it: still at its own endpoint.
    let brokers = call(addr, "GET", "/v1/brokers", None, Some(ADMIN)).await;
    let first = &brokers.body["brokers"][0];
    assert_eq!(
        (
            first["broker_id"].as_u64(),
            first["client_endpoint"].as_str()
        ),
        (Some(1), Some("127.0.0.1:7100")),
        "{first}"
    );

    // For its own id, and for the unbound bootstrap principal on any id: allowed.
    for (path, token) in [
        ("/v1/brokers/2/assignments", bound.as_str()),
        ("/v1/brokers/2/assignments", BROKERS),
        ("/v1/brokers/1/assignments", BROKERS),
    ] {
        let reply = call(addr, "GET", path, None, Some(token)).await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
    }
    let beat = call(
        addr,
        "POST",
        "/v1/brokers/2/heartbeat",
        Some(&json!({})),
        Some(&bound),
    )
    .await;
    assert_eq!(beat.status, 200, "{:?}", beat.body);
    running.shutdown().await;
}

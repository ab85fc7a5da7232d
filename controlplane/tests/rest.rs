//! The REST API over real HTTP, against a controlplane on SQLite.

mod common;

use std::time::{Duration, Instant};

use common::{call, eventually, get, live_broker, post, raw, start_sqlite};
use serde_json::{Value, json};

fn orders(partitions: u32) -> Value {
    json!({ "name": "orders", "partitions": partitions, "replication_factor": 1 })
}

#[tokio::test]
async fn a_stream_is_created_described_altered_and_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let broker = live_broker(addr, 7100, None).await;

    let created = post(addr, "/v1/streams", &orders(4)).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["config"]["ack_mode"], "leader");
    assert_eq!(created.body["config"]["partitions"], 4);
    let again = post(addr, "/v1/streams", &orders(4)).await;
    assert_eq!((again.status, again.code()), (409, "stream_exists"));

    let described = get(addr, "/v1/streams/orders").await;
    assert_eq!(described.status, 200);
    let partitions = described.body["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 4);
    assert_eq!(partitions[3]["partition"], 3);
    assert_eq!(
        partitions[3]["leader"].as_u64(),
        Some(broker),
        "placed on the one live broker"
    );

    let listed = get(addr, "/v1/streams").await;
    assert_eq!(listed.body["streams"][0]["name"], "orders");

    let altered = call(
        addr,
        "PUT",
        "/v1/streams/orders/retention",
        Some(&json!({ "local_ms": 60000, "tier_bytes": 1_000_000 })),
        None,
    )
    .await;
    assert_eq!(altered.status, 200, "{:?}", altered.body);
    assert_eq!(altered.body["config"]["retention"]["local_ms"], 60000);

    // A patch: absent settings stay, null returns one to its default, a value sets it;
    // every change bumps the assignment version that brokers follow.
    let version_before = assignment_version(addr, broker).await;
    let patched = call(
        addr,
        "PATCH",
        "/v1/streams/orders",
        Some(
            &json!({ "ack_mode": "quorum", "segment": { "bytes": 1_048_576 },
                      "retention": { "tier_bytes": null } }),
        ),
        None,
    )
    .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    let config = &patched.body["config"];
    assert_eq!(config["ack_mode"], "quorum");
    assert_eq!(config["segment"]["bytes"], 1_048_576);
    assert_eq!(config["retention"]["local_ms"], 60000, "kept");
    assert_eq!(config["retention"]["tier_bytes"], Value::Null, "cleared");
    assert!(assignment_version(addr, broker).await > version_before);
    let assigned = get(addr, &format!("/v1/brokers/{broker}/assignments")).await;
    assert_eq!(
        assigned.body["streams"][0]["config"]["segment"]["bytes"], 1_048_576,
        "brokers are told: {:?}",
        assigned.body
    );
    for (body, needle) in [
        (json!({ "partitions": 8 }), "partitions cannot change"),
        (json!({ "replication_factor": 3 }), "--replication-factor 3"),
        (json!({}), "nothing to change"),
        (json!({ "segment": { "bytes": 0 } }), "segment.bytes"),
    ] {
        let refused = call(addr, "PATCH", "/v1/streams/orders", Some(&body), None).await;
        assert_eq!(
            (refused.status, refused.code()),
            (422, "invalid_argument"),
            "{body}"
        );
        let message = refused.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let missing = call(
        addr,
        "PATCH",
        "/v1/streams/nothing",
        Some(&json!({ "ack_mode": "leader" })),
        None,
    )
    .await;
    assert_eq!((missing.status, missing.code()), (404, "stream_not_found"));
    let unchanged = get(addr, "/v1/streams/orders").await;
    assert_eq!(
        unchanged.body["config"]["partitions"], 4,
        "refusals change nothing"
    );

    let deleted = call(addr, "DELETE", "/v1/streams/orders", None, None).await;
    assert_eq!(deleted.status, 204);
    let gone = get(addr, "/v1/streams/orders").await;
    assert_eq!((gone.status, gone.code()), (404, "stream_not_found"));
    running.shutdown().await;
}

/// Method, path, headers, body, expected status, expected code.
type Case<'a> = (
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    &'a [u8],
    u16,
    &'a str,
);

async fn assignment_version(addr: std::net::SocketAddr, broker: u64) -> u64 {
    let reply = get(addr, &format!("/v1/brokers/{broker}/assignments")).await;
    reply.body["version"].as_u64().expect("a version")
}

#[tokio::test]
async fn a_broker_is_drained_and_undrained_and_reports_its_build() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let body = json!({
        "client_endpoint": "127.0.0.1:7100",
        "peer_endpoint": "127.0.0.1:7101",
        "build": { "version": "9.8.7", "commit": "abc1234" },
    });
    let registered = post(addr, "/v1/brokers", &body).await;
    assert_eq!(registered.status, 200, "{:?}", registered.body);
    let id = registered.body["broker_id"].as_u64().expect("id");
    let listed = get(addr, "/v1/brokers").await;
    assert_eq!(
        listed.body["brokers"][0]["build"],
        json!({ "version": "9.8.7", "commit": "abc1234" })
    );
    let health = get(addr, "/v1/health").await;
    assert_eq!(health.body["build"]["version"], env!("CARGO_PKG_VERSION"));

    let drained = call(addr, "POST", &format!("/v1/brokers/{id}/drain"), None, None).await;
    assert_eq!(drained.body["state"], "draining", "{:?}", drained.body);
    let undrained = call(
        addr,
        "POST",
        &format!("/v1/brokers/{id}/undrain"),
        None,
        None,
    )
    .await;
    assert_eq!(undrained.status, 200, "{:?}", undrained.body);
    assert_eq!(undrained.body["state"], "live");
    let again = call(
        addr,
        "POST",
        &format!("/v1/brokers/{id}/undrain"),
        None,
        None,
    )
    .await;
    assert_eq!(
        again.body["state"], "live",
        "undraining a live broker changes nothing"
    );
    let missing = call(addr, "POST", "/v1/brokers/77/undrain", None, None).await;
    assert_eq!((missing.status, missing.code()), (404, "broker_not_found"));

    let bad_build = json!({
        "client_endpoint": "127.0.0.1:7200",
        "peer_endpoint": "127.0.0.1:7201",
        "build": { "version": "", "commit": "x" },
    });
    let refused = post(addr, "/v1/brokers", &bad_build).await;
    assert_eq!((refused.status, refused.code()), (422, "invalid_argument"));
    running.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_a_json_4xx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let json_header = [("Content-Type", "application/json")];
    let cases: Vec<Case<'_>> = vec![
        ("POST", "/v1/streams", json_header.to_vec(), b"{not json", 400, "bad_request"),
        ("POST", "/v1/streams", vec![], br#"{"name":"a","partitions":1}"#, 415, "unsupported_media_type"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":"x"}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":0}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a/b","partitions":1}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":1,"colour":1}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":1,"segment":{"bytes":18446744073709551615}}"#, 422, "invalid_argument"),
        // Above the 2 GiB a broker's log can hold: refused here, not accepted and left unserved.
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":1,"segment":{"bytes":2147483649}}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":1,"segment":{"bytes":4294967296}}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":1,"segment":{"bytes":0}}"#, 422, "invalid_argument"),
        ("POST", "/v1/streams", json_header.to_vec(), br#"{"name":"a","partitions":1,"ack_mode":"all"}"#, 422, "invalid_argument"),
        ("GET", "/v1/streams/..", vec![], b"", 400, "bad_request"),
        ("GET", "/v1/brokers/minus-one/assignments", vec![], b"", 400, "bad_request"),
        ("GET", "/v1/brokers/1/assignments?after_version=x", vec![], b"", 400, "bad_request"),
        ("GET", "/v1/nowhere", vec![], b"", 404, "route_not_found"),
        ("PATCH", "/v1/streams", vec![], b"", 405, "route_not_found"),
        ("PUT", "/v1/scaling-policy", json_header.to_vec(), br#"{"min_replicas":5,"max_replicas":1,"target_bytes_per_second":1,"target_consumers":1,"hysteresis_percent":1,"scale_up_cooldown_ms":1,"scale_down_cooldown_ms":1}"#, 422, "invalid_argument"),
        ("POST", "/v1/groups/g/offsets", json_header.to_vec(), br#"{"offsets":[{"stream":"none","partition":0,"offset":1}]}"#, 404, "stream_not_found"),
        ("GET", "/v1/groups/nobody/offsets", vec![], b"", 404, "group_not_found"),
        ("POST", "/v1/brokers", json_header.to_vec(), br#"{"client_endpoint":"nohost","peer_endpoint":"h:1"}"#, 422, "invalid_argument"),
        ("POST", "/v1/brokers/77/heartbeat", json_header.to_vec(), b"{}", 404, "broker_not_found"),
        ("POST", "/v1/brokers/77/heartbeat", json_header.to_vec(), br#"{"history_read_bytes_per_second":18446744073709551615}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas", json_header.to_vec(), br#"{"endpoint":"nohost"}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas", json_header.to_vec(), br#"{"endpoint":"h:1","replica_id":"a/b"}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas", json_header.to_vec(), br#"{"endpoint":"h:1","replica_id":""}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas", json_header.to_vec(), br#"{"endpoint":"h:1","zone":""}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas/r-77/heartbeat", json_header.to_vec(), b"{}", 404, "read_replica_not_found"),
        ("POST", "/v1/read-replicas/r-77/heartbeat", json_header.to_vec(), br#"{"cache_hit_ratio_permille":1001}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas/r-77/heartbeat", json_header.to_vec(), br#"{"bytes_served_per_second":18446744073709551615}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas/r-77/heartbeat", json_header.to_vec(), br#"{"colour":1}"#, 422, "invalid_argument"),
        ("POST", "/v1/read-replicas/a%2Fb/heartbeat", json_header.to_vec(), b"{}", 400, "bad_request"),
        ("POST", "/v1/read-replicas/r-77/drain", vec![], b"", 404, "read_replica_not_found"),
        ("DELETE", "/v1/read-replicas/r-77", vec![], b"", 404, "read_replica_not_found"),
        ("DELETE", "/v1/read-replicas/%20", vec![], b"", 400, "bad_request"),
    ];
    for (method, path, headers, body, status, code) in cases {
        let reply = raw(addr, method, path, &headers, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{method} {path}: {:?}",
            reply.body
        );
        assert_eq!(
            reply.content_type.as_deref(),
            Some("application/json"),
            "{method} {path}"
        );
        assert!(reply.body["message"].is_string(), "{method} {path}");
    }
    running.shutdown().await;
}

#[tokio::test]
async fn every_documented_route_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let document = get(addr, "/v1/openapi.json").await;
    assert_eq!(document.status, 200);
    assert_eq!(document.body["openapi"], "3.1.0");
    let paths = document.body["paths"].as_object().expect("paths");
    assert!(paths.len() >= 15);
    for (path, operations) in paths {
        let concrete = path
            .replace("{name}", "orders")
            .replace("{broker_id}", "1")
            .replace("{group}", "g")
            .replace("{member}", "m1")
            .replace("{replica_id}", "r-1");
        for method in operations.as_object().expect("operations").keys() {
            let method = method.to_uppercase();
            let reply = raw(
                addr,
                &method,
                &concrete,
                &[("Content-Type", "application/json")],
                b"{}",
            )
            .await;
            assert!(
                reply.code() != "route_not_found",
                "{method} {path} is documented but not routed: {:?}",
                reply.body
            );
        }
    }
    running.shutdown().await;
}

#[tokio::test]
async fn group_offsets_are_committed_listed_and_reset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    live_broker(addr, 7100, None).await;
    assert_eq!(post(addr, "/v1/streams", &orders(2)).await.status, 201);
    let committed = post(
        addr,
        "/v1/groups/billing/offsets",
        &json!({ "offsets": [
            { "stream": "orders", "partition": 0, "offset": 40 },
            { "stream": "orders", "partition": 1, "offset": 41 },
        ]}),
    )
    .await;
    assert_eq!(committed.status, 200, "{:?}", committed.body);
    let groups = get(addr, "/v1/groups").await;
    assert_eq!(
        groups.body["groups"][0],
        json!({ "group": "billing", "streams": 1, "partitions": 2, "members": 0 })
    );

    let reset = post(
        addr,
        "/v1/groups/billing/reset",
        &json!({ "stream": "orders", "partitions": [1], "to": { "kind": "offset", "offset": 7 } }),
    )
    .await;
    assert_eq!(reset.status, 200, "{:?}", reset.body);
    let offsets: Vec<u64> = reset.body["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| o["offset"].as_u64().expect("offset"))
        .collect();
    assert_eq!(offsets, [40, 7]);
    let earliest = post(
        addr,
        "/v1/groups/billing/reset",
        &json!({ "stream": "orders", "to": { "kind": "earliest" } }),
    )
    .await;
    assert_eq!(earliest.body["offsets"][0]["offset"], 0);
    let latest = post(
        addr,
        "/v1/groups/billing/reset",
        &json!({ "stream": "orders", "to": { "kind": "latest" } }),
    )
    .await;
    assert_eq!((latest.status, latest.code()), (409, "range_unknown"));
    let missing = post(
        addr,
        "/v1/groups/billing/reset",
        &json!({ "stream": "orders", "partitions": [5], "to": { "kind": "earliest" } }),
    )
    .await;
    assert_eq!(
        (missing.status, missing.code()),
        (404, "partition_not_found")
    );
    running.shutdown().await;
}

#[tokio::test]
async fn the_scaling_policy_is_stored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let policy = json!({
        "min_replicas": 1, "max_replicas": 4, "target_bytes_per_second": 1000,
        "target_consumers": 10, "hysteresis_percent": 5, "scale_up_cooldown_ms": 100,
        "scale_down_cooldown_ms": 200,
    });
    let put = call(addr, "PUT", "/v1/scaling-policy", Some(&policy), None).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert_eq!(get(addr, "/v1/scaling-policy").await.body, policy);
    assert_eq!(
        get(addr, "/v1/read-replicas").await.body,
        json!({ "replicas": [] })
    );
    running.shutdown().await;
}

#[tokio::test]
async fn an_assignments_long_poll_answers_when_the_assignment_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let registered = post(
        addr,
        "/v1/brokers",
        &json!({ "client_endpoint": "127.0.0.1:7100", "peer_endpoint": "127.0.0.1:7101" }),
    )
    .await;
    assert_eq!(registered.status, 200, "{:?}", registered.body);
    let id = registered.body["broker_id"].as_u64().expect("id");
    let first = get(addr, &format!("/v1/brokers/{id}/assignments")).await;
    let version = first.body["version"].as_u64().expect("version");
    assert_eq!(first.body["streams"], json!([]));

    // Unchanged: the poll answers at its timeout with the same version.
    let started = Instant::now();
    let idle = get(
        addr,
        &format!("/v1/brokers/{id}/assignments?after_version={version}&timeout_ms=200"),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(idle.body["version"].as_u64(), Some(version));

    let poll = tokio::spawn(async move {
        let started = Instant::now();
        let reply = get(
            addr,
            &format!("/v1/brokers/{id}/assignments?after_version={version}&timeout_ms=20000"),
        )
        .await;
        (reply, started.elapsed())
    });
    // Whether the poll is already parked or arrives after the change, it must answer with
    // the new version long before its timeout.
    assert_eq!(post(addr, "/v1/streams", &orders(2)).await.status, 201);
    let (reply, waited) = poll.await.expect("poll task");
    assert!(
        waited < Duration::from_secs(10),
        "the poll waited for its timeout"
    );
    assert!(reply.body["version"].as_u64() > Some(version));
    let partitions = &reply.body["streams"][0]["partitions"];
    assert_eq!(partitions.as_array().map(Vec::len), Some(2));
    assert_eq!(partitions[0]["leader"].as_u64(), Some(id));

    // A heartbeat reports the version the broker should have.
    let beat = post(addr, &format!("/v1/brokers/{id}/heartbeat"), &json!({})).await;
    assert_eq!(beat.body["assignment_version"], reply.body["version"]);
    assert_eq!(beat.body["state"], "live");
    let drained = post(addr, &format!("/v1/brokers/{id}/drain"), &json!({})).await;
    assert_eq!(drained.body["state"], "draining");
    let brokers = eventually("the broker list", Duration::from_secs(5), || async {
        let reply = get(addr, "/v1/brokers").await;
        (reply.status == 200).then_some(reply.body)
    })
    .await;
    assert_eq!(
        brokers["brokers"][0]["replicas"], 2,
        "no other broker to move to"
    );
    running.shutdown().await;
}

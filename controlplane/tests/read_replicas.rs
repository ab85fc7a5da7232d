//! Read replicas over HTTP: registration, heartbeats with load, draining, leaving, and a
//! lapsed lease.

mod common;

use std::time::Duration;

use common::{call, eventually, get, post, start_sqlite};
use serde_json::{Value, json};

fn registration(id: Option<&str>, port: u16) -> Value {
    let mut body = json!({ "endpoint": format!("127.0.0.1:{port}"), "zone": "a" });
    if let Some(id) = id {
        body["replica_id"] = json!(id);
    }
    body
}

fn load(bytes: u64, consumers: u32) -> Value {
    json!({
        "bytes_served_per_second": bytes,
        "consumers": consumers,
        "fetch_latency_p99_us": 900,
        "cache_hit_ratio_permille": 970,
    })
}

#[tokio::test]
async fn a_replica_registers_heartbeats_drains_and_leaves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.lease = Duration::from_secs(30);
        config.heartbeat_interval = Duration::from_secs(10);
    })
    .await;
    let addr = running.local_addr();

    let assigned = post(addr, "/v1/read-replicas", &registration(None, 7500)).await;
    assert_eq!(assigned.status, 200, "{:?}", assigned.body);
    assert_eq!(
        assigned.body,
        json!({ "replica_id": "r-1", "lease_ms": 30_000, "heartbeat_interval_ms": 10_000 })
    );
    let chosen = post(addr, "/v1/read-replicas", &registration(Some("l-7"), 7501)).await;
    assert_eq!(chosen.body["replica_id"], "l-7");

    let beat = post(addr, "/v1/read-replicas/r-1/heartbeat", &load(4096, 3)).await;
    assert_eq!(beat.status, 200, "{:?}", beat.body);
    assert_eq!(beat.body, json!({ "state": "live", "lease_ms": 30_000 }));
    let listed = get(addr, "/v1/read-replicas").await.body;
    let first = &listed["replicas"][1];
    assert_eq!(first["replica_id"], "r-1");
    assert_eq!(first["endpoint"], "127.0.0.1:7500");
    assert_eq!(first["zone"], "a");
    assert_eq!(first["bytes_served_per_second"], 4096);
    assert_eq!(first["consumers"], 3);
    assert_eq!(first["fetch_latency_p99_us"], 900);
    assert_eq!(first["cache_hit_ratio_permille"], 970);

    let drained = post(addr, "/v1/read-replicas/r-1/drain", &json!({})).await;
    assert_eq!(drained.status, 200, "{:?}", drained.body);
    assert_eq!(drained.body["state"], "draining");
    let beat = post(addr, "/v1/read-replicas/r-1/heartbeat", &load(0, 0)).await;
    assert_eq!(
        beat.body["state"], "draining",
        "the replica learns it drains"
    );
    let again = post(addr, "/v1/read-replicas", &registration(Some("r-1"), 7500)).await;
    assert_eq!(again.status, 200);
    let listed = get(addr, "/v1/read-replicas").await.body;
    assert_eq!(
        listed["replicas"][1]["state"], "draining",
        "registering again does not undo a drain"
    );

    let left = call(addr, "DELETE", "/v1/read-replicas/r-1", None, None).await;
    assert_eq!(left.status, 204, "{:?}", left.body);
    let gone = post(addr, "/v1/read-replicas/r-1/heartbeat", &load(0, 0)).await;
    assert_eq!((gone.status, gone.code()), (404, "read_replica_not_found"));
    let ids: Vec<Value> = get(addr, "/v1/read-replicas").await.body["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .map(|r| r["replica_id"].clone())
        .collect();
    assert_eq!(ids, [json!("l-7")]);
    running.shutdown().await;
}

#[tokio::test]
async fn a_silent_replica_is_declared_dead_then_forgotten_and_may_come_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        // `chatty` beats every 50 ms; the lease leaves room for a loaded machine (a 300 ms
        // lease lapsed once in CI between two beats).
        config.lease = Duration::from_secs(2);
        config.reconcile_interval = Duration::from_millis(50);
        config.read_replica_forget_after = Duration::from_millis(600);
    })
    .await;
    let addr = running.local_addr();
    for id in ["quiet", "chatty"] {
        let reply = post(addr, "/v1/read-replicas", &registration(Some(id), 7500)).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    // `chatty` keeps heartbeating, `quiet` does not.
    let beats = tokio::spawn(async move {
        loop {
            let reply = post(addr, "/v1/read-replicas/chatty/heartbeat", &load(1, 1)).await;
            assert_eq!(reply.status, 200, "{:?}", reply.body);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let states = || async {
        let list = get(addr, "/v1/read-replicas").await.body;
        list["replicas"]
            .as_array()
            .map(|replicas| {
                replicas
                    .iter()
                    .map(|r| (r["replica_id"].clone(), r["state"].clone()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    eventually("quiet declared dead", Duration::from_secs(10), || async {
        (states().await
            == [
                (json!("chatty"), json!("live")),
                (json!("quiet"), json!("dead")),
            ])
        .then_some(())
    })
    .await;
    let refused = post(addr, "/v1/read-replicas/quiet/heartbeat", &load(0, 0)).await;
    assert_eq!((refused.status, refused.code()), (409, "lease_expired"));

    eventually("quiet forgotten", Duration::from_secs(10), || async {
        (states().await == [(json!("chatty"), json!("live"))]).then_some(())
    })
    .await;
    let back = post(
        addr,
        "/v1/read-replicas",
        &registration(Some("quiet"), 7502),
    )
    .await;
    assert_eq!(back.status, 200);
    let beat = post(addr, "/v1/read-replicas/quiet/heartbeat", &load(0, 0)).await;
    assert_eq!(beat.body["state"], "live");
    beats.abort();
    running.shutdown().await;
}

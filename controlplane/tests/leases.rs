//! Three brokers; one stops heartbeating; its lease lapses, it is reported dead and its
//! unreplicated partitions are re-placed on the two that remain. (Replicated partitions keep
//! their replicas and elect a new leader instead: `tests/elections.rs`.)

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{eventually, get, post, start_sqlite};
use serde_json::{Value, json};

#[tokio::test]
async fn a_broker_that_stops_heartbeating_is_declared_dead_and_its_partitions_move() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.lease = Duration::from_millis(1000);
        config.reconcile_interval = Duration::from_millis(50);
    })
    .await;
    let addr = running.local_addr();
    let mut ids = Vec::new();
    for (port, zone) in [(7100, "a"), (7200, "b"), (7300, "c")] {
        let reply = post(
            addr,
            "/v1/brokers",
            &json!({
                "client_endpoint": format!("127.0.0.1:{port}"),
                "peer_endpoint": format!("127.0.0.1:{}", port + 1),
                "zone": zone,
            }),
        )
        .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        ids.push(reply.body["broker_id"].as_u64().expect("id"));
    }
    let created = post(
        addr,
        "/v1/streams",
        &json!({ "name": "orders", "partitions": 6, "replication_factor": 1 }),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let before = get(addr, "/v1/streams/orders").await.body;
    let victim = ids[2];
    let held_by_victim: HashSet<u64> = partitions(&before)
        .filter(|p| replicas(p).contains(&victim))
        .map(|p| p["partition"].as_u64().expect("partition"))
        .collect();
    assert_eq!(
        held_by_victim.len(),
        2,
        "6 partitions × 1 replica over 3 brokers"
    );

    // Brokers 1 and 2 keep heartbeating; broker 3 has gone silent.
    let survivors = [ids[0], ids[1]];
    let heartbeats = tokio::spawn(async move {
        loop {
            for id in survivors {
                let reply = post(addr, &format!("/v1/brokers/{id}/heartbeat"), &json!({})).await;
                assert_eq!(reply.status, 200, "{:?}", reply.body);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    eventually(
        "broker 3 declared dead",
        Duration::from_secs(10),
        || async {
            let brokers = get(addr, "/v1/brokers").await.body;
            let states: Vec<&str> = brokers["brokers"]
                .as_array()?
                .iter()
                .map(|b| b["state"].as_str().unwrap_or(""))
                .collect();
            (states == ["live", "live", "dead"]).then_some(())
        },
    )
    .await;

    let after = eventually("partitions re-placed", Duration::from_secs(10), || async {
        let description = get(addr, "/v1/streams/orders").await.body;
        let healed = partitions(&description).all(|p| {
            let set = replicas(p);
            set.len() == 1 && !set.contains(&victim) && p["leader"].as_u64() == set.first().copied()
        });
        healed.then_some(description)
    })
    .await;
    for (old, new) in partitions(&before).zip(partitions(&after)) {
        let partition = old["partition"].as_u64().expect("partition");
        let epoch = |p: &Value| p["epoch"].as_u64().expect("epoch");
        if held_by_victim.contains(&partition) {
            assert_eq!(
                epoch(new),
                epoch(old) + 1,
                "partition {partition} moved, new epoch"
            );
        } else {
            assert_eq!(new, old, "partition {partition} did not involve broker 3");
        }
    }
    heartbeats.abort();
    // The dead broker must register again; its heartbeat is refused.
    let late = post(addr, &format!("/v1/brokers/{victim}/heartbeat"), &json!({})).await;
    assert_eq!((late.status, late.code()), (409, "lease_expired"));
    running.shutdown().await;
}

fn partitions(description: &Value) -> impl Iterator<Item = &Value> {
    description["partitions"].as_array().into_iter().flatten()
}

fn replicas(partition: &Value) -> Vec<u64> {
    partition["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect()
}

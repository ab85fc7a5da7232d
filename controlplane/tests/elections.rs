//! Elections of replicated partitions' leaders over real HTTP, against a controlplane on
//! SQLite: brokers register, the controlplane announces an election in their assignments,
//! replicas report, and the most up-to-date of a majority leads.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Reply, eventually, get, post, start_sqlite};
use serde_json::{Value, json};

/// Registers a broker in `zone` and heartbeats it once; returns its id.
async fn register(addr: SocketAddr, port: u16, zone: &str) -> u64 {
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
    let id = reply.body["broker_id"].as_u64().expect("id");
    assert_eq!(heartbeat(addr, id).await.status, 200);
    id
}

async fn heartbeat(addr: SocketAddr, id: u64) -> Reply {
    post(addr, &format!("/v1/brokers/{id}/heartbeat"), &json!({})).await
}

/// Three brokers in three zones and a stream `orders` of one partition replicated on all.
async fn three_brokers_and_a_replicated_stream(addr: SocketAddr) -> Vec<u64> {
    let mut ids = Vec::new();
    for (port, zone) in [(7100, "a"), (7200, "b"), (7300, "c")] {
        ids.push(register(addr, port, zone).await);
    }
    let created = post(
        addr,
        "/v1/streams",
        &json!({ "name": "orders", "partitions": 1, "replication_factor": 3 }),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    ids
}

/// Broker `id`'s assignment of `orders`/0, and the assignment version.
async fn assignment(addr: SocketAddr, id: u64) -> (Value, u64) {
    let reply = get(addr, &format!("/v1/brokers/{id}/assignments")).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let version = reply.body["version"].as_u64().expect("version");
    (reply.body["streams"][0]["partitions"][0].clone(), version)
}

fn replicas(partition: &Value) -> Vec<u64> {
    partition["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect()
}

fn electing(partition: &Value) -> bool {
    partition["electing"].as_bool().unwrap_or(false)
}

fn epoch(partition: &Value) -> u64 {
    partition["epoch"].as_u64().expect("epoch")
}

async fn report(addr: SocketAddr, id: u64, epoch: u64, outcome: Value) -> Reply {
    let body = json!({ "stream": "orders", "partition": 0, "epoch": epoch, "outcome": outcome });
    post(addr, &format!("/v1/brokers/{id}/elections"), &body).await
}

fn reported(last_epoch: u64, end: u64) -> Value {
    json!({ "kind": "reported", "last_epoch": last_epoch, "end": end })
}

fn refused(promised: u64) -> Value {
    json!({ "kind": "refused", "promised": promised })
}

#[tokio::test]
async fn the_most_up_to_date_of_a_majority_leads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.partition_election_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = running.local_addr();
    let ids = three_brokers_and_a_replicated_stream(addr).await;
    for id in &ids {
        let (partition, _) = assignment(addr, *id).await;
        assert!(electing(&partition), "{partition}");
        assert_eq!((epoch(&partition), &partition["leader"]), (1, &Value::Null));
    }
    let (partition, version) = assignment(addr, ids[0]).await;
    let set = replicas(&partition);
    assert_eq!(set.len(), 3);

    let outsider = register(addr, 7400, "d").await;
    let refused_outsider = report(addr, outsider, 1, reported(0, 0)).await;
    assert_eq!(
        (refused_outsider.status, refused_outsider.code()),
        (409, "conflict")
    );
    let stale = report(addr, set[1], 0, reported(0, 50)).await;
    assert_eq!(
        stale.status, 204,
        "a stale epoch is ignored: {:?}",
        stale.body
    );

    // The first member is behind; the last has the longest log.
    let path = format!(
        "/v1/brokers/{}/assignments?after_version={version}&timeout_ms=20000",
        set[0]
    );
    let long_poll = tokio::spawn(async move { get(addr, &path).await });
    let first = report(addr, set[0], 1, reported(0, 10)).await;
    assert_eq!(first.status, 204, "{:?}", first.body);
    assert!(
        electing(&assignment(addr, set[0]).await.0),
        "one report of three decides nothing"
    );
    let started = Instant::now();
    let second = report(addr, set[2], 1, reported(0, 25)).await;
    assert_eq!(second.status, 204, "{:?}", second.body);
    let announced = long_poll.await.expect("long-poll");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "announced at once"
    );
    assert!(announced.body["version"].as_u64().expect("version") > version);
    let decided = &announced.body["streams"][0]["partitions"][0];
    assert_eq!(decided["leader"].as_u64(), Some(set[2]), "{decided}");
    assert!(!electing(decided));
    assert_eq!(epoch(decided), 1);

    let late = report(addr, set[1], 1, reported(0, 99)).await;
    assert_eq!(late.status, 204);
    let (after, _) = assignment(addr, set[1]).await;
    assert_eq!(
        after["leader"].as_u64(),
        Some(set[2]),
        "a late report changes nothing"
    );
    let described = get(addr, "/v1/streams/orders").await.body;
    assert_eq!(described["partitions"][0]["leader"].as_u64(), Some(set[2]));
    running.shutdown().await;
}

#[tokio::test]
async fn a_refusal_starts_a_new_election_above_the_promised_epoch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.partition_election_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = running.local_addr();
    let ids = three_brokers_and_a_replicated_stream(addr).await;
    let (partition, before) = assignment(addr, ids[0]).await;
    let set = replicas(&partition);
    assert_eq!(report(addr, set[0], 1, reported(0, 0)).await.status, 204);
    let refusal = report(addr, set[1], 1, refused(7)).await;
    assert_eq!(refusal.status, 204, "{:?}", refusal.body);
    let (again, version) = assignment(addr, ids[0]).await;
    assert_eq!((epoch(&again), electing(&again)), (8, true), "{again}");
    assert!(version > before);
    assert_eq!(replicas(&again), set);

    // The report of epoch 1 does not count for epoch 8.
    assert_eq!(report(addr, set[2], 8, reported(1, 40)).await.status, 204);
    assert!(electing(&assignment(addr, ids[0]).await.0));
    assert_eq!(report(addr, set[1], 8, reported(1, 30)).await.status, 204);
    let (led, _) = assignment(addr, ids[0]).await;
    assert_eq!(led["leader"].as_u64(), Some(set[2]));

    // The winner restarted after reporting: it refuses to lead, and the election reruns.
    assert_eq!(report(addr, set[2], 8, refused(8)).await.status, 204);
    let (rerun, _) = assignment(addr, ids[0]).await;
    assert_eq!((epoch(&rerun), electing(&rerun)), (9, true), "{rerun}");
    assert_eq!(rerun["leader"], Value::Null);
    running.shutdown().await;
}

#[tokio::test]
async fn a_lapsed_leader_lease_starts_an_election_with_the_same_replicas() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lease = Duration::from_millis(1000);
    // The default reconcile interval: the reconciler must wake for the lapse by itself.
    let running = start_sqlite(dir.path(), |config| {
        config.lease = lease;
        config.partition_election_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = running.local_addr();
    let ids = three_brokers_and_a_replicated_stream(addr).await;
    let (partition, _) = assignment(addr, ids[0]).await;
    let set = replicas(&partition);
    assert_eq!(report(addr, set[0], 1, reported(0, 9)).await.status, 204);
    assert_eq!(report(addr, set[1], 1, reported(0, 5)).await.status, 204);
    let leader = set[0];
    assert_eq!(
        assignment(addr, leader).await.0["leader"].as_u64(),
        Some(leader)
    );

    // The followers keep heartbeating; the leader goes silent now.
    let last_heartbeat = Instant::now();
    assert_eq!(heartbeat(addr, leader).await.status, 200);
    let followers = [set[1], set[2]];
    let heartbeats = tokio::spawn(async move {
        loop {
            for id in followers {
                assert_eq!(heartbeat(addr, id).await.status, 200);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let election = eventually(
        "an election at epoch 2",
        Duration::from_secs(10),
        || async {
            let (partition, _) = assignment(addr, set[1]).await;
            (epoch(&partition) == 2).then_some(partition)
        },
    )
    .await;
    let took = last_heartbeat.elapsed();
    assert!(
        took < lease + Duration::from_secs(1),
        "started {took:?} after the last heartbeat"
    );
    assert!(electing(&election), "{election}");
    assert_eq!(replicas(&election), set, "the dead leader stays a member");

    assert_eq!(report(addr, set[2], 2, reported(1, 9)).await.status, 204);
    let from_the_dead = report(addr, leader, 2, reported(1, 50)).await;
    assert_eq!(from_the_dead.status, 204);
    assert!(
        electing(&assignment(addr, set[1]).await.0),
        "a dead reporter does not count"
    );
    assert_eq!(report(addr, set[1], 2, reported(1, 5)).await.status, 204);
    let (led, _) = assignment(addr, set[1]).await;
    assert_eq!((epoch(&led), led["leader"].as_u64()), (2, Some(set[2])));
    heartbeats.abort();
    running.shutdown().await;
}

#[tokio::test]
async fn draining_the_leader_moves_the_leadership_but_not_the_replicas() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.partition_election_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = running.local_addr();
    let ids = three_brokers_and_a_replicated_stream(addr).await;
    let set = replicas(&assignment(addr, ids[0]).await.0);
    assert_eq!(report(addr, set[0], 1, reported(0, 3)).await.status, 204);
    assert_eq!(report(addr, set[1], 1, reported(0, 3)).await.status, 204);
    assert_eq!(
        assignment(addr, set[0]).await.0["leader"].as_u64(),
        Some(set[0])
    );

    let drained = post(addr, &format!("/v1/brokers/{}/drain", set[0]), &json!({})).await;
    assert_eq!(drained.status, 200, "{:?}", drained.body);
    let election = eventually(
        "an election at epoch 2",
        Duration::from_secs(10),
        || async {
            let (partition, _) = assignment(addr, set[1]).await;
            (epoch(&partition) == 2).then_some(partition)
        },
    )
    .await;
    assert!(electing(&election));
    assert_eq!(
        replicas(&election),
        set,
        "a replicated partition keeps its members"
    );
    assert_eq!(report(addr, set[0], 2, reported(1, 3)).await.status, 204);
    assert_eq!(report(addr, set[1], 2, reported(1, 3)).await.status, 204);
    assert!(
        electing(&assignment(addr, set[1]).await.0),
        "a draining broker does not count"
    );
    assert_eq!(report(addr, set[2], 2, reported(1, 3)).await.status, 204);
    let (led, _) = assignment(addr, set[1]).await;
    assert_eq!(
        led["leader"].as_u64(),
        Some(set[1]),
        "the earliest live member of a tie"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_replicated_stream_is_refused_until_enough_brokers_are_live_then_elects() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.partition_election_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = running.local_addr();
    let request = json!({ "name": "orders", "partitions": 1, "replication_factor": 3 });
    let create = || post(addr, "/v1/streams", &request);
    // A stream that could take no write is refused, saying what to do.
    let refused = create().await;
    assert_eq!(refused.status, 422, "{:?}", refused.body);
    let message = refused.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("no broker is live"), "{message}");

    let mut ids = vec![register(addr, 7100, "a").await];
    let refused = create().await;
    assert_eq!(refused.status, 422, "{:?}", refused.body);
    let message = refused.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("replication factor 3 needs 3 live brokers and 1 is live")
            && message.contains("--replication-factor 1"),
        "{message}"
    );
    assert_eq!(get(addr, "/v1/streams/orders").await.status, 404);

    for (port, zone) in [(7200, "b"), (7300, "c")] {
        ids.push(register(addr, port, zone).await);
    }
    let created = create().await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = ids[0];
    let placed = eventually("placed and electing", Duration::from_secs(10), || async {
        let (partition, _) = assignment(addr, id).await;
        electing(&partition).then_some(partition)
    })
    .await;
    assert_eq!(placed["leader"], Value::Null, "{placed}");
    let set = replicas(&placed);
    assert_eq!(set.len(), 3, "{placed}");
    let at = epoch(&placed);
    for member in &set {
        assert_eq!(report(addr, *member, at, reported(0, 0)).await.status, 204);
    }
    let (led, _) = assignment(addr, id).await;
    assert_eq!(led["leader"].as_u64(), Some(set[0]), "{led}");
    running.shutdown().await;
}

#[tokio::test]
async fn an_undecided_election_starts_again_after_the_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| {
        config.partition_election_timeout = Duration::from_millis(300);
        config.reconcile_interval = Duration::from_millis(50);
    })
    .await;
    let addr = running.local_addr();
    let ids = three_brokers_and_a_replicated_stream(addr).await;
    assert_eq!(report(addr, ids[0], 1, reported(0, 0)).await.status, 204);
    let rerun = eventually("a new election", Duration::from_secs(10), || async {
        let (partition, _) = assignment(addr, ids[0]).await;
        (epoch(&partition) > 1).then_some(partition)
    })
    .await;
    assert!(electing(&rerun), "{rerun}");
    running.shutdown().await;
}

#[tokio::test]
async fn a_restarted_controlplane_starts_running_elections_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let slow = |config: &mut floe_controlplane::Config| {
        config.partition_election_timeout = Duration::from_secs(60);
    };
    let running = start_sqlite(dir.path(), slow).await;
    let ids = three_brokers_and_a_replicated_stream(running.local_addr()).await;
    running.shutdown().await;

    let running = start_sqlite(dir.path(), slow).await;
    let addr = running.local_addr();
    let fresh = eventually("a fresh election", Duration::from_secs(10), || async {
        let (partition, _) = assignment(addr, ids[0]).await;
        (epoch(&partition) == 2).then_some(partition)
    })
    .await;
    assert!(
        electing(&fresh),
        "the reports sent before the restart are lost"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn bad_election_reports_are_a_json_4xx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    let ids = three_brokers_and_a_replicated_stream(addr).await;
    let path = format!("/v1/brokers/{}/elections", ids[0]);
    let cases = [
        (
            json!({ "stream": "nowhere", "partition": 0, "epoch": 1, "outcome": reported(0, 0) }),
            404,
            "stream_not_found",
        ),
        (
            json!({ "stream": "orders", "partition": 5, "epoch": 1, "outcome": reported(0, 0) }),
            404,
            "partition_not_found",
        ),
        (
            json!({ "stream": "orders", "partition": 0, "epoch": 1, "outcome": { "kind": "won" } }),
            422,
            "invalid_argument",
        ),
        (
            json!({ "stream": "orders", "partition": 0, "epoch": 1 }),
            422,
            "invalid_argument",
        ),
        (
            json!({ "stream": "orders", "partition": 0, "epoch": 1, "outcome": refused(u64::MAX) }),
            422,
            "invalid_argument",
        ),
    ];
    for (body, status, code) in cases {
        let reply = post(addr, &path, &body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {:?}",
            reply.body
        );
    }
    running.shutdown().await;
}

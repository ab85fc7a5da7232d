//! Consumer-group membership over the REST API of a real controlplane: partitions change
//! hands only once their owner gives them up, a waiting heartbeat wakes at once when they
//! do, a member that missed a rebalance or whose session lapsed cannot commit, and resets
//! and deletes wait for an empty group.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{call, live_broker, post, start_sqlite};
use serde_json::{Value, json};

async fn stream(addr: SocketAddr, name: &str, partitions: u32) {
    let body = json!({ "name": name, "partitions": partitions, "replication_factor": 1 });
    let reply = post(addr, "/v1/streams", &body).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
}

async fn join(addr: SocketAddr, group: &str, session_ms: u64) -> Value {
    let body = json!({ "streams": ["s"], "session_timeout_ms": session_ms, "client_id": "test" });
    let reply = post(addr, &format!("/v1/groups/{group}/members"), &body).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

fn partitions(list: &Value) -> BTreeSet<u64> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|p| p["partition"].as_u64().expect("a partition"))
        .collect()
}

fn slots(partitions: &BTreeSet<u64>) -> Value {
    Value::Array(
        partitions
            .iter()
            .map(|p| json!({ "stream": "s", "partition": p }))
            .collect(),
    )
}

async fn heartbeat(
    addr: SocketAddr,
    member: &Value,
    owned: &BTreeSet<u64>,
    wait_ms: u64,
) -> common::Reply {
    let path = format!(
        "/v1/groups/{}/members/{}/heartbeat",
        member["group"].as_str().expect("group"),
        member["member_id"].as_str().expect("id")
    );
    post(
        addr,
        &path,
        &json!({ "owned": slots(owned), "wait_ms": wait_ms }),
    )
    .await
}

async fn commit(
    addr: SocketAddr,
    member: &Value,
    generation: u64,
    partitions: &BTreeSet<u64>,
) -> common::Reply {
    let offsets: Vec<Value> = partitions
        .iter()
        .map(|p| json!({ "stream": "s", "partition": p, "offset": 10 + p }))
        .collect();
    let body = json!({
        "offsets": offsets,
        "member": { "member_id": member["member_id"], "generation": generation },
    });
    post(
        addr,
        &format!(
            "/v1/groups/{}/offsets",
            member["group"].as_str().expect("group")
        ),
        &body,
    )
    .await
}

#[tokio::test]
async fn partitions_change_hands_only_once_given_up_and_waiting_members_hear_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    live_broker(addr, 7100, None).await;
    stream(addr, "s", 4).await;

    let a = join(addr, "g", 10_000).await;
    let a_owned = partitions(&a["assignment"]);
    assert_eq!(a_owned.len(), 4);
    let b = join(addr, "g", 10_000).await;
    assert!(
        partitions(&b["assignment"]).is_empty(),
        "a still reads them all"
    );
    assert_eq!(partitions(&b["pending"]).len(), 2);

    // b waits; a hears of the rebalance, commits what it gives up, then lets it go.
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = heartbeat(addr, &b, &BTreeSet::new(), 3_000).await;
            (reply, started.elapsed())
        })
    };
    let a2 = heartbeat(addr, &a, &a_owned, 0).await;
    assert_eq!(a2.status, 200, "{:?}", a2.body);
    let a_kept = partitions(&a2.body["assignment"]);
    assert_eq!(a_kept.len(), 2);
    let given_up: BTreeSet<u64> = a_owned.difference(&a_kept).copied().collect();
    let generation = a2.body["generation"].as_u64().expect("generation");
    // A commit naming the generation before the rebalance is stale.
    let stale = commit(addr, &a, a["generation"].as_u64().expect("gen"), &given_up).await;
    assert_eq!((stale.status, stale.code()), (409, "stale_generation"));
    let committed = commit(addr, &a, generation, &given_up).await;
    assert_eq!(committed.status, 200, "{:?}", committed.body);
    let released = heartbeat(addr, &a, &a_kept, 0).await;
    assert_eq!(released.status, 200);

    let (b2, waited) = waiting.await.expect("the waiting heartbeat");
    assert_eq!(b2.status, 200, "{:?}", b2.body);
    assert_eq!(partitions(&b2.body["assignment"]), given_up);
    assert!(
        waited < Duration::from_millis(2_000),
        "the waiting heartbeat answered when the partitions were free, after {waited:?}"
    );
    // a no longer reads them: its commit there is refused.
    let moved = commit(addr, &a, generation, &given_up).await;
    assert_eq!(
        (moved.status, moved.code()),
        (409, "partition_not_assigned")
    );

    let described = call(addr, "GET", "/v1/groups/g", None, None).await;
    assert_eq!(described.status, 200);
    assert_eq!(described.body["state"], "stable");
    assert_eq!(described.body["members"].as_array().map(Vec::len), Some(2));
    for p in &given_up {
        let row = &described.body["partitions"][*p as usize];
        assert_eq!(row["committed"], 10 + p);
        assert_eq!(row["member"], b["member_id"]);
    }
    running.shutdown().await;
}

#[tokio::test]
async fn a_member_whose_session_lapsed_cannot_commit_and_its_partitions_move() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let addr = running.local_addr();
    live_broker(addr, 7100, None).await;
    stream(addr, "s", 4).await;

    let a = join(addr, "g", 600).await;
    let b = join(addr, "g", 10_000).await;
    let a_owned = partitions(&a["assignment"]);
    // a falls silent; b heartbeats and waits for the partitions a never gave up.
    let started = Instant::now();
    let mut b_owned = BTreeSet::new();
    while b_owned.len() < 4 {
        let reply = heartbeat(addr, &b, &b_owned, 100).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        b_owned = partitions(&reply.body["assignment"]);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "b never got all four"
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(600 + 1_000),
        "taken over {:?} after a fell silent",
        started.elapsed()
    );
    let late = commit(addr, &a, 99, &a_owned).await;
    assert_eq!((late.status, late.code()), (409, "unknown_member"));
    let late_beat = heartbeat(addr, &a, &a_owned, 0).await;
    assert_eq!(
        (late_beat.status, late_beat.code()),
        (409, "unknown_member")
    );
    running.shutdown().await;
}

#[tokio::test]
async fn resets_deletes_and_memberless_commits_wait_for_an_empty_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_sqlite(dir.path(), |config| config.max_group_members = 2).await;
    let addr = running.local_addr();
    live_broker(addr, 7100, None).await;
    stream(addr, "s", 2).await;

    let a = join(addr, "g", 10_000).await;
    let reset = json!({ "stream": "s", "to": { "kind": "offset", "offset": 5 } });
    let refused = post(addr, "/v1/groups/g/reset", &reset).await;
    assert_eq!((refused.status, refused.code()), (409, "group_not_empty"));
    let forced = json!({ "stream": "s", "to": { "kind": "offset", "offset": 5 }, "force": true });
    assert_eq!(post(addr, "/v1/groups/g/reset", &forced).await.status, 200);
    let memberless = json!({ "offsets": [{ "stream": "s", "partition": 0, "offset": 1 }] });
    let refused = post(addr, "/v1/groups/g/offsets", &memberless).await;
    assert_eq!((refused.status, refused.code()), (409, "group_not_empty"));
    let refused = call(addr, "DELETE", "/v1/groups/g", None, None).await;
    assert_eq!((refused.status, refused.code()), (409, "group_not_empty"));

    let path = format!(
        "/v1/groups/g/members/{}",
        a["member_id"].as_str().expect("id")
    );
    assert_eq!(call(addr, "DELETE", &path, None, None).await.status, 204);
    assert_eq!(
        call(addr, "DELETE", &path, None, None).await.status,
        204,
        "leaving twice"
    );
    assert_eq!(
        post(addr, "/v1/groups/g/offsets", &memberless).await.status,
        200
    );
    assert_eq!(
        call(addr, "DELETE", "/v1/groups/g", None, None)
            .await
            .status,
        204
    );
    let gone = call(addr, "GET", "/v1/groups/g", None, None).await;
    assert_eq!((gone.status, gone.code()), (404, "group_not_found"));

    // A group holds at most --max-group-members (2 here).
    let first = join(addr, "full", 10_000).await;
    join(addr, "full", 10_000).await;
    let refused = post(
        addr,
        "/v1/groups/full/members",
        &json!({ "streams": ["s"] }),
    )
    .await;
    assert_eq!((refused.status, refused.code()), (429, "limit_exceeded"));
    assert!(
        refused.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-group-members")),
        "{:?}",
        refused.body
    );
    let path = format!(
        "/v1/groups/full/members/{}",
        first["member_id"].as_str().expect("id")
    );
    assert_eq!(call(addr, "DELETE", &path, None, None).await.status, 204);
    join(addr, "full", 10_000).await;

    // Bad joins are refused with what is wrong.
    let none = post(addr, "/v1/groups/g/members", &json!({ "streams": [] })).await;
    assert_eq!((none.status, none.code()), (422, "invalid_argument"));
    let fast = json!({ "streams": ["s"], "session_timeout_ms": 10 });
    let fast = post(addr, "/v1/groups/g/members", &fast).await;
    assert_eq!((fast.status, fast.code()), (422, "invalid_argument"));
    let missing = post(
        addr,
        "/v1/groups/g/members",
        &json!({ "streams": ["nope"] }),
    )
    .await;
    assert_eq!((missing.status, missing.code()), (404, "stream_not_found"));
    running.shutdown().await;
}

//! Two `floe-controlplane` processes on one PostgreSQL: one leads, the other stands by; the
//! leader is killed with SIGKILL, the standby takes over and every stream is still there.
//! Skipped unless `FLOE_TEST_POSTGRES_URL` is set.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{eventually, get, post};
use serde_json::json;

/// A controlplane process; killed when dropped.
struct Process {
    child: Child,
    addr: SocketAddr,
}

impl Process {
    fn start(database_url: &str) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_floe-controlplane"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                database_url,
                "--election-interval-ms",
                "100",
                "--insecure-no-auth",
                "--insecure-plain-http",
            ])
            .env("FLOE_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("floe-controlplane starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the address line");
        let addr = line
            .trim()
            .rsplit("http://")
            .next()
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Process { child, addr }
    }

    fn kill(&mut self) {
        // SIGKILL: no shutdown path runs; the database notices the closed session.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn role(addr: SocketAddr) -> (u16, String) {
    let reply = get(addr, "/v1/ready").await;
    (
        reply.status,
        reply.body["role"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test]
async fn the_standby_takes_over_when_the_leader_is_killed() {
    let Some(url) = common::fresh_postgres_database("failover").await else {
        eprintln!("FLOE_TEST_POSTGRES_URL is not set; failover test skipped");
        return;
    };
    let mut first = Process::start(&url);
    eventually(
        "the first controlplane leads",
        Duration::from_secs(20),
        || async { (role(first.addr).await == (200, "leader".to_owned())).then_some(()) },
    )
    .await;
    let second = Process::start(&url);
    assert_eq!(role(second.addr).await, (503, "standby".to_owned()));
    let refused = get(second.addr, "/v1/streams").await;
    assert_eq!((refused.status, refused.code()), (503, "not_leader"));

    common::live_broker(first.addr, 7100, None).await;
    let created = post(
        first.addr,
        "/v1/streams",
        &json!({ "name": "orders", "partitions": 8, "replication_factor": 1 }),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let committed = post(
        first.addr,
        "/v1/groups/billing/offsets",
        &json!({ "offsets": [{ "stream": "orders", "partition": 3, "offset": 99 }] }),
    )
    .await;
    assert_eq!(committed.status, 200);
    let before = get(first.addr, "/v1/streams/orders").await.body;

    first.kill();
    eventually(
        "the standby takes over",
        Duration::from_secs(20),
        || async { (role(second.addr).await == (200, "leader".to_owned())).then_some(()) },
    )
    .await;
    let after = get(second.addr, "/v1/streams/orders").await;
    assert_eq!(after.status, 200);
    assert_eq!(after.body, before, "the stream survived the failover");
    let offsets = get(second.addr, "/v1/groups/billing/offsets").await;
    assert_eq!(offsets.body["offsets"][0]["offset"], 99);
    // The new leader accepts writes.
    let more = post(
        second.addr,
        "/v1/streams",
        &json!({ "name": "audit", "partitions": 1, "replication_factor": 1 }),
    )
    .await;
    assert_eq!(more.status, 201);
}

/// The reports of a running partition election live in the leader's memory only: the
/// controlplane that takes over starts the election again at a newer epoch.
#[tokio::test]
async fn a_new_leader_starts_running_partition_elections_again() {
    let Some(url) = common::fresh_postgres_database("failover_elections").await else {
        eprintln!("FLOE_TEST_POSTGRES_URL is not set; failover test skipped");
        return;
    };
    let mut first = Process::start(&url);
    eventually(
        "the first controlplane leads",
        Duration::from_secs(20),
        || async { (role(first.addr).await == (200, "leader".to_owned())).then_some(()) },
    )
    .await;
    let second = Process::start(&url);
    for port in [7100, 7200, 7300] {
        let registered = post(
            first.addr,
            "/v1/brokers",
            &json!({
                "client_endpoint": format!("127.0.0.1:{port}"),
                "peer_endpoint": format!("127.0.0.1:{}", port + 1),
            }),
        )
        .await;
        assert_eq!(registered.status, 200, "{:?}", registered.body);
    }
    let created = post(
        first.addr,
        "/v1/streams",
        &json!({ "name": "orders", "partitions": 1, "replication_factor": 3 }),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let partition =
        |addr| async move { get(addr, "/v1/streams/orders").await.body["partitions"][0].clone() };
    let before = partition(first.addr).await;
    assert_eq!(
        (&before["epoch"], &before["electing"]),
        (&json!(1), &json!(true))
    );
    // One report of three: recorded in the first leader's memory, deciding nothing.
    let reported = post(
        first.addr,
        "/v1/brokers/1/elections",
        &json!({ "stream": "orders", "partition": 0, "epoch": 1,
                 "outcome": { "kind": "reported", "last_epoch": 0, "end": 0 } }),
    )
    .await;
    assert_eq!(reported.status, 204, "{:?}", reported.body);

    first.kill();
    let after = eventually("a fresh election", Duration::from_secs(20), || async {
        if role(second.addr).await.0 != 200 {
            return None;
        }
        let after = partition(second.addr).await;
        (after["epoch"] == 2).then_some(after)
    })
    .await;
    assert_eq!(after["electing"], true);
    assert_eq!(after["replicas"], before["replicas"]);
}

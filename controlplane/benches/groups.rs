//! Consumer groups on a real controlplane over loopback HTTP, on SQLite (and PostgreSQL when
//! `FLOE_TEST_POSTGRES_URL` is set):
//!
//! 1. rebalance time of 100 members on a 1,000-partition stream: all joining at once, one
//!    leaving, one joining — from the change until every partition is read by the member
//!    meant to have it. Each member is a task that heartbeats as the client library does
//!    (long-polling, giving up at once what it is told to);
//! 2. commits: the 100 members each commit their 10 partitions in one request, back to back,
//!    for `FLOE_BENCH_SECS` (default 5): requests and offsets per second, and latency.
//!
//! The last line is `BENCH_JSON {...}`.

#![allow(clippy::print_stdout)] // the report is the benchmark's output

// Shared with the metadata benchmark, which uses the rest of it.
#[allow(dead_code)]
#[path = "controlplane/http.rs"]
mod http;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floe_controlplane::{Config, Controlplane, Database};
use floe_wire::admin::Role;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::sync::watch;

const MEMBERS: usize = 100;
const PARTITIONS: u32 = 1_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let mut report = serde_json::Map::new();
    let dir = tempfile::tempdir()?;
    let sqlite = Database::Sqlite {
        path: dir.path().join("controlplane.db"),
    };
    report.insert("sqlite".into(), bench_backend("SQLite", sqlite).await?);
    if let Ok(url) = std::env::var("FLOE_TEST_POSTGRES_URL")
        && !url.is_empty()
    {
        let postgres = Database::Postgres { url };
        report.insert(
            "postgres".into(),
            bench_backend("PostgreSQL", postgres).await?,
        );
    }
    println!("BENCH_JSON {}", Value::Object(report));
    Ok(())
}

async fn call(
    connection: &mut http::Connection,
    method: &str,
    path: &str,
    body: &Value,
) -> anyhow::Result<(u16, Value)> {
    let bytes = serde_json::to_vec(body)?;
    let (status, answer) = connection.request(method, path, Some(&bytes)).await?;
    let value = if answer.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&answer)?
    };
    Ok((status, value))
}

fn wait_ms() -> u64 {
    env_u64("FLOE_BENCH_WAIT_MS", 1_000)
}

fn partitions(list: &Value) -> BTreeSet<u64> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|p| p["partition"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

fn slots(owned: &BTreeSet<u64>) -> Value {
    Value::Array(
        owned
            .iter()
            .map(|p| json!({ "stream": "s", "partition": p }))
            .collect(),
    )
}

/// What one member task shares with the benchmark: what it reads, its generation.
struct MemberState {
    id: String,
    owned: watch::Sender<(BTreeSet<u64>, u64)>,
    /// Whether its last answer named no partition it waits for.
    answered: std::sync::Mutex<bool>,
}

/// Joins, then heartbeats until `stop`: long-polls, adopts the assignment at once (giving
/// up what it lost, starting what it got) and reports it at once.
async fn member(
    addr: SocketAddr,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(
    Arc<MemberState>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
)> {
    let mut connection = http::Connection::open(addr).await?;
    let (status, joined) = call(
        &mut connection,
        "POST",
        "/v1/groups/g/members",
        &json!({ "streams": ["s"], "session_timeout_ms": 30_000 }),
    )
    .await?;
    anyhow::ensure!(status == 200, "join: {status} {joined}");
    let id = joined["member_id"].as_str().unwrap_or_default().to_owned();
    let owned = partitions(&joined["assignment"]);
    let generation = joined["generation"].as_u64().unwrap_or(0);
    let state = Arc::new(MemberState {
        id: id.clone(),
        owned: watch::Sender::new((owned, generation)),
        answered: std::sync::Mutex::new(partitions(&joined["pending"]).is_empty()),
    });
    let shared = state.clone();
    let task = tokio::spawn(async move {
        let path = format!("/v1/groups/g/members/{id}/heartbeat");
        while !*stop.borrow() {
            let owned = shared.owned.borrow().0.clone();
            let body = json!({ "owned": slots(&owned), "wait_ms": wait_ms() });
            let (status, answer) = call(&mut connection, "POST", &path, &body).await?;
            anyhow::ensure!(status == 200, "heartbeat: {status} {answer}");
            let assigned = partitions(&answer["assignment"]);
            let waits = !partitions(&answer["pending"]).is_empty();
            *shared.answered.lock().expect("not poisoned") = !waits;
            let generation = answer["generation"].as_u64().unwrap_or(0);
            shared.owned.send_replace((assigned, generation));
        }
        Ok(())
    });
    Ok((state, task))
}

/// Waits until every partition is read by the member meant to have it: together the members
/// read them all and none waits for one. (A member that was answered before `started` and
/// whose partitions did not change need not hear again; one that gains partitions reads
/// fewer than all until it does.)
async fn settle(members: &[Arc<MemberState>], started: Instant) -> anyhow::Result<Duration> {
    loop {
        let owned: usize = members.iter().map(|m| m.owned.borrow().0.len()).sum();
        let settled = members
            .iter()
            .all(|m| *m.answered.lock().expect("not poisoned"));
        if owned == PARTITIONS as usize && settled {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "no settled assignment in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn bench_backend(label: &str, database: Database) -> anyhow::Result<Value> {
    let mut config = Config::new(database);
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.lease = Duration::from_secs(3600);
    let mut running = Controlplane::start(config).await?;
    running.wait_for_role(Role::Leader).await;
    let addr = running.local_addr();
    let mut admin = http::Connection::open(addr).await?;
    let broker = json!({ "client_endpoint": "127.0.0.1:7100", "peer_endpoint": "127.0.0.1:7101" });
    let (status, registered) = call(&mut admin, "POST", "/v1/brokers", &broker).await?;
    anyhow::ensure!(status == 200, "register: {status} {registered}");
    let id = registered["broker_id"].as_u64().unwrap_or(0);
    call(
        &mut admin,
        "POST",
        &format!("/v1/brokers/{id}/heartbeat"),
        &json!({}),
    )
    .await?;
    // A database of an earlier run may hold the stream and the group: start afresh.
    admin.request("DELETE", "/v1/groups/g", None).await?;
    admin.request("DELETE", "/v1/streams/s", None).await?;
    let stream = json!({ "name": "s", "partitions": PARTITIONS, "replication_factor": 1 });
    let (status, created) = call(&mut admin, "POST", "/v1/streams", &stream).await?;
    anyhow::ensure!(status == 201, "create: {status} {created}");

    // 1. Rebalances.
    let (stop, stopped) = watch::channel(false);
    let started = Instant::now();
    let joins: Vec<_> = (0..MEMBERS)
        .map(|_| member(addr, stopped.clone()))
        .collect();
    let mut members = Vec::new();
    let mut tasks = Vec::new();
    for joined in futures_join_all(joins).await {
        let (state, task) = joined?;
        members.push(state);
        tasks.push(task);
    }
    let all_join = settle(&members, started).await?;
    println!(
        "{label}: {MEMBERS} members joining at once on {PARTITIONS} partitions: settled in {:.0} ms",
        all_join.as_secs_f64() * 1e3
    );

    let leaver = members.pop().expect("a member");
    let leaver_task = tasks.pop().expect("its task");
    leaver_task.abort();
    let started = Instant::now();
    let (status, _) = admin
        .request(
            "DELETE",
            &format!("/v1/groups/g/members/{}", leaver.id),
            None,
        )
        .await?;
    anyhow::ensure!(status == 204, "leave: {status}");
    let one_leaves = settle(&members, started).await?;
    println!(
        "{label}: one of {MEMBERS} leaves: settled in {:.1} ms",
        one_leaves.as_secs_f64() * 1e3
    );

    let started = Instant::now();
    let (state, task) = member(addr, stopped.clone()).await?;
    members.push(state);
    tasks.push(task);
    let one_joins = settle(&members, started).await?;
    println!(
        "{label}: one joins {} members: settled in {:.1} ms",
        MEMBERS - 1,
        one_joins.as_secs_f64() * 1e3
    );

    // 2. Commits: every member commits its partitions, back to back, while heartbeating.
    let seconds = env_u64("FLOE_BENCH_SECS", 5);
    let requests = Arc::new(AtomicU64::new(0));
    let offsets = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut committers = Vec::new();
    for state in &members {
        let state = state.clone();
        let (requests, offsets, refused) = (requests.clone(), offsets.clone(), refused.clone());
        let mut connection = http::Connection::open(addr).await?;
        committers.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut next = 0u64;
            while Instant::now() < until {
                let (owned, generation) = state.owned.borrow().clone();
                next += 1;
                let commits: Vec<Value> = owned
                    .iter()
                    .map(|p| json!({ "stream": "s", "partition": p, "offset": next }))
                    .collect();
                let body = json!({
                    "offsets": commits,
                    "member": { "member_id": state.id, "generation": generation },
                });
                let sent = Instant::now();
                let (status, _) =
                    call(&mut connection, "POST", "/v1/groups/g/offsets", &body).await?;
                latency.record(sent.elapsed().as_micros().max(1) as u64)?;
                if status == 200 {
                    requests.fetch_add(1, Ordering::Relaxed);
                    offsets.fetch_add(owned.len() as u64, Ordering::Relaxed);
                } else {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(latency)
        }));
    }
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for committer in committers {
        latency.add(&committer.await??)?;
    }
    let requests = requests.load(Ordering::Relaxed) as f64 / seconds as f64;
    let offsets = offsets.load(Ordering::Relaxed) as f64 / seconds as f64;
    println!(
        "{label}: commits by {MEMBERS} members of 10 partitions each: {requests:.0} requests/s, \
         {offsets:.0} offsets/s, p50 {:.1} ms, p99 {:.1} ms, {} refused",
        latency.value_at_quantile(0.5) as f64 / 1e3,
        latency.value_at_quantile(0.99) as f64 / 1e3,
        refused.load(Ordering::Relaxed)
    );

    stop.send_replace(true);
    for task in tasks {
        task.abort();
    }
    running.shutdown().await;
    Ok(json!({
        "members": MEMBERS,
        "partitions": PARTITIONS,
        "all_join_ms": all_join.as_secs_f64() * 1e3,
        "one_leaves_ms": one_leaves.as_secs_f64() * 1e3,
        "one_joins_ms": one_joins.as_secs_f64() * 1e3,
        "commit_requests_per_s": requests,
        "commit_offsets_per_s": offsets,
        "commit_p50_ms": latency.value_at_quantile(0.5) as f64 / 1e3,
        "commit_p99_ms": latency.value_at_quantile(0.99) as f64 / 1e3,
    }))
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join_all<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await.expect("a joining task"));
    }
    outputs
}

//! The controlplane's metadata figures, on SQLite (and PostgreSQL when
//! `FLOE_TEST_POSTGRES_URL` is set):
//!
//! 1. a full placement of 100,000 partitions (rf 3) over 100 brokers — the pure function;
//! 2. the store loaded with 100,000 partitions (100 streams × 1,000, rf 3, 100 brokers):
//!    time to write it, and `describe` of one 1,000-partition stream (store call and REST);
//! 3. repair after one of the 100 brokers dies: find the misplaced partitions, re-place
//!    them, write the reassignment;
//! 4. REST reads at a fixed rate (default 1,000 requests/s for 5 s) over keep-alive HTTP/1.1
//!    connections: describe of a 16-partition stream and the stream list, latency measured
//!    from each request's scheduled send time (no coordinated omission), after a discarded
//!    warm-up run of the same length.
//!
//! `FLOE_BENCH_RATE` and `FLOE_BENCH_SECS` change the REST run. The last line is
//! `BENCH_JSON {...}`.

#![allow(clippy::print_stdout)] // the report is the benchmark's output

#[path = "controlplane/http.rs"]
mod http;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use floe_controlplane::placement::{Candidate, Placer, place_new, repair};
use floe_controlplane::store::{BrokerRegistration, MetadataStore, SqlStore};
use floe_controlplane::{Config, Controlplane, Database};
use floe_wire::admin::{RetentionSettings, Role, SegmentSettings, StreamConfig, StreamInfo};
use floe_wire::{AckMode, BrokerId, Endpoint, StreamName};
use hdrhistogram::Histogram;
use serde_json::{Value, json};

const BROKERS: u32 = 100;
const STREAMS: u32 = 100;
const PARTITIONS_PER_STREAM: u32 = 1_000;
const REPLICATION_FACTOR: u32 = 3;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn percentiles(h: &Histogram<u64>) -> Value {
    json!({
        "p50_us": h.value_at_quantile(0.5),
        "p99_us": h.value_at_quantile(0.99),
        "p999_us": h.value_at_quantile(0.999),
        "max_us": h.max(),
    })
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
    report.insert("placement".into(), bench_placement());
    let dir = tempfile::tempdir()?;
    let sqlite = Database::Sqlite {
        path: dir.path().join("controlplane.db"),
    };
    report.insert("sqlite".into(), bench_backend("SQLite", sqlite).await?);
    if let Ok(url) = std::env::var("FLOE_TEST_POSTGRES_URL")
        && !url.is_empty()
    {
        let url = fresh_database(&url).await?;
        report.insert(
            "postgres".into(),
            bench_backend("PostgreSQL", Database::Postgres { url }).await?,
        );
    }
    println!("BENCH_JSON {}", Value::Object(report));
    Ok(())
}

fn candidates() -> Vec<Candidate> {
    (1..=BROKERS)
        .map(|id| Candidate {
            id: BrokerId::new(id),
            zone: Some(format!("zone-{}", id % 3)),
            replicas: 0,
            leaders: 0,
        })
        .collect()
}

fn bench_placement() -> Value {
    let partitions = STREAMS * PARTITIONS_PER_STREAM;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let mut placer = Placer::new(candidates());
        let started = Instant::now();
        let placements = place_new(&mut placer, partitions, REPLICATION_FACTOR);
        best = best.min(started.elapsed());
        assert_eq!(placements.len(), partitions as usize);
    }
    println!(
        "placement: {partitions} partitions × rf {REPLICATION_FACTOR} over {BROKERS} brokers \
         (3 zones): {:.1} ms (best of 5)",
        millis(best)
    );
    json!({ "partitions": partitions, "brokers": BROKERS, "ms": millis(best) })
}

async fn fresh_database(base: &str) -> anyhow::Result<String> {
    use sqlx::{Connection, PgConnection};
    let name = format!("floe_bench_{}", std::process::id());
    let mut admin = PgConnection::connect(base).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name}"
    )))
    .execute(&mut admin)
    .await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    let (prefix, _) = base
        .rsplit_once('/')
        .ok_or_else(|| anyhow::anyhow!("the URL names no database"))?;
    Ok(format!("{prefix}/{name}"))
}

fn stream_info(name: &str, partitions: u32) -> StreamInfo {
    StreamInfo {
        name: StreamName::new(name).expect("valid name"),
        config: StreamConfig {
            partitions,
            replication_factor: REPLICATION_FACTOR,
            ack_mode: AckMode::Quorum,
            segment: SegmentSettings::default(),
            retention: RetentionSettings::default(),
        },
        created_at_ms: 1_700_000_000_000,
    }
}

/// Loads the store with 100 brokers and 100,000 partitions; returns the load time.
async fn load(store: &SqlStore) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for id in 1..=BROKERS {
        store
            .register_broker(&BrokerRegistration {
                id: Some(BrokerId::new(id)),
                client_endpoint: Endpoint::new(format!("10.0.{}.{}:7100", id / 250, id % 250))?,
                peer_endpoint: Endpoint::new(format!("10.0.{}.{}:7101", id / 250, id % 250))?,
                zone: Some(format!("zone-{}", id % 3)),
                build: None,
                now_ms: 0,
                lease_expires_at_ms: i64::MAX as u64,
            })
            .await?;
    }
    let mut placer = Placer::new(candidates());
    for stream in 0..STREAMS {
        let placements = place_new(&mut placer, PARTITIONS_PER_STREAM, REPLICATION_FACTOR);
        let replicas: Vec<Vec<BrokerId>> = placements.into_iter().map(|p| p.replicas).collect();
        store
            .create_stream(
                &stream_info(&format!("stream-{stream:03}"), PARTITIONS_PER_STREAM),
                &replicas,
            )
            .await?;
    }
    let placements = place_new(&mut placer, 16, REPLICATION_FACTOR);
    let replicas: Vec<Vec<BrokerId>> = placements.into_iter().map(|p| p.replicas).collect();
    store
        .create_stream(&stream_info("small", 16), &replicas)
        .await?;
    Ok(started.elapsed())
}

async fn bench_backend(label: &str, database: Database) -> anyhow::Result<Value> {
    let url = match &database {
        Database::Sqlite { path } => format!("sqlite://{}?mode=rwc", path.display()),
        Database::Postgres { url } => url.clone(),
    };
    let store = SqlStore::connect(&url).await?;
    let loaded = load(&store).await?;
    println!(
        "{label}: wrote {BROKERS} brokers and {} partitions in {:.0} ms",
        STREAMS * PARTITIONS_PER_STREAM,
        millis(loaded)
    );
    let target = StreamName::new("stream-050")?;
    let mut describe = histogram();
    for _ in 0..50 {
        let started = Instant::now();
        let description = store.describe_stream(&target).await?;
        describe.record(started.elapsed().as_micros() as u64)?;
        assert_eq!(
            description.map(|d| d.partitions.len()),
            Some(PARTITIONS_PER_STREAM as usize)
        );
    }
    println!(
        "{label}: describe of a 1,000-partition stream (store): p50 {:.1} ms, p99 {:.1} ms",
        describe.value_at_quantile(0.5) as f64 / 1e3,
        describe.value_at_quantile(0.99) as f64 / 1e3
    );
    // A broker's long-poll answer: its share (about 3,000 replicas) of the 300,000.
    let mut assignments = histogram();
    let mut assigned = 0;
    for _ in 0..20 {
        let started = Instant::now();
        let answer = store.assignments(BrokerId::new(1)).await?;
        assignments.record(started.elapsed().as_micros() as u64)?;
        assigned = answer
            .streams
            .iter()
            .map(|s| s.partitions.len())
            .sum::<usize>();
    }
    anyhow::ensure!(assigned > 0, "broker 1 holds replicas");
    println!(
        "{label}: one broker's assignments ({assigned} partitions): p50 {:.1} ms, p99 {:.1} ms",
        assignments.value_at_quantile(0.5) as f64 / 1e3,
        assignments.value_at_quantile(0.99) as f64 / 1e3
    );
    let repair_ms = bench_repair(label, &store).await?;
    store.close().await;

    let mut config = Config::new(database);
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    // The benchmark's brokers never heartbeat; keep them alive for the run. Nor do they
    // report in elections: the replicated partitions stay electing, and their elections
    // must not time out and start again (100,000 writes) during the measurements.
    config.lease = Duration::from_secs(3600);
    config.partition_election_timeout = Duration::from_secs(3600);
    let mut running = Controlplane::start(config).await?;
    running.wait_for_role(Role::Leader).await;
    let addr = running.local_addr();
    let mut rest_describe = histogram();
    let mut client = http::Connection::open(addr).await?;
    for _ in 0..50 {
        let started = Instant::now();
        let (status, body) = client.get("/v1/streams/stream-050").await?;
        rest_describe.record(started.elapsed().as_micros() as u64)?;
        anyhow::ensure!(
            status == 200 && body.len() > 100_000,
            "describe failed: {status}"
        );
    }
    println!(
        "{label}: describe of a 1,000-partition stream (REST, {} KiB of JSON): p50 {:.1} ms, \
         p99 {:.1} ms",
        client.get("/v1/streams/stream-050").await?.1.len() / 1024,
        rest_describe.value_at_quantile(0.5) as f64 / 1e3,
        rest_describe.value_at_quantile(0.99) as f64 / 1e3
    );
    let rate = env_u64("FLOE_BENCH_RATE", 1_000);
    let seconds = Duration::from_secs(env_u64("FLOE_BENCH_SECS", 5));
    // Warm-up at the same rate, discarded: caches, connections, and the new leader's first
    // reconciliation (a full misplaced-partition query, and a new election for each of the
    // 100,000 electing partitions, whose reports it cannot have) are out of the way.
    http::fixed_rate(addr, &["/v1/streams/small", "/v1/streams"], rate, seconds).await?;
    let reads =
        http::fixed_rate(addr, &["/v1/streams/small", "/v1/streams"], rate, seconds).await?;
    println!(
        "{label}: REST reads at {} requests/s for {} s ({} sent, {} failed): p50 {} µs, \
         p99 {} µs, p999 {} µs",
        reads.rate,
        reads.seconds,
        reads.sent,
        reads.failed,
        reads.latency.value_at_quantile(0.5),
        reads.latency.value_at_quantile(0.99),
        reads.latency.value_at_quantile(0.999)
    );
    // Where the tail sits in time: a burst points at a background event, a spread at CPU
    // contention.
    let slow: Vec<String> = reads
        .slow
        .iter()
        .map(|(at, micros)| format!("{at}ms:{:.1}", *micros as f64 / 1e3))
        .collect();
    println!(
        "{label}: {} requests over {} ms: {}",
        slow.len(),
        http::SLOW_US / 1000,
        slow.join(" ")
    );
    running.shutdown().await;
    Ok(json!({
        "load_ms": millis(loaded),
        "describe_1000_store": percentiles(&describe),
        "describe_1000_rest": percentiles(&rest_describe),
        "assignments_one_broker": percentiles(&assignments),
        "repair_one_dead_broker_ms": repair_ms,
        "rest_reads": {
            "rate": reads.rate, "sent": reads.sent, "failed": reads.failed,
            "latency": percentiles(&reads.latency),
        },
    }))
}

/// Broker 100 dies: misplaced partitions are found, re-placed and written. Returns the
/// total in milliseconds.
async fn bench_repair(label: &str, store: &SqlStore) -> anyhow::Result<f64> {
    store.renew_lease(BrokerId::new(BROKERS), 1).await?;
    let started = Instant::now();
    let expired = store.expire_leases(2).await?;
    anyhow::ensure!(expired == [BrokerId::new(BROKERS)], "one broker expires");
    let misplaced = store.misplaced_partitions().await?;
    let found = started.elapsed();
    let brokers = store.brokers().await?;
    let mut placer = Placer::new(
        brokers
            .iter()
            .filter(|b| b.state == floe_wire::admin::BrokerState::Live)
            .map(|b| Candidate {
                id: b.broker_id,
                zone: b.zone.clone(),
                replicas: b.replicas,
                leaders: b.leaders,
            }),
    );
    let changes = repair(&mut placer, &misplaced);
    store.reassign(&changes).await?;
    let total = started.elapsed();
    println!(
        "{label}: one dead broker of {BROKERS}: {} partitions re-placed in {:.0} ms \
         ({:.0} ms to find them)",
        changes.len(),
        millis(total),
        millis(found)
    );
    Ok(millis(total))
}

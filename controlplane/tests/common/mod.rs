//! Helpers shared by the controlplane's test files: a controlplane on a temporary SQLite
//! file, a fresh PostgreSQL database per test, a minimal HTTP/1.1 client, and polling with a
//! deadline.

#![allow(dead_code)] // each test file uses a different subset

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use floe_controlplane::{Config, Controlplane, Database, Running};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The PostgreSQL server to test against, if any (`scripts/postgres.sh` starts one).
pub fn postgres_base_url() -> Option<String> {
    std::env::var("FLOE_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// A new, empty database on the test server, named after the test, and its URL.
pub async fn fresh_postgres_database(test: &str) -> Option<String> {
    use sqlx::{Connection, PgConnection};
    let base = postgres_base_url()?;
    // PostgreSQL truncates names to 63 bytes: the unique part goes first.
    let short: String = test.chars().take(32).collect();
    let unique = format!("floe_{:08x}_{}_{short}", rand_suffix(), std::process::id());
    let mut admin = PgConnection::connect(&base)
        .await
        .expect("FLOE_TEST_POSTGRES_URL accepts connections");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {unique}")))
        .execute(&mut admin)
        .await
        .expect("the test role may create databases");
    let (prefix, _) = base
        .rsplit_once('/')
        .expect("FLOE_TEST_POSTGRES_URL ends with /DATABASE");
    Some(format!("{prefix}/{unique}"))
}

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    // Distinct per call: a fresh random hasher state.
    (RandomState::new().hash_one(0u8) & 0xffff_ffff) as u32
}

/// A controlplane on a SQLite file in `dir`, listening on a free loopback port, with
/// `adjust` applied to its configuration.
pub async fn start_sqlite(dir: &std::path::Path, adjust: impl FnOnce(&mut Config)) -> Running {
    let mut config = Config::new(Database::Sqlite {
        path: dir.join("controlplane.db"),
    });
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    adjust(&mut config);
    Controlplane::start(config)
        .await
        .expect("the controlplane starts")
}

/// A response: status and body (JSON, or `Value::Null` when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub content_type: Option<String>,
}

impl Reply {
    /// The `code` of an error body.
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }
}

/// Sends one HTTP/1.1 request on a new connection and reads the whole reply.
pub async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    stream.write_all(body).await.expect("write body");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, payload) = text.split_once("\r\n\r\n").expect("a complete reply");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let content_type = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_owned())
    });
    let body = if payload.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(payload).unwrap_or_else(|_| Value::String(payload.to_owned()))
    };
    Reply {
        status,
        body,
        content_type,
    }
}

/// A JSON request, with the admin token when given.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> Reply {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut headers = Vec::new();
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    let payload = match body {
        Some(body) => {
            headers.push(("Content-Type", "application/json"));
            serde_json::to_vec(body).expect("serialisable")
        }
        None => Vec::new(),
    };
    raw(addr, method, path, &headers, &payload).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    call(addr, "GET", path, None, None).await
}

pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    call(addr, "POST", path, Some(body), None).await
}

/// Polls `check` until it returns `Some`, failing after `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Registers a broker (client port `port`) and heartbeats once, so that it is live: streams
/// are only created on live brokers. Returns its id.
pub async fn live_broker(addr: SocketAddr, port: u16, token: Option<&str>) -> u64 {
    let body = serde_json::json!({
        "client_endpoint": format!("127.0.0.1:{port}"),
        "peer_endpoint": format!("127.0.0.1:{}", port + 1),
    });
    let reply = call(addr, "POST", "/v1/brokers", Some(&body), token).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let id = reply.body["broker_id"].as_u64().expect("id");
    let path = format!("/v1/brokers/{id}/heartbeat");
    let beat = call(addr, "POST", &path, Some(&serde_json::json!({})), token).await;
    assert_eq!(beat.status, 200, "{:?}", beat.body);
    id
}

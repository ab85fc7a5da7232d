//! The probes every Floe process answers for load balancers (`/healthz`, `/readyz`) and the
//! build's identity on `/metrics`.

mod common;

use common::{get, start_sqlite};

#[tokio::test]
async fn healthz_and_readyz_answer_on_a_leader_without_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start_sqlite(dir.path(), |config| {
        config.auth = Some(floe_controlplane::BootstrapTokens {
            admin: "secret".to_owned(),
            broker: None,
            read_replica: None,
        });
    })
    .await;
    let addr = running.local_addr();
    let health = get(addr, "/healthz").await;
    assert_eq!(
        (health.status, health.body["status"].as_str()),
        (200, Some("ok"))
    );
    let ready = get(addr, "/readyz").await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.body["ready"], true);
    assert_eq!(ready.body["role"], "leader");
    running.shutdown().await;
}

#[tokio::test]
async fn metrics_name_the_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start_sqlite(dir.path(), |_| {}).await;
    let metrics = get(running.local_addr(), "/metrics").await;
    let text = metrics.body.as_str().unwrap_or_default().to_owned();
    let line = text
        .lines()
        .find(|line| line.starts_with("floe_build_info{"))
        .unwrap_or_else(|| panic!("no floe_build_info in {text}"));
    assert!(
        line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && line.contains("commit=\"")
            && line.ends_with(" 1"),
        "{line}"
    );
    running.shutdown().await;
}

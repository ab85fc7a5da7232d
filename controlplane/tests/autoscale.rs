//! The autoscaler end to end with the local driver and real processes: brokers report
//! history reads, the controlplane starts replica processes (shell stand-ins that the test
//! registers and heartbeats for, as `floe-broker read-replica` would); when the load is gone they
//! are drained, stopped with SIGTERM and leave.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{call, eventually, get, post, start_sqlite};
use floe_controlplane::ReadReplicaDriverConfig;
use serde_json::json;

/// `sh replica.sh MARKERS --replica-id ID`: writes `ID.started`, and `ID.term` on SIGTERM.
/// Run through `/bin/sh`, not executed: executing a file this process just wrote fails with
/// "Text file busy" while a child forked meanwhile by a concurrent test holds the writing
/// descriptor.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("replica.sh");
    std::fs::write(
        &path,
        "trap 'touch \"$1/$3.term\"; exit 0' TERM\ntouch \"$1/$3.started\"\n\
         while :; do sleep 0.05; done\n",
    )
    .expect("write the stand-in");
    path
}

/// The ids with a `.KIND` marker.
fn marked(markers: &Path, kind: &str) -> BTreeSet<String> {
    std::fs::read_dir(markers)
        .expect("markers")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(&format!(".{kind}")).map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn history_reads_start_replicas_and_an_idle_cluster_stops_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let markers = dir.path().join("markers");
    std::fs::create_dir_all(&markers).expect("markers");
    let program = PathBuf::from("/bin/sh");
    let args = vec![
        stand_in(dir.path()).to_string_lossy().into_owned(),
        markers.to_string_lossy().into_owned(),
    ];
    let running = start_sqlite(dir.path(), |config| {
        config.read_replicas = ReadReplicaDriverConfig::Local {
            program,
            args,
            env: Vec::new(),
        };
        config.autoscale_interval = Duration::from_millis(50);
        config.reconcile_interval = Duration::from_millis(50);
        config.lease = Duration::from_secs(5);
    })
    .await;
    let addr = running.local_addr();
    let policy = json!({
        "min_replicas": 0, "max_replicas": 3, "target_bytes_per_second": 1000,
        "target_consumers": 0, "hysteresis_percent": 20, "scale_up_cooldown_ms": 0,
        "scale_down_cooldown_ms": 0,
    });
    let put = call(addr, "PUT", "/v1/scaling-policy", Some(&policy), None).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let broker = post(
        addr,
        "/v1/brokers",
        &json!({ "client_endpoint": "127.0.0.1:7100", "peer_endpoint": "127.0.0.1:7101" }),
    )
    .await;
    let broker_id = broker.body["broker_id"].as_u64().expect("broker id");

    // The broker serves 1 500 B/s of history itself: 2 replicas of 1 000 B/s each.
    let history = Arc::new(AtomicU64::new(1_500));
    let per_replica = Arc::new(AtomicU64::new(0));
    let reporter = {
        let (history, per_replica, markers) =
            (history.clone(), per_replica.clone(), markers.clone());
        tokio::spawn(async move {
            loop {
                let reads = history.load(Ordering::SeqCst);
                let beat = json!({ "history_read_bytes_per_second": reads });
                post(addr, &format!("/v1/brokers/{broker_id}/heartbeat"), &beat).await;
                // Act for each stand-in as the replica would: register, heartbeat, leave.
                let stopped = marked(&markers, "term");
                for id in marked(&markers, "started") {
                    let path = format!("/v1/read-replicas/{id}");
                    if stopped.contains(&id) {
                        call(addr, "DELETE", &path, None, None).await;
                        continue;
                    }
                    let bytes = per_replica.load(Ordering::SeqCst);
                    let load = json!({ "bytes_served_per_second": bytes,
                        "consumers": u32::from(bytes > 0) });
                    let beat = post(addr, &format!("{path}/heartbeat"), &load).await;
                    if beat.status == 404 {
                        let body = json!({ "replica_id": id, "endpoint": "127.0.0.1:7500" });
                        post(addr, "/v1/read-replicas", &body).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let live = || async {
        let list = get(addr, "/v1/read-replicas").await.body;
        list["replicas"]
            .as_array()
            .map(|replicas| {
                replicas
                    .iter()
                    .filter(|r| r["state"] == "live")
                    .filter_map(|r| r["replica_id"].as_str().map(str::to_owned))
                    .collect::<BTreeSet<_>>()
            })
            .unwrap_or_default()
    };
    let started = eventually("two replicas live", Duration::from_secs(20), || async {
        let ids = live().await;
        (ids.len() == 2).then_some(ids)
    })
    .await;
    assert_eq!(
        started,
        marked(&markers, "started"),
        "started by the driver"
    );
    // The readers move to the replicas; the count holds.
    per_replica.store(750, Ordering::SeqCst);
    history.store(0, Ordering::SeqCst);
    let metrics = eventually("metrics with the load", Duration::from_secs(10), || async {
        let text = get(addr, "/metrics").await.body;
        let text = text.as_str().unwrap_or("").to_owned();
        text.contains("floe_read_replica_bytes_served_per_second{replica=")
            .then_some(text)
    })
    .await;
    assert!(
        metrics.contains("floe_autoscaler_desired_replicas 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("floe_read_replicas{state=\"live\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("floe_autoscaler_decisions_total{direction=\"up\"} 1"),
        "{metrics}"
    );
    assert_eq!(live().await, started, "no flapping under a steady load");

    // Idle: both are drained, stopped with SIGTERM, and leave.
    per_replica.store(0, Ordering::SeqCst);
    eventually("both stopped", Duration::from_secs(20), || async {
        (marked(&markers, "term") == started).then_some(())
    })
    .await;
    eventually("both gone", Duration::from_secs(20), || async {
        let list = get(addr, "/v1/read-replicas").await.body;
        (list["replicas"].as_array().map(Vec::len) == Some(0)).then_some(())
    })
    .await;
    let metrics = get(addr, "/metrics").await.body;
    assert!(
        metrics
            .as_str()
            .is_some_and(|m| m.contains("floe_autoscaler_desired_replicas 0")),
        "{metrics}"
    );
    reporter.abort();
    running.shutdown().await;
}

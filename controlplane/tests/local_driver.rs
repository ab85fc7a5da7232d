//! The local driver with real child processes (small shell scripts): started with the id it
//! chose, stopped with SIGTERM (or SIGKILL after the grace), reaped, and given up on when it
//! never registers or loses its lease.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::eventually;
use floe_controlplane::driver::ReadReplicaDriver;
use floe_controlplane::driver::local::LocalDriver;

/// A replica stand-in: `sh script MARKERS --replica-id ID` writes `MARKERS/ID.pid`, and
/// `MARKERS/ID.term` when it gets SIGTERM (unless `on_term` says otherwise).
fn script(dir: &Path, on_term: &str) -> PathBuf {
    let path = dir.join("replica.sh");
    let text = format!(
        "trap '{on_term}' TERM\necho $$ > \"$1/$3.pid\"\n\
         while :; do sleep 0.05; done\n"
    );
    std::fs::write(&path, text).expect("write the script");
    path
}

/// The driver runs `/bin/sh` on the script rather than the script itself: executing a file
/// this process just wrote fails with "Text file busy" while a child forked meanwhile by a
/// concurrent test still holds the writing descriptor.
fn driver(dir: &Path, on_term: &str) -> LocalDriver {
    let markers = dir.join("markers");
    std::fs::create_dir_all(&markers).expect("markers dir");
    LocalDriver::new(
        PathBuf::from("/bin/sh"),
        vec![
            script(dir, on_term).to_string_lossy().into_owned(),
            markers.to_string_lossy().into_owned(),
        ],
    )
}

fn marker(dir: &Path, id: &str, kind: &str) -> PathBuf {
    dir.join("markers").join(format!("{id}.{kind}"))
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

async fn wait_for_file(path: &Path) {
    eventually(
        &format!("{}", path.display()),
        Duration::from_secs(10),
        || async { path.exists().then_some(()) },
    )
    .await;
}

const GRACEFUL: &str = "echo stopped > \"$1/$3.term\"; exit 0";

#[tokio::test]
async fn a_started_replica_runs_under_its_id_until_stopped_and_exits_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut driver = driver(dir.path(), GRACEFUL);
    driver.start(2).await.expect("start");
    let ids = driver.running();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    for id in &ids {
        assert!(id.starts_with('l') && id.len() <= 64, "{id}");
        wait_for_file(&marker(dir.path(), id, "pid")).await;
    }
    assert_eq!(driver.starting(&[]).await.expect("starting"), 2);
    assert_eq!(driver.starting(&ids).await.expect("starting"), 0);

    let pid = driver.pid(&ids[0]).expect("pid");
    assert!(alive(pid));
    driver.stop(&ids[..1]).await.expect("stop");
    tokio::time::timeout(Duration::from_secs(10), driver.stopped())
        .await
        .expect("stopped within the grace");
    assert!(marker(dir.path(), &ids[0], "term").exists(), "got SIGTERM");
    assert!(!alive(pid), "exited and reaped");
    assert_eq!(driver.running(), ids[1..]);

    let other = driver.pid(&ids[1]).expect("pid");
    driver.shutdown().await;
    assert!(marker(dir.path(), &ids[1], "term").exists());
    assert!(!alive(other));
    assert!(driver.running().is_empty());
}

#[tokio::test]
async fn a_replica_that_ignores_sigterm_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut driver = driver(dir.path(), "");
    driver.stop_grace = Duration::from_millis(200);
    driver.start(1).await.expect("start");
    let id = driver.running().remove(0);
    wait_for_file(&marker(dir.path(), &id, "pid")).await;
    let pid = driver.pid(&id).expect("pid");
    driver.stop(std::slice::from_ref(&id)).await.expect("stop");
    tokio::time::timeout(Duration::from_secs(10), driver.stopped())
        .await
        .expect("killed after the grace");
    assert!(!alive(pid));
}

#[tokio::test]
async fn replicas_that_never_register_or_lose_their_lease_are_stopped_and_exits_are_reaped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut driver = driver(dir.path(), GRACEFUL);
    driver.start(2).await.expect("start");
    let ids = driver.running();
    for id in &ids {
        wait_for_file(&marker(dir.path(), id, "pid")).await;
    }
    // The first registers, then vanishes from the store (its lease lapsed).
    assert_eq!(driver.starting(&ids[..1]).await.expect("starting"), 1);
    driver.register_timeout = Duration::ZERO;
    assert_eq!(driver.starting(&[]).await.expect("starting"), 0);
    assert!(driver.running().is_empty(), "both given up on");
    tokio::time::timeout(Duration::from_secs(10), driver.stopped())
        .await
        .expect("stopped");
    for id in &ids {
        assert!(marker(dir.path(), id, "term").exists(), "{id} got SIGTERM");
    }

    // A replica that exits by itself is reaped and no longer counted.
    let crashing = dir.path().join("crash.sh");
    std::fs::write(&crashing, "#!/bin/sh\nexit 3\n").expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&crashing, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut driver = LocalDriver::new(crashing, vec![]);
    driver.start(1).await.expect("start");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while driver.starting(&[]).await.expect("starting") != 0 || !driver.running().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the exit was never reaped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    driver.shutdown().await;
}

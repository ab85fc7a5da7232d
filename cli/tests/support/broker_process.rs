//! A real `floe-broker dev` process for the CLI's end-to-end tests: its own data directory
//! and client profile in a temporary directory, an ephemeral QUIC port, killed and reaped on
//! drop. The CLI's package cannot name another package's binary with `CARGO_BIN_EXE_*`, so
//! the caller passes its path (next to `floe` in the target directory).

#![allow(dead_code)] // Each test binary uses its own share of these.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a broker may take to start and write its profile.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running broker process. Dropping it kills the process and waits for it.
pub struct BrokerProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl BrokerProcess {
    /// Starts `floe-broker dev` from `binary` on an ephemeral port and waits, with a
    /// deadline, for the client profile it writes once it serves.
    pub fn start(binary: &Path) -> BrokerProcess {
        BrokerProcess::start_with(binary, 0)
    }

    /// Starts `floe-broker dev` with `read_replicas` read replicas kept live (0: none, and
    /// no autoscaler).
    pub fn start_with(binary: &Path, read_replicas: u32) -> BrokerProcess {
        assert!(
            binary.exists(),
            "the broker binary {} is missing: run `cargo build --workspace --bins` before \
             `cargo test` (see the README)",
            binary.display()
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = File::create(dir.path().join("broker.log")).expect("a log file");
        let child = Command::new(binary)
            .arg("dev")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(["--controlplane-listen", "127.0.0.1:0"])
            .arg("--profile")
            .arg(dir.path().join("profile.json"))
            .env("FLOE_LOG", "info")
            .env("FLOE_DEV_READ_REPLICAS", read_replicas.to_string())
            .env("FLOE_DEV_MAX_READ_REPLICAS", read_replicas.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the broker starts");
        let mut broker = BrokerProcess { child, dir };
        broker.wait_for_profile();
        broker
    }

    /// The client profile the broker wrote.
    pub fn profile(&self) -> PathBuf {
        self.dir.path().join("profile.json")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    fn wait_for_profile(&mut self) {
        let deadline = Instant::now() + START_DEADLINE;
        // The profile is written atomically (temporary file, rename): once it parses, the
        // broker serves.
        while floe_client::read_profile(&self.profile()).is_err() {
            if let Some(status) = self.child.try_wait().expect("the broker's status") {
                panic!(
                    "the broker exited with {status} before it was ready:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the broker wrote no profile within {START_DEADLINE:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! A real `floe-broker dev` process for the CLI's end-to-end tests: its own data directory
//! and client profile in a temporary directory, an ephemeral QUIC port, killed and reaped on
//! drop. The CLI's package cannot name another package's binary with `CARGO_BIN_EXE_*`, so
//! the caller passes its path (next to `floe` in the target directory).

#![allow(dead_code)] // Each test binary uses its own share of these.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a broker may take to start and write its profile.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running broker process. Dropping it kills the process and waits for it.
pub struct BrokerProcess {
    child: Child,
    dir: tempfile::TempDir,
    binary: PathBuf,
    read_replicas: u32,
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
        let child = spawn(binary, dir.path(), read_replicas);
        let mut broker = BrokerProcess {
            child,
            dir,
            binary: binary.to_path_buf(),
            read_replicas,
        };
        broker.wait_for_profile();
        broker
    }

    /// SIGKILLs the broker, lets `between` change its files (`between` gets its data
    /// directory), and starts it again on them.
    pub fn kill_and_restart(&mut self, between: impl FnOnce(&Path)) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        between(&self.dir.path().join("data"));
        let _ = std::fs::remove_file(self.profile());
        self.child = spawn(&self.binary, self.dir.path(), self.read_replicas);
        self.wait_for_profile();
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

/// Starts `floe-broker dev` from `binary` with its files under `dir`.
fn spawn(binary: &Path, dir: &Path, read_replicas: u32) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("broker.log"))
        .expect("a log file");
    Command::new(binary)
        .arg("dev")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--controlplane-listen", "127.0.0.1:0"])
        .arg("--profile")
        .arg(dir.join("profile.json"))
        .env("FLOE_LOG", "info")
        .env("FLOE_DEV_READ_REPLICAS", read_replicas.to_string())
        .env("FLOE_DEV_MAX_READ_REPLICAS", read_replicas.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the broker starts")
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

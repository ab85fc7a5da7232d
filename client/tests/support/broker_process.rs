//! A real `floe-broker dev` process for end-to-end tests: its own data directory and client
//! profile in a temporary directory, an ephemeral QUIC port, killed and reaped on drop.
//!
//! Shared by `client/tests/cli.rs` and `broker/tests/client_end_to_end.rs` (which include
//! this file by path), since each package knows the broker binary by a different route.
// Each including test uses a different part of it.
#![allow(dead_code)]

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use floe_client::ClientConfig;

/// How long a broker may take to start and write its profile.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running broker process. Dropping it kills the process and waits for it.
pub struct BrokerProcess {
    binary: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
    /// The QUIC address the broker listens on (from the profile it wrote).
    pub addr: SocketAddr,
}

impl BrokerProcess {
    /// Starts `floe-broker dev` from `binary` on an ephemeral port and waits for its profile.
    pub fn start(binary: &Path) -> BrokerProcess {
        assert!(
            binary.exists(),
            "the broker binary {} is missing: run `cargo build --workspace --bins` before \
             `cargo test` (see the README)",
            binary.display()
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let child = spawn(
            binary,
            dir.path(),
            "127.0.0.1:0".parse().expect("an address"),
        );
        let mut broker = BrokerProcess {
            binary: binary.to_path_buf(),
            child,
            dir,
            addr: "127.0.0.1:0".parse().expect("an address"),
        };
        broker.addr = broker.wait_for_profile();
        broker
    }

    /// The client profile the broker wrote.
    pub fn profile(&self) -> PathBuf {
        self.dir.path().join("profile.json")
    }

    /// A client configuration from the broker's profile, with short timeouts for tests.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::load_profile(&self.profile()).expect("a readable profile");
        config.connect_timeout = Duration::from_secs(5);
        config.request_timeout = Duration::from_secs(10);
        // Notice a killed broker quickly (the negotiated idle timeout is the smaller one).
        config.idle_timeout = Duration::from_secs(3);
        config
    }

    /// Kills the broker with SIGKILL and starts it again on the same port and data
    /// directory, as after a crash.
    pub fn crash_and_restart(&mut self) {
        self.child.kill().expect("the broker can be killed");
        self.child.wait().expect("the broker is reaped");
        std::fs::remove_file(self.profile()).expect("the old profile is removed");
        self.child = spawn(&self.binary, self.dir.path(), self.addr);
        let addr = self.wait_for_profile();
        assert_eq!(addr, self.addr, "the broker came back on its port");
    }

    /// What the broker has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    /// Waits, with a deadline, for the profile to appear; returns the address in it.
    fn wait_for_profile(&mut self) -> SocketAddr {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(profile) = floe_client::read_profile(&self.profile()) {
                return profile
                    .endpoint
                    .parse()
                    .expect("the profile holds an address");
            }
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

fn spawn(binary: &Path, dir: &Path, listen: SocketAddr) -> Child {
    let log = File::options()
        .create(true)
        .append(true)
        .open(dir.join("broker.log"))
        .expect("a log file");
    Command::new(binary)
        .arg("dev")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--listen")
        .arg(listen.to_string())
        .arg("--metrics-listen")
        .arg("127.0.0.1:0")
        .arg("--profile")
        .arg(dir.join("profile.json"))
        .env("FLOE_LOG", "info")
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

//! One `floe` run as a child process: its stdout and stderr in files, waited for with a
//! deadline, killed if still running when dropped.

#![allow(dead_code)] // Each test binary uses its own share of these.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(30);

pub fn floe_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_floe"))
}

/// What a finished `floe` run printed.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Files and a child process for one `floe` run; the child is killed if still running.
pub struct Child {
    pub child: std::process::Child,
    stdout: PathBuf,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Child {
    pub fn spawn(profile: &Path, args: &[&str], stdin: Option<&str>) -> Child {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let stdout = dir.path().join("stdout");
        let stderr = dir.path().join("stderr");
        let mut child = Command::new(floe_binary())
            .arg("--profile")
            .arg(profile)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(std::fs::File::create(&stdout).expect("a stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("a stderr file"))
            .spawn()
            .expect("floe starts");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("a stdin pipe");
            pipe.write_all(input.as_bytes()).expect("stdin is written");
        }
        Child {
            child,
            stdout,
            stderr,
            _dir: dir,
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Waits, with a deadline, for the process to exit.
    pub fn wait(mut self) -> Run {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("the status of floe") {
                return Run {
                    status,
                    stdout: self.stdout(),
                    stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
                };
            }
            assert!(
                Instant::now() < deadline,
                "floe did not finish within {DEADLINE:?}; stdout so far:\n{}",
                self.stdout()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits, with a deadline, until stdout holds `lines` lines.
    pub fn wait_for_lines(&self, lines: usize) {
        let deadline = Instant::now() + DEADLINE;
        while self.stdout().lines().count() < lines {
            assert!(
                Instant::now() < deadline,
                "floe printed {} of {lines} lines within {DEADLINE:?}",
                self.stdout().lines().count()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn floe(profile: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let run = Child::spawn(profile, args, stdin).wait();
    assert!(
        run.status.success(),
        "floe {args:?} failed ({}):\n{}",
        run.status,
        run.stderr
    );
    run
}

pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

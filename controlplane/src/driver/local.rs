//! The local driver: read replicas as child processes of the controlplane.
//!
//! Each replica is `program args... --replica-id <id>`; the driver chooses `<id>`
//! (`l<nonce>-<n>`, the nonce distinct per driver so that two controlplane runs never hand
//! out the same id) and expects the process to register under it. Stopping sends SIGTERM,
//! then SIGKILL after a grace period; every child is reaped. A child that has not
//! registered within [`LocalDriver::register_timeout`], or whose replica is no longer live
//! or draining in the store (its lease lapsed), is stopped too: the autoscaler then counts
//! one replica fewer and starts another.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

use crate::driver::{DriverError, ReadReplicaDriver};

/// One child process.
#[derive(Debug)]
struct LocalChild {
    child: Child,
    started: Instant,
    /// It has been seen registered (live or draining) at least once.
    registered: bool,
}

/// Read replicas as child processes; see the module documentation.
#[derive(Debug)]
pub struct LocalDriver {
    program: PathBuf,
    args: Vec<String>,
    /// Environment variables set on each child, on top of the controlplane's own.
    env: Vec<(String, String)>,
    nonce: String,
    next: u64,
    children: HashMap<String, LocalChild>,
    /// Children being stopped: each task ends when its child has exited.
    stopping: JoinSet<()>,
    /// From SIGTERM to SIGKILL.
    pub stop_grace: Duration,
    /// A child that has not registered by then is stopped.
    pub register_timeout: Duration,
}

impl LocalDriver {
    pub fn new(program: PathBuf, args: Vec<String>) -> LocalDriver {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        LocalDriver {
            program,
            args,
            env: Vec::new(),
            nonce: base36(u64::try_from(nanos % (1 << 40)).unwrap_or(0)),
            next: 1,
            children: HashMap::new(),
            stopping: JoinSet::new(),
            stop_grace: Duration::from_secs(10),
            register_timeout: Duration::from_secs(30),
        }
    }

    /// Sets an environment variable on every child this driver starts.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> LocalDriver {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The ids of the children running now (not being stopped), ordered.
    pub fn running(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.children.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The process id of a running child.
    pub fn pid(&self, replica_id: &str) -> Option<u32> {
        self.children.get(replica_id)?.child.id()
    }

    /// Waits until every child being stopped has exited.
    pub async fn stopped(&mut self) {
        while self.stopping.join_next().await.is_some() {}
    }

    fn terminate(&mut self, id: &str, mut child: Child) {
        let grace = self.stop_grace;
        let id = id.to_owned();
        self.stopping.spawn(async move {
            if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok())
                && let Err(error) = kill(Pid::from_raw(pid), Signal::SIGTERM)
            {
                tracing::debug!(replica = %id, %error, "SIGTERM failed");
            }
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(Ok(status)) => tracing::info!(replica = %id, %status, "read replica stopped"),
                Ok(Err(error)) => tracing::warn!(replica = %id, %error, "waiting for a replica"),
                Err(_) => {
                    tracing::warn!(replica = %id, "read replica ignored SIGTERM; killing it");
                    if let Err(error) = child.kill().await {
                        tracing::warn!(replica = %id, %error, "could not kill a read replica");
                    }
                }
            }
        });
    }

    /// Forgets children that exited by themselves.
    fn reap(&mut self) {
        // Finished stop tasks.
        while self.stopping.try_join_next().is_some() {}
        self.children
            .retain(|id, local| match local.child.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => {
                    tracing::warn!(replica = %id, %status, "read replica exited");
                    false
                }
                Err(error) => {
                    tracing::warn!(replica = %id, %error, "could not check a read replica");
                    true
                }
            });
    }
}

impl ReadReplicaDriver for LocalDriver {
    async fn starting(&mut self, registered: &[String]) -> Result<u32, DriverError> {
        self.reap();
        let registered: HashSet<&str> = registered.iter().map(String::as_str).collect();
        let mut starting = 0;
        let mut give_up = Vec::new();
        for (id, local) in &mut self.children {
            if registered.contains(id.as_str()) {
                local.registered = true;
            } else if local.registered {
                tracing::warn!(replica = %id, "read replica lost its lease; stopping it");
                give_up.push(id.clone());
            } else if local.started.elapsed() >= self.register_timeout {
                tracing::warn!(replica = %id, "read replica never registered; stopping it");
                give_up.push(id.clone());
            } else {
                starting += 1;
            }
        }
        for id in give_up {
            if let Some(local) = self.children.remove(&id) {
                self.terminate(&id, local.child);
            }
        }
        Ok(starting)
    }

    async fn start(&mut self, count: u32) -> Result<(), DriverError> {
        for _ in 0..count {
            let id = format!("l{}-{}", self.nonce, self.next);
            self.next += 1;
            let mut command = Command::new(&self.program);
            command
                .args(&self.args)
                .arg("--replica-id")
                .arg(&id)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .kill_on_drop(true);
            end_with_parent(&mut command);
            let child = command.spawn().map_err(|source| DriverError::Spawn {
                program: self.program.clone(),
                source,
            })?;
            tracing::info!(replica = %id, pid = ?child.id(), "read replica process started");
            self.children.insert(
                id,
                LocalChild {
                    child,
                    started: Instant::now(),
                    registered: false,
                },
            );
        }
        Ok(())
    }

    async fn stop(&mut self, replica_ids: &[String]) -> Result<(), DriverError> {
        for id in replica_ids {
            match self.children.remove(id) {
                Some(local) => self.terminate(id, local.child),
                None => tracing::info!(replica = %id, "not started here; left to its owner"),
            }
        }
        Ok(())
    }

    async fn shutdown(&mut self) {
        let ids = self.running();
        for id in ids {
            if let Some(local) = self.children.remove(&id) {
                self.terminate(&id, local.child);
            }
        }
        self.stopped().await;
    }
}

/// A child must not outlive a controlplane that was killed (SIGKILL skips
/// [`ReadReplicaDriver::shutdown`]): Linux sends it SIGKILL when the thread that started it
/// ends, and the autoscaler runs on the runtime's worker threads, which live as long as the
/// process. A replica holds nothing durable, so the kill loses nothing.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // pre_exec; its contract is stated at the call
fn end_with_parent(command: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
    // which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn end_with_parent(_command: &mut Command) {}

fn base36(mut value: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(value % 36) as usize]);
        value /= 36;
        if value == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_and_valid() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        let driver = LocalDriver::new("true".into(), vec![]);
        assert!(driver.nonce.len() <= 8, "{}", driver.nonce);
    }
}

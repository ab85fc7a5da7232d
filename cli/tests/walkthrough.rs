//! `docs/operations.md`, "A three-broker cluster from an empty machine", run as written: its
//! shell and TOML blocks are read from the document itself, so the two cannot drift apart.
//! Files are written where the document says, steps run with `bash` in order, and the
//! processes a `serve` step names are started and left running, each on its own; then each
//! step's outcome is checked against [`EXPECTED`]. The document's directory becomes a
//! temporary one and each of its loopback ports a free one.
//!
//! The binaries are found next to `floe` in the target directory. Build them first:
//! `cargo build --workspace --bins` (see the README).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DOCUMENT: &str = include_str!("../../docs/operations.md");
const SECTION: &str = "## A three-broker cluster from an empty machine";
/// The directory the document keeps everything in.
const DOCUMENT_ROOT: &str = "/tmp/floe-cluster";
/// How long a step may run, or a step marked `wait` may take to show its outcome.
const DEADLINE: Duration = Duration::from_secs(30);

/// What one step of the document must show.
struct Expected {
    step: &'static str,
    /// Retried until its outcome shows, within the deadline: the cluster is on its way
    /// there (brokers registering, leaders being elected).
    wait: bool,
    /// On stdout (stderr for a step marked `fails`), in this order.
    shows: &'static [&'static str],
    /// Nowhere in its output.
    never: &'static [&'static str],
}

const EXPECTED: &[Expected] = &[
    Expected {
        step: "prepare",
        wait: false,
        shows: &["tls/ca.pem"],
        never: &[],
    },
    Expected {
        step: "check",
        wait: false,
        shows: &[
            "floe-controlplane: the settings with controlplane.toml are valid",
            "floe-broker serve: the settings with broker-1.toml are valid",
            "floe-broker serve: the settings with broker-3.toml are valid",
            "floe-broker read-replica: the settings with read-replica.toml are valid",
        ],
        never: &[],
    },
    Expected {
        step: "start",
        wait: false,
        shows: &[],
        never: &[],
    },
    Expected {
        step: "profile",
        wait: false,
        shows: &["wrote profile cluster", "it is now current"],
        never: &[],
    },
    Expected {
        step: "status",
        wait: true,
        shows: &[
            "controlplane https://127.0.0.1:7300 (leader, ready)",
            "brokers: 3 live, 0 draining, 0 dead",
            "read replicas: 1 live",
        ],
        never: &[],
    },
    Expected {
        step: "read-replicas",
        wait: true,
        shows: &["127.0.0.1:7150", "live"],
        never: &[],
    },
    Expected {
        step: "create",
        wait: false,
        shows: &["created stream orders with 3 partitions"],
        never: &[],
    },
    Expected {
        step: "describe",
        wait: true,
        shows: &["stream orders: 3 partitions, replication 3, ack mode quorum"],
        never: &["no-leader", "under-replicated"],
    },
    Expected {
        step: "publish",
        wait: false,
        shows: &["published 3 records to orders"],
        never: &[],
    },
    Expected {
        step: "consume",
        wait: false,
        shows: &["first", "second", "third"],
        never: &[],
    },
    Expected {
        step: "drain",
        wait: false,
        shows: &[
            "broker 1 is draining",
            "`floe broker undrain 1` ends the drain",
        ],
        never: &[],
    },
    Expected {
        step: "while-draining",
        wait: false,
        shows: &["published 1 record to orders", "broker 1 is draining"],
        never: &[],
    },
    Expected {
        step: "create-while-draining",
        wait: false,
        shows: &[
            "replication factor 3 needs 3 live brokers and 2 are live",
            "broker 1 is draining: `floe broker undrain 1` ends its drain",
            "--replication-factor 2",
        ],
        never: &[],
    },
    Expected {
        step: "undrain",
        wait: false,
        shows: &["broker 1 is live again"],
        never: &[],
    },
    Expected {
        step: "healthy",
        wait: true,
        shows: &["stream orders: 3 partitions", "live"],
        never: &["no-leader", "under-replicated", "draining"],
    },
];

/// A fenced block of the section, by its info string: ```` ```toml file=PATH ```` is a file
/// to write, ```` ```sh step=NAME ```` a step, with `serve` (each line a process left
/// running) or `fails` (must exit non-zero). Other blocks are not part of the walk.
#[derive(Debug)]
enum Block {
    File {
        path: PathBuf,
        text: String,
    },
    Step {
        name: String,
        serve: bool,
        fails: bool,
        script: String,
    },
}

/// The section, from its heading to the next one of its level.
fn section(document: &str) -> &str {
    let start = document
        .find(SECTION)
        .expect("the walkthrough is in the document");
    let rest = &document[start + SECTION.len()..];
    let end = rest.find("\n## ").map_or(rest.len(), |end| end);
    &rest[..end]
}

fn blocks(section: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let text = body.join("\n") + "\n";
        let mut words = info.split_whitespace();
        let language = words.next().unwrap_or_default();
        let words: Vec<&str> = words.collect();
        let value = |key: &str| {
            words
                .iter()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_owned)
        };
        match (language, value("file"), value("step")) {
            ("toml", Some(path), _) => blocks.push(Block::File {
                path: path.into(),
                text,
            }),
            ("sh", _, Some(name)) => blocks.push(Block::Step {
                name,
                serve: words.contains(&"serve"),
                fails: words.contains(&"fails"),
                script: text,
            }),
            _ => {}
        }
    }
    blocks
}

/// Every `127.0.0.1:PORT` of `text`, with a free port of this machine for each.
fn free_ports(text: &str) -> BTreeMap<String, String> {
    let mut ports = BTreeMap::new();
    for (at, _) in text.match_indices("127.0.0.1:") {
        let digits: String = text[at + "127.0.0.1:".len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if digits.is_empty() || ports.contains_key(&digits) {
            continue;
        }
        let port = loop {
            // Free for TCP (the controlplane) and UDP (QUIC) alike.
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("a free TCP port");
            let port = tcp.local_addr().expect("its address").port();
            if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
                && !ports.values().any(|p| *p == port.to_string())
            {
                break port;
            }
        };
        ports.insert(digits, port.to_string());
    }
    ports
}

/// The section with its directory and ports replaced.
struct Substitution {
    root: String,
    ports: BTreeMap<String, String>,
}

impl Substitution {
    fn apply(&self, text: &str) -> String {
        let mut text = text.replace(DOCUMENT_ROOT, &self.root);
        for (from, to) in &self.ports {
            text = text.replace(&format!("127.0.0.1:{from}"), &format!("127.0.0.1:{to}"));
        }
        text
    }
}

/// The processes `serve` steps started, with their logs; killed when dropped.
struct Processes {
    running: Vec<(String, Child, PathBuf)>,
}

impl Processes {
    /// The logs of every process, for a failure's message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (line, _, log) in &self.running {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            out.push_str(&format!("--- {line}\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Panics, with the logs, if a process has exited.
    fn check_running(&mut self) {
        let mut exited = Vec::new();
        for (line, child, _) in &mut self.running {
            if let Some(status) = child.try_wait().expect("a process's status") {
                exited.push(format!("`{line}` exited with {status}"));
            }
        }
        assert!(exited.is_empty(), "{}\n{}", exited.join("\n"), self.logs());
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.running {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where the steps run: the machine's tools, then the built binaries on the `PATH`, a home
/// of their own (for the client profile), and none of the caller's `FLOE_*` settings but
/// the disk high-water mark (the test machine's disk may be past the default's 90 %).
fn command(program: &str, root: &Path, home: &Path, bin: &Path) -> Command {
    let mut command = Command::new(program);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_owned()];
    paths.extend(std::env::split_paths(&path));
    command
        .current_dir(root)
        .env("PATH", std::env::join_paths(paths).expect("a PATH"))
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("FLOE_") && name != "FLOE_DISK_HIGH_WATER" {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// What a step printed.
struct Outcome {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `script` with `bash -euo pipefail`, killed past the deadline.
fn run_script(mut command: Command, script: &str, logs: &Path) -> Outcome {
    let stdout = logs.join("step.stdout");
    let stderr = logs.join("step.stderr");
    let mut child = command
        .args(["-euo", "pipefail", "-c", script])
        .stdout(File::create(&stdout).expect("a stdout file"))
        .stderr(File::create(&stderr).expect("a stderr file"))
        .spawn()
        .expect("bash starts");
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the step's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("the step's status");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        success: status.success(),
        stdout: std::fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr).unwrap_or_default(),
    }
}

/// Why `outcome` is not what `expected` says, if it is not.
fn mismatch(
    expected: &Expected,
    fails: bool,
    outcome: &Outcome,
    substitution: &Substitution,
) -> Option<String> {
    if outcome.success == fails {
        return Some(format!(
            "it {} (expected it to {})",
            if outcome.success {
                "succeeded"
            } else {
                "failed"
            },
            if fails { "fail" } else { "succeed" }
        ));
    }
    let shown = if fails {
        &outcome.stderr
    } else {
        &outcome.stdout
    };
    let mut from = 0;
    for needle in expected.shows {
        let needle = substitution.apply(needle);
        match shown[from..].find(&needle) {
            Some(at) => from += at + needle.len(),
            None => return Some(format!("`{needle}` is not shown (in this order)")),
        }
    }
    let all = format!("{}{}", outcome.stdout, outcome.stderr);
    expected
        .never
        .iter()
        .find(|needle| all.contains(**needle))
        .map(|needle| format!("`{needle}` is shown"))
}

#[test]
fn the_three_broker_walkthrough_runs_as_documented() {
    let bin = Path::new(env!("CARGO_BIN_EXE_floe"))
        .parent()
        .expect("the target directory")
        .to_owned();
    for binary in ["floe-broker", "floe-controlplane"] {
        assert!(
            bin.join(binary).exists(),
            "{binary} is missing from {}: run `cargo build --workspace --bins` before `cargo \
             test` (see the README)",
            bin.display()
        );
    }
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let root = temporary.path().join("cluster");
    let home = temporary.path().join("home");
    let logs = temporary.path().join("logs");
    for dir in [&home, &logs] {
        std::fs::create_dir_all(dir).expect("a directory");
    }
    let section = section(DOCUMENT);
    let substitution = Substitution {
        root: root.display().to_string(),
        ports: free_ports(section),
    };
    let blocks = blocks(&substitution.apply(section));
    let steps: Vec<&str> = blocks
        .iter()
        .filter_map(|block| match block {
            Block::Step { name, .. } => Some(name.as_str()),
            Block::File { .. } => None,
        })
        .collect();
    let expected: Vec<&str> = EXPECTED.iter().map(|e| e.step).collect();
    assert_eq!(
        steps, expected,
        "the document's steps and the outcomes this test expects"
    );

    let started = Instant::now();
    let mut processes = Processes {
        running: Vec::new(),
    };
    // The first step makes the directory; the others run in it, as the document's reader's
    // shell would after its `cd`.
    let mut cwd = temporary.path().to_owned();
    for block in &blocks {
        match block {
            Block::File { path, text } => {
                std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
                std::fs::write(path, text).expect("the file is written");
            }
            Block::Step {
                name,
                serve: true,
                script,
                ..
            } => {
                for (n, line) in script.lines().filter(|l| !l.trim().is_empty()).enumerate() {
                    let log = logs.join(format!("{name}-{n}.log"));
                    let sink = File::create(&log).expect("a log file");
                    let child = command("bash", &cwd, &home, &bin)
                        .args(["-c", &format!("exec {line}")])
                        .stdout(sink.try_clone().expect("the log file"))
                        .stderr(sink)
                        .spawn()
                        .expect("the process starts");
                    processes.running.push((line.to_owned(), child, log));
                }
            }
            Block::Step {
                name,
                fails,
                script,
                ..
            } => {
                let expected = EXPECTED
                    .iter()
                    .find(|e| e.step == name)
                    .expect("an expectation");
                let deadline = Instant::now() + DEADLINE;
                loop {
                    let outcome = run_script(command("bash", &cwd, &home, &bin), script, &logs);
                    processes.check_running();
                    let Some(why) = mismatch(expected, *fails, &outcome, &substitution) else {
                        // Shown with `--nocapture`: what each step printed.
                        eprintln!("step {name}:\n{}{}", outcome.stdout, outcome.stderr);
                        break;
                    };
                    assert!(
                        expected.wait && Instant::now() < deadline,
                        "step `{name}`: {why}\n{script}\nstdout:\n{}\nstderr:\n{}\n{}",
                        outcome.stdout,
                        outcome.stderr,
                        processes.logs()
                    );
                    std::thread::sleep(Duration::from_millis(250));
                }
                cwd.clone_from(&root);
            }
        }
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(60),
        "the walkthrough took {elapsed:?}: keep it under a minute"
    );
}

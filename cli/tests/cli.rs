//! The `floe` binary end to end against a real `floe-broker dev` process: create a stream,
//! publish lines from stdin, read them back as JSON, follow the tail and stop on Ctrl-C.
//!
//! The broker binary is found next to `floe` in the target directory. Build both first:
//! `cargo build --workspace --bins` (see the README); without it this test fails and says so.

mod support {
    pub mod broker_process;
    pub mod floe_process;
}

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::broker_process::BrokerProcess;
use support::floe_process::{Child, DEADLINE, Run, floe, floe_binary, json_lines};

fn broker() -> BrokerProcess {
    BrokerProcess::start(&floe_binary().with_file_name("floe-broker"))
}

#[test]
fn create_publish_and_consume_through_the_cli() {
    let broker = broker();
    let profile = broker.profile();

    let created = floe(
        &profile,
        &[
            "stream",
            "create",
            "lines",
            "--segment-bytes",
            "1MiB",
            "--segment-age",
            "10m",
            "--local-retention-bytes",
            "64MiB",
            "--local-retention-age",
            "6h",
            "--retention-age",
            "30days",
        ],
        None,
    );
    assert_eq!(created.stdout, "created stream lines with 1 partition\n");

    let published = floe(
        &profile,
        &["--json", "publish", "lines"],
        Some("first\nsecond\nthird line\n"),
    );
    assert_eq!(
        json_lines(&published.stdout),
        [serde_json::json!({"stream": "lines", "acknowledged": 3, "failed": 0})]
    );

    let consumed = floe(
        &profile,
        &["consume", "lines", "--count", "3", "--json"],
        None,
    );
    let records = json_lines(&consumed.stdout);
    let summary: Vec<(u64, &str)> = records
        .iter()
        .map(|r| {
            assert_eq!(r["stream"], "lines");
            assert_eq!(r["partition"], 0);
            assert_eq!(r["key"], serde_json::Value::Null);
            assert!(
                r["timestamp"]
                    .as_i64()
                    .is_some_and(|t| t > 1_600_000_000_000)
            );
            (
                r["offset"].as_u64().expect("an offset"),
                r["value"].as_str().expect("a UTF-8 value"),
            )
        })
        .collect();
    assert_eq!(summary, [(0, "first"), (1, "second"), (2, "third line")]);

    // Through the controlplane: the ranges are what the leader last reported with its
    // heartbeat, so wait for the report that includes the three records.
    let deadline = Instant::now() + Duration::from_secs(30);
    let description = loop {
        let described = floe(&profile, &["--json", "stream", "describe", "lines"], None);
        let description = json_lines(&described.stdout).remove(0);
        if description["partitions"][0]["hot"]["end"] == 3 {
            break description;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never reported its records: {description}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let partition = &description["partitions"][0];
    assert_eq!(partition["hot"], serde_json::json!({"start": 0, "end": 3}));
    assert_eq!(partition["replicas"].as_array().map(Vec::len), Some(1));
    assert_eq!(partition["leader"], partition["replicas"][0]);
    assert_eq!(partition["upload_backlog_bytes"], 0);
    assert_eq!(description["replication_factor"], 1);
    assert_eq!(
        description["settings"],
        serde_json::json!({
            "segment_bytes": 1 << 20,
            "segment_age_ms": 600_000,
            "local_retention_bytes": 64 << 20,
            "local_retention_ms": 6 * 3600 * 1000,
            "retention_bytes": null,
            "retention_ms": 30u64 * 24 * 3600 * 1000,
        })
    );
    let table = floe(&profile, &["stream", "describe", "lines"], None).stdout;
    assert!(
        table.contains(
            "segments: 1.0MiB or 10m; local retention: 64.0MiB, 6h; retention: unlimited, 30days"
        ),
        "{table}"
    );
    assert!(table.contains("UPLOAD BACKLOG"), "{table}");

    let listed = floe(&profile, &["stream", "list"], None);
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.starts_with("lines ") && l.ends_with(" leader")),
        "{}",
        listed.stdout
    );

    let brokers = floe(&profile, &["--json", "broker", "list"], None);
    let brokers: serde_json::Value =
        serde_json::from_str(brokers.stdout.trim()).expect("a JSON array of brokers");
    assert_eq!(brokers[0]["state"], "live", "{brokers}");
    assert_eq!(brokers[0]["leaders"], 1, "{brokers}");
    let status = floe(&profile, &["cluster", "status"], None).stdout;
    assert!(
        status.contains("brokers: 1 live, 0 draining, 0 dead"),
        "{status}"
    );
    assert!(status.contains("streams: 1, partitions: 1"), "{status}");
    assert!(
        status.contains("read replicas: 0 live, 0 draining, 0 dead"),
        "{status}"
    );
    let replicas = floe(&profile, &["--json", "replica", "list"], None).stdout;
    assert_eq!(replicas.trim(), "[]");
    let set = floe(
        &profile,
        &[
            "cluster",
            "policy",
            "set",
            "--min",
            "0",
            "--max",
            "4",
            "--target-bytes-per-second",
            "64MiB",
            "--scale-down-cooldown",
            "2m",
        ],
        None,
    );
    assert!(set.status.success(), "{}", set.stderr);
    let status = floe(&profile, &["--json", "cluster", "status"], None).stdout;
    let status: serde_json::Value = serde_json::from_str(status.trim()).expect("JSON status");
    let policy = &status["scaling_policy"];
    assert_eq!(policy["max_replicas"], 4, "{status}");
    assert_eq!(policy["target_bytes_per_second"], 64 << 20, "{status}");
    assert_eq!(policy["scale_down_cooldown_ms"], 120_000, "{status}");
    assert_eq!(status["read_replicas"]["live"], 0, "{status}");

    let deleted = floe(&profile, &["stream", "delete", "lines"], None);
    assert_eq!(deleted.stdout, "deleted stream lines\n");
    let gone = Child::spawn(&profile, &["stream", "describe", "lines"], None).wait();
    assert!(!gone.status.success());
    assert!(gone.stderr.contains("stream_not_found"), "{}", gone.stderr);
}

#[test]
fn following_the_tail_ends_cleanly_on_ctrl_c() {
    let broker = broker();
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "tail"], None);
    let follower = Child::spawn(&profile, &["consume", "tail", "--from", "latest"], None);
    // The header line shows the follower is connected and reading.
    follower.wait_for_lines(1);
    floe(&profile, &["publish", "tail"], Some("late arrival\n"));
    follower.wait_for_lines(2);
    assert!(
        follower.stdout().contains("late arrival"),
        "{}",
        follower.stdout()
    );

    // The shell's own `kill`: no extra package needed, and no unsafe code here.
    let interrupted = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -INT {}", follower.child.id()))
        .status()
        .expect("sh runs");
    assert!(interrupted.success());
    let run = follower.wait();
    assert!(
        run.status.success(),
        "exit after Ctrl-C: {}\n{}",
        run.status,
        run.stderr
    );
}

#[test]
fn a_missing_profile_is_explained() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let run = Child::spawn(&dir.path().join("absent.json"), &["stream", "list"], None).wait();
    assert!(!run.status.success());
    assert!(run.stderr.contains("absent.json"), "{}", run.stderr);
}

#[test]
fn a_broker_the_client_cannot_trust_is_explained() {
    let broker = broker();
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "trust"], None);
    // Another cluster's CA, as `floe-broker certs` makes one.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let made = Command::new(floe_binary().with_file_name("floe-broker"))
        .args(["certs", "--dir"])
        .arg(dir.path())
        .output()
        .expect("floe-broker certs runs");
    assert!(made.status.success());
    let other_ca = dir.path().join("ca.pem");
    let other_ca = other_ca.to_str().expect("UTF-8");

    let wrong_ca = Child::spawn(
        &profile,
        &["--ca-cert", other_ca, "publish", "trust"],
        Some("x\n"),
    )
    .wait();
    assert!(!wrong_ca.status.success());
    assert!(
        wrong_ca.stderr.contains("not signed by the CA in") && wrong_ca.stderr.contains(other_ca),
        "{}",
        wrong_ca.stderr
    );
    assert!(wrong_ca.stderr.contains("--ca-cert"), "{}", wrong_ca.stderr);

    let wrong_name = Child::spawn(
        &profile,
        &["--server-name", "elsewhere.invalid", "publish", "trust"],
        Some("x\n"),
    )
    .wait();
    assert!(!wrong_name.status.success());
    assert!(
        wrong_name
            .stderr
            .contains("does not name `elsewhere.invalid`"),
        "{}",
        wrong_name.stderr
    );
    assert!(
        wrong_name.stderr.contains("--server-name"),
        "{}",
        wrong_name.stderr
    );

    // Nothing was written by either: the high watermark, once the leader reports it, is 0.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let described = floe(&profile, &["--json", "stream", "describe", "trust"], None);
        let described: serde_json::Value =
            serde_json::from_str(described.stdout.trim()).expect("JSON");
        let high_watermark = &described["partitions"][0]["high_watermark"];
        if !high_watermark.is_null() {
            assert_eq!(high_watermark, 0, "{described}");
            break;
        }
        assert!(Instant::now() < deadline, "never reported: {described}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `floe` with its configuration directory in `config` and no `--profile`.
fn floe_in(config: &Path, args: &[&str]) -> Run {
    let output = Command::new(floe_binary())
        .args(args)
        .env("XDG_CONFIG_HOME", config)
        .env_remove("FLOE_PROFILE")
        .env_remove("FLOE_CONTROLPLANE")
        .stdin(Stdio::null())
        .output()
        .expect("floe runs");
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn named_profiles_are_created_listed_used_and_deleted() {
    let broker = broker();
    let config = tempfile::tempdir().expect("a temporary directory");
    let dir = config.path();
    let listed = floe_in(dir, &["profile", "list"]);
    assert!(listed.stdout.contains("no profiles"), "{}", listed.stdout);
    let none = floe_in(dir, &["stream", "list"]);
    assert!(!none.status.success());
    assert!(none.stderr.contains("floe-broker dev"), "{}", none.stderr);

    let path = broker.profile();
    let path = path.to_str().expect("a UTF-8 path");
    let created = floe_in(dir, &["profile", "create", "local", "--from", path]);
    assert!(created.status.success(), "{}", created.stderr);
    let twice = floe_in(dir, &["profile", "create", "local", "--from", path]);
    assert!(twice.stderr.contains("--force"), "{}", twice.stderr);
    let unused = floe_in(dir, &["stream", "list"]);
    assert!(!unused.status.success(), "no profile is current yet");
    let by_name = floe_in(dir, &["--profile", "local", "stream", "list"]);
    assert!(by_name.status.success(), "{}", by_name.stderr);

    let missing = floe_in(dir, &["profile", "use", "prod"]);
    assert!(!missing.status.success());
    assert!(
        missing.stderr.contains("there are: local"),
        "{}",
        missing.stderr
    );
    let used = floe_in(dir, &["profile", "use", "local"]);
    assert_eq!(used.stdout, "now using profile local\n", "{}", used.stderr);
    let listed = floe_in(dir, &["profile", "list"]);
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.starts_with('*') && l.contains("local")),
        "{}",
        listed.stdout
    );
    let current = floe_in(dir, &["stream", "list"]);
    assert!(current.status.success(), "{}", current.stderr);
    let shown = floe_in(dir, &["--json", "profile", "show"]);
    let shown: serde_json::Value = serde_json::from_str(shown.stdout.trim()).expect("JSON");
    assert!(shown["controlplane"].is_string(), "{shown}");

    let bad = floe_in(dir, &["profile", "create", "a b", "--from", path]);
    assert!(bad.stderr.contains("not a profile name"), "{}", bad.stderr);
    let deleted = floe_in(dir, &["profile", "delete", "local"]);
    assert!(deleted.status.success(), "{}", deleted.stderr);
    assert!(
        floe_in(dir, &["profile", "list"])
            .stdout
            .contains("no profiles")
    );
}

#[test]
fn streams_are_altered_and_brokers_undrained() {
    let broker = broker();
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "changing"], None);
    let altered = floe(
        &profile,
        &[
            "stream",
            "alter",
            "changing",
            "--ack-mode",
            "none",
            "--segment-bytes",
            "64KiB",
            "--retention-age",
            "7days",
        ],
        None,
    );
    assert!(
        altered
            .stdout
            .contains("altered stream changing: ack mode none"),
        "{}",
        altered.stdout
    );
    let described = floe(
        &profile,
        &["--json", "stream", "describe", "changing"],
        None,
    );
    let described = json_lines(&described.stdout).remove(0);
    assert_eq!(described["settings"]["segment_bytes"], 64 << 10);
    assert_eq!(
        described["settings"]["retention_ms"],
        7u64 * 24 * 3600 * 1000
    );
    let cleared = floe(
        &profile,
        &[
            "stream",
            "alter",
            "changing",
            "--retention-age",
            "unlimited",
        ],
        None,
    );
    assert!(
        cleared.stdout.contains("retention: unlimited, unlimited"),
        "{}",
        cleared.stdout
    );

    // The broker applies the new segment size: publishes of 100 KB each (a batch or more
    // apiece) seal a segment each, which the controlplane then sees tiered.
    let line = "x".repeat(1000);
    let input: String = (0..100).map(|_| format!("{line}\n")).collect();
    for _ in 0..4 {
        floe(&profile, &["publish", "changing"], Some(&input));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let described = floe(
            &profile,
            &["--json", "stream", "describe", "changing"],
            None,
        );
        let described = json_lines(&described.stdout).remove(0);
        let tiered = described["partitions"][0]["tier"]["end"]
            .as_u64()
            .unwrap_or(0);
        if tiered > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no segment was sealed and tiered at 64 KiB: {described}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    for (args, needle) in [
        (
            &["stream", "alter", "changing", "--partitions", "4"][..],
            "partitions cannot change",
        ),
        (&["stream", "alter", "changing"][..], "nothing to change"),
        (
            &["stream", "alter", "absent", "--ack-mode", "leader"][..],
            "stream_not_found",
        ),
        (&["broker", "undrain", "99"][..], "broker_not_found"),
    ] {
        let refused = Child::spawn(&profile, args, None).wait();
        assert!(!refused.status.success(), "{args:?}");
        assert!(
            refused.stderr.contains(needle),
            "{args:?}: {}",
            refused.stderr
        );
    }

    let described = floe(
        &profile,
        &["--json", "stream", "describe", "changing"],
        None,
    );
    let described: serde_json::Value = serde_json::from_str(described.stdout.trim()).expect("JSON");
    assert_eq!(described["partitions"][0]["state"], "ok", "{described}");
    let drained = floe(&profile, &["broker", "drain", "1"], None);
    assert!(drained.stdout.contains("is draining"), "{}", drained.stdout);
    // Describe says in words why the partition is not healthy: its only broker drains.
    let described = floe(&profile, &["stream", "describe", "changing"], None).stdout;
    assert!(
        described.contains("partition 0: under-replicated: its leader, broker 1 is draining"),
        "{described}"
    );
    let undrained = floe(&profile, &["broker", "undrain", "1"], None);
    assert_eq!(
        undrained.stdout,
        "broker 1 is live again: new replicas may be placed on it\n"
    );
    let brokers = floe(&profile, &["--json", "broker", "list"], None).stdout;
    let brokers: serde_json::Value = serde_json::from_str(brokers.trim()).expect("JSON");
    assert_eq!(brokers[0]["state"], "live", "{brokers}");
}

#[test]
fn version_completions_and_help() {
    let broker = broker();
    let profile = broker.profile();
    let version = floe(&profile, &["--json", "version"], None).stdout;
    let rows: serde_json::Value = serde_json::from_str(version.trim()).expect("JSON");
    let components: Vec<&str> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["component"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(components, ["client", "controlplane", "broker"], "{rows}");
    for row in rows.as_array().expect("rows") {
        assert_eq!(row["build"]["version"], env!("CARGO_PKG_VERSION"), "{row}");
    }
    let table = floe(&profile, &["version"], None).stdout;
    assert!(table.starts_with("COMPONENT"), "{table}");

    // A controlplane that is down: the client still answers, and says so.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let down = floe(
        &profile,
        &["--controlplane", "http://127.0.0.1:9", "version"],
        None,
    );
    assert!(down.stdout.contains("unreachable"), "{}", down.stdout);
    // An administrative command fails, and says what to do.
    let refused = Child::spawn(
        &profile,
        &["--controlplane", "http://127.0.0.1:9", "stream", "list"],
        None,
    )
    .wait();
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("start floe-controlplane"),
        "{}",
        refused.stderr
    );
    drop(dir);

    for shell in ["bash", "zsh", "fish"] {
        let script = floe(&profile, &["completions", shell], None).stdout;
        assert!(script.contains("floe"), "{shell}");
        assert!(
            script.contains("undrain"),
            "{shell}: every command is completed"
        );
    }

    let help = floe(&profile, &["stream", "alter", "--help"], None).stdout;
    let own = help.find("--segment-bytes").expect("the command's flags");
    let heading = help
        .find("Connection (override the profile)")
        .expect("a heading");
    let connection = help.find("--endpoint").expect("the connection flags");
    assert!(own < heading && heading < connection, "{help}");
}

/// The values of `--json` records.
fn values(stdout: &str) -> Vec<String> {
    json_lines(stdout)
        .iter()
        .map(|record| record["value"].as_str().expect("a UTF-8 value").to_owned())
        .collect()
}

/// `floe` with the profile and `token` given as FLOE_TOKEN (overriding the profile's).
fn floe_as(profile: &Path, token: &str, args: &[&str], stdin: Option<&str>) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut child = Command::new(floe_binary())
        .arg("--profile")
        .arg(profile)
        .args(args)
        .env("FLOE_TOKEN", token)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("floe starts");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    } else {
        drop(child.stdin.take());
    }
    let output = child.wait_with_output().expect("floe ends");
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn tokens_are_created_used_listed_and_revoked() {
    let broker = broker();
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "orders"], None);
    floe(&profile, &["stream", "create", "payments"], None);

    // The secret is printed once; --json gives {name, token}.
    let created = floe(
        &profile,
        &[
            "--json",
            "token",
            "create",
            "shipper",
            "--allow",
            "publish:orders",
            "--allow",
            "consume:orders",
        ],
        None,
    );
    let shipper: serde_json::Value = serde_json::from_str(created.stdout.trim()).expect("JSON");
    assert_eq!(shipper["name"], "shipper");
    let token = shipper["token"].as_str().expect("token").to_owned();
    assert!(token.starts_with("floe_"), "{token}");
    let reader = floe(
        &profile,
        &["token", "create", "auditor", "--allow", "describe:*"],
        None,
    );
    assert!(reader.stdout.contains("only time"), "{}", reader.stdout);

    // With its grants it publishes and consumes `orders`.
    let published = floe_as(&profile, &token, &["publish", "orders"], Some("one\ntwo\n"));
    assert!(published.status.success(), "{}", published.stderr);
    let consumed = floe_as(
        &profile,
        &token,
        &[
            "consume", "orders", "--from", "earliest", "--count", "2", "--json",
        ],
        None,
    );
    assert!(consumed.status.success(), "{}", consumed.stderr);
    assert_eq!(values(&consumed.stdout), ["one", "two"]);

    // Without them: refused, naming what it lacks; nothing written.
    let refused = floe_as(&profile, &token, &["publish", "payments"], Some("x\n"));
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("Forbidden") && refused.stderr.contains("no grant"),
        "{}",
        refused.stderr
    );
    let deleting = floe_as(&profile, &token, &["stream", "delete", "orders"], None);
    assert!(!deleting.status.success());
    assert!(
        deleting.stderr.contains("admin:orders"),
        "{}",
        deleting.stderr
    );
    let listed = floe_as(&profile, &token, &["stream", "list"], None);
    assert!(listed.status.success(), "{}", listed.stderr);
    assert!(
        listed.stdout.contains("orders") && !listed.stdout.contains("payments"),
        "lists only what it may describe: {}",
        listed.stdout
    );

    // `token list` shows principals and key ids, never a secret.
    let list = floe(&profile, &["token", "list"], None);
    assert!(
        list.stdout.contains("shipper") && list.stdout.contains("publish:orders"),
        "{}",
        list.stdout
    );
    assert!(!list.stdout.contains(&token[22..]), "{}", list.stdout);
    let listing_as_shipper = floe_as(&profile, &token, &["token", "list"], None);
    assert!(!listing_as_shipper.status.success());
    assert!(
        listing_as_shipper.stderr.contains("cluster-admin"),
        "{}",
        listing_as_shipper.stderr
    );

    // A wrong token and a revoked one: refused as unknown.
    let wrong = floe_as(
        &profile,
        "floe_0000000000000000_00",
        &["publish", "orders"],
        Some("x\n"),
    );
    assert!(!wrong.status.success());
    assert!(
        wrong.stderr.contains("unknown or was revoked"),
        "{}",
        wrong.stderr
    );
    let revoked = floe(&profile, &["token", "revoke", "shipper"], None);
    assert!(revoked.stdout.contains("revoked"), "{}", revoked.stdout);
    // The controlplane refuses it at once; brokers within seconds (they fetch the table
    // every 2 s), well within the 10 s promised.
    let started = std::time::Instant::now();
    loop {
        let probe = floe_as(
            &profile,
            &token,
            &["consume", "orders", "--count", "1", "--from", "earliest"],
            None,
        );
        if !probe.status.success() {
            assert!(
                probe.stderr.contains("unknown or was revoked"),
                "{}",
                probe.stderr
            );
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "still reading after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let after = floe_as(&profile, &token, &["publish", "orders"], Some("x\n"));
    assert!(!after.status.success(), "a revoked token published");
    assert!(
        after.stderr.contains("unknown or was revoked"),
        "{}",
        after.stderr
    );
    let records = floe(
        &profile,
        &[
            "consume", "orders", "--from", "earliest", "--count", "2", "--json",
        ],
        None,
    );
    assert_eq!(
        values(&records.stdout),
        ["one", "two"],
        "refused publishes wrote nothing"
    );
}

/// A run that must fail: its stderr.
fn refused(profile: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let run = Child::spawn(profile, args, stdin).wait();
    assert!(
        !run.status.success(),
        "floe {args:?} succeeded:\n{}",
        run.stdout
    );
    run.stderr
}

#[test]
fn a_draining_broker_and_a_missing_stream_say_what_to_do() {
    let broker = broker();
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "kept"], None);
    floe(&profile, &["broker", "drain", "1"], None);

    // Nothing is live to place a new stream on, and the refusal says which drain to end.
    let create = refused(&profile, &["stream", "create", "more"], None);
    assert!(
        create.contains(
            "no broker is live (broker 1 is draining: `floe broker undrain 1` ends its drain)"
        ) && create.contains("undrain or start brokers before creating streams"),
        "{create}"
    );
    // The draining broker keeps leading what no other broker can take: publishing goes on.
    let published = floe(&profile, &["publish", "kept"], Some("during the drain\n"));
    assert_eq!(published.stdout, "published 1 record to kept\n");
    floe(&profile, &["broker", "undrain", "1"], None);
    floe(&profile, &["stream", "create", "more"], None);

    // A stream that does not exist, through the controlplane and through the broker.
    let next = "floe: the stream does not exist: `floe stream list` shows the streams there \
                are, and `floe stream create NAME` makes one";
    for (args, stdin) in [
        (&["stream", "describe", "absent"][..], None),
        (&["stream", "delete", "absent"][..], None),
        (&["publish", "absent"][..], Some("lost\n")),
        (&["consume", "absent", "--count", "1"][..], None),
    ] {
        let stderr = refused(&profile, args, stdin);
        assert!(
            stderr.contains("absent") && stderr.contains(next),
            "{args:?}: {stderr}"
        );
    }
}

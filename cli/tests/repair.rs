//! A corrupt partition as an operator meets it, through the built `floe` and `floe-broker
//! dev`: records published and acknowledged, the broker SIGKILLed, bytes flipped inside the
//! partition's log, the broker restarted. `floe stream describe` shows the partition
//! `corrupt`; `floe stream repair` says what a repair discards and cuts nothing until that
//! loss is acknowledged; once it is, the partition serves again with every record before the
//! damage.
//!
//! Build the binaries first: `cargo build --workspace --bins` (see the README).

mod support {
    pub mod broker_process;
    pub mod floe_process;
}

use std::path::{Path, PathBuf};

use support::broker_process::BrokerProcess;
use support::floe_process::{Child, floe, floe_binary, json_lines};

/// The segment files of `stream`'s partition 0 under `data`, oldest first.
fn segments(data: &Path, stream: &str) -> Vec<PathBuf> {
    let dir = data.join("streams").join(stream).join("0");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    logs
}

#[test]
fn a_corrupt_partition_is_described_and_repaired_only_once_its_loss_is_acknowledged() {
    let mut broker = BrokerProcess::start(&floe_binary().with_file_name("floe-broker"));
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "ledger"], None);
    for publish in 0..10 {
        let lines: String = (0..100)
            .map(|i| format!("publish-{publish}-record-{i}\n"))
            .collect();
        let published = floe(&profile, &["--json", "publish", "ledger"], Some(&lines));
        assert_eq!(
            json_lines(&published.stdout)[0]["acknowledged"],
            100,
            "{}",
            published.stderr
        );
    }

    let mut flipped = Vec::new();
    broker.kill_and_restart(|data| {
        let segment = segments(data, "ledger").pop().expect("a segment");
        let mut bytes = std::fs::read(&segment).expect("the segment");
        let at = bytes.len() / 3;
        for byte in &mut bytes[at..at + 8] {
            *byte ^= 0xff;
        }
        std::fs::write(&segment, &bytes).expect("flip 8 bytes");
        flipped = bytes;
    });

    // Described as corrupt, with what to run.
    let described = wait_for(|| {
        let run = floe(&profile, &["stream", "describe", "ledger"], None);
        run.stdout.contains("corrupt").then_some(run)
    });
    assert!(
        described
            .stdout
            .contains("`floe stream repair ledger --partition 0` shows what a repair discards"),
        "{}",
        described.stdout
    );

    // The plan: what is lost, and the command that acknowledges it. Nothing changes.
    let plan = floe(
        &profile,
        &["stream", "repair", "ledger", "--partition", "0"],
        None,
    );
    assert!(plan.status.success(), "{}", plan.stderr);
    assert!(plan.stdout.contains("is corrupt"), "{}", plan.stdout);
    let command = plan
        .stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("floe stream repair ledger --partition 0 --discard-from "))
        .unwrap_or_else(|| panic!("no command to acknowledge the loss:\n{}", plan.stdout));
    let discard_from: u64 = command
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("an offset");
    assert!(
        discard_from > 0 && discard_from < 1_000 && discard_from.is_multiple_of(100),
        "cut at {discard_from}: a publish of 100 records is one batch"
    );
    assert!(
        plan.stdout.contains(&format!(
            "every record from offset {discard_from} on is lost"
        )),
        "{}",
        plan.stdout
    );
    let data = profile.with_file_name("data");
    let segment = segments(&data, "ledger").pop().expect("a segment");
    assert_eq!(std::fs::read(&segment).expect("the segment"), flipped);

    // A wrong acknowledgement is refused, and cuts nothing.
    let wrong = Child::spawn(
        &profile,
        &[
            "stream",
            "repair",
            "ledger",
            "--partition",
            "0",
            "--discard-from",
            &(discard_from + 1).to_string(),
        ],
        None,
    )
    .wait();
    assert!(!wrong.status.success());
    assert!(
        wrong
            .stderr
            .contains(&format!("discards from offset {discard_from}")),
        "{}",
        wrong.stderr
    );
    assert_eq!(std::fs::read(&segment).expect("the segment"), flipped);

    // Acknowledged: repaired, and every record before the damage reads back.
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let repaired = floe(&profile, &args, None);
    assert!(repaired.status.success(), "{}", repaired.stderr);
    assert!(
        repaired
            .stdout
            .starts_with("repaired stream ledger partition 0"),
        "{}",
        repaired.stdout
    );
    let consumed = floe(
        &profile,
        &[
            "--json",
            "consume",
            "ledger",
            "--count",
            &discard_from.to_string(),
        ],
        None,
    );
    let values: Vec<String> = json_lines(&consumed.stdout)
        .iter()
        .map(|r| r["value"].as_str().expect("a value").to_owned())
        .collect();
    let expected: Vec<String> = (0..discard_from / 100)
        .flat_map(|p| (0..100).map(move |i| format!("publish-{p}-record-{i}")))
        .collect();
    assert_eq!(values, expected);
    wait_for(|| {
        let run = floe(&profile, &["stream", "describe", "ledger"], None);
        (!run.stdout.contains("corrupt")).then_some(run)
    });
    let published = floe(&profile, &["--json", "publish", "ledger"], Some("after\n"));
    assert_eq!(json_lines(&published.stdout)[0]["acknowledged"], 1);
}

/// `check`'s answer, asked until it has one (a heartbeat carries the broker's state to the
/// controlplane).
fn wait_for<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(std::time::Instant::now() < deadline, "never happened");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

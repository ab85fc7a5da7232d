//! Consumer groups through the `floe` binary against a real `floe-broker dev` process:
//! members share a stream's partitions, a joiner takes some without the others stopping, a
//! member killed with SIGKILL has its partitions taken over from the committed offsets, and
//! two runs with `--count` read every record once between them. `floe group` lists,
//! describes, resets and deletes.

mod support {
    pub mod broker_process;
    pub mod floe_process;
    pub mod http;
}

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::broker_process::BrokerProcess;
use support::floe_process::{Child, floe, floe_binary};

fn broker() -> BrokerProcess {
    BrokerProcess::start(&floe_binary().with_file_name("floe-broker"))
}

/// `(partition, offset)` of every JSON record line printed so far.
fn printed(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|r| {
            (
                r["partition"].as_u64().expect("a partition"),
                r["offset"].as_u64().expect("an offset"),
            )
        })
        .collect()
}

/// Publishes `count` lines to each of `partitions` partitions of `stream`, named by
/// partition and number.
fn publish(profile: &Path, stream: &str, partitions: u32, count: usize, round: &str) {
    for partition in 0..partitions {
        let lines: String = (0..count)
            .map(|i| format!("{round}-p{partition}-{i}\n"))
            .collect();
        let partition = partition.to_string();
        floe(
            profile,
            &["publish", stream, "--partition", &partition],
            Some(&lines),
        );
    }
}

/// The controlplane's `/metrics` (plain HTTP in `dev`), at the URL the profile names.
fn controlplane_metrics(profile: &Path) -> String {
    let profile = floe_client::read_profile(profile).expect("the profile");
    let url = profile.controlplane.expect("a controlplane URL");
    support::http::get(&url, "/metrics")
}

fn describe(profile: &Path, group: &str) -> Value {
    let run = floe(profile, &["--json", "group", "describe", group], None);
    serde_json::from_str(&run.stdout).expect("a JSON description")
}

/// Member id → the partitions it reads, as `floe group describe` shows them.
fn owners(description: &Value) -> BTreeMap<String, BTreeSet<u64>> {
    let mut owners: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for member in description["members"].as_array().expect("members") {
        let id = member["member_id"].as_str().expect("an id").to_owned();
        let partitions = member["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .map(|p| p["partition"].as_u64().expect("a partition"))
            .collect();
        owners.insert(id, partitions);
    }
    owners
}

/// Polls `floe group describe` until `check` accepts it.
fn wait_for(
    profile: &Path,
    group: &str,
    deadline: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + deadline;
    loop {
        // Before the first member joins there is no group to describe.
        let run = Child::spawn(profile, &["--json", "group", "describe", group], None).wait();
        let description: Value = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
        if check(&description) {
            return description;
        }
        assert!(
            Instant::now() < until,
            "{what} within {deadline:?}; the group is now {description:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn balanced(description: &Value, members: usize, partitions: usize) -> bool {
    if description.is_null() {
        return false;
    }
    let owners = owners(description);
    description["state"] == "stable"
        && owners.len() == members
        && owners.values().map(BTreeSet::len).sum::<usize>() == partitions
        && owners.values().all(|p| !p.is_empty())
}

#[test]
fn two_runs_with_a_count_read_every_record_once() {
    let broker = broker();
    let profile = broker.profile();
    floe(
        &profile,
        &["stream", "create", "orders", "--partitions", "4"],
        None,
    );
    publish(&profile, "orders", 4, 500, "a");

    let mut seen = Vec::new();
    for _ in 0..2 {
        let run = floe(
            &profile,
            &[
                "--json", "consume", "orders", "--group", "billing", "--count", "1000",
            ],
            None,
        );
        let records = printed(&run.stdout);
        assert_eq!(records.len(), 1000, "{}", run.stderr);
        seen.extend(records);
    }
    let distinct: BTreeSet<(u64, u64)> = seen.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        2000,
        "every record once across the two runs"
    );

    // Describe: everything committed, nothing left to read, no member.
    let description = describe(&profile, "billing");
    assert_eq!(description["state"], "empty");
    let partitions = description["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 4);
    for partition in partitions {
        assert_eq!(partition["committed"], 500, "{description:#}");
    }
    // The high watermark comes with the leader's next heartbeat report.
    wait_for(
        &profile,
        "billing",
        Duration::from_secs(15),
        "no lag reported",
        |d| {
            d["partitions"].as_array().is_some_and(|ps| {
                ps.iter()
                    .all(|p| p["lag"] == 0 && p["high_watermark"] == 500)
            })
        },
    );
    let table = floe(&profile, &["group", "describe", "billing"], None);
    assert!(
        table.stdout.contains("HIGH-WATERMARK") && table.stdout.contains("LAG"),
        "{}",
        table.stdout
    );

    let list = floe(&profile, &["--json", "group", "list"], None);
    let list: Value = serde_json::from_str(&list.stdout).expect("JSON");
    assert_eq!(list["groups"][0]["group"], "billing");
    assert_eq!(list["groups"][0]["partitions"], 4);

    // Reset to the start, by offset and by time, then delete.
    floe(
        &profile,
        &[
            "group", "reset", "billing", "--stream", "orders", "--to", "earliest",
        ],
        None,
    );
    let description = describe(&profile, "billing");
    assert!(
        description["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .all(|p| p["committed"] == 0)
    );
    // The lag is a metric too, for dashboards and autoscalers.
    let metrics = controlplane_metrics(&profile);
    for partition in 0..4 {
        let series = format!(
            "floe_group_lag_records{{group=\"billing\",stream=\"orders\",partition=\"{partition}\"}} 500"
        );
        assert!(metrics.contains(&series), "{series} in:\n{metrics}");
    }
    floe(
        &profile,
        &[
            "group",
            "reset",
            "billing",
            "--stream",
            "orders",
            "--partition",
            "2",
            "--to",
            "2999-01-01T00:00:00Z",
        ],
        None,
    );
    let description = describe(&profile, "billing");
    assert_eq!(description["partitions"][2]["committed"], 500);
    assert_eq!(description["partitions"][1]["committed"], 0);
    floe(&profile, &["group", "delete", "billing"], None);
    let gone = Child::spawn(&profile, &["group", "describe", "billing"], None).wait();
    assert!(!gone.status.success());
    assert!(gone.stderr.contains("no consumer group"), "{}", gone.stderr);
}

#[test]
fn members_share_partitions_a_joiner_takes_some_and_a_killed_member_is_taken_over() {
    let broker = broker();
    let profile = broker.profile();
    floe(
        &profile,
        &["stream", "create", "events", "--partitions", "4"],
        None,
    );
    publish(&profile, "events", 4, 50, "a");
    let member = || {
        Child::spawn(
            &profile,
            &[
                "--json",
                "consume",
                "events",
                "--group",
                "workers",
                "--session-timeout",
                "2s",
            ],
            None,
        )
    };
    let first = member();
    let second = member();
    let two = wait_for(
        &profile,
        "workers",
        Duration::from_secs(20),
        "two members with two partitions each",
        |d| balanced(d, 2, 4) && owners(d).values().all(|p| p.len() == 2),
    );
    let before = owners(&two);

    // Reads go on while members are busy; wait for everything so far to be printed.
    let all_printed = |children: &[&Child], expected: usize| {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let union: BTreeSet<(u64, u64)> =
                children.iter().flat_map(|c| printed(&c.stdout())).collect();
            if union.len() >= expected {
                return union;
            }
            assert!(
                Instant::now() < until,
                "{} of {expected} records printed",
                union.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    all_printed(&[&first, &second], 200);

    // A third member joins: it takes one or two partitions; the others keep theirs.
    let first_count = printed(&first.stdout()).len();
    let second_count = printed(&second.stdout()).len();
    let mut third = member();
    let three = wait_for(
        &profile,
        "workers",
        Duration::from_secs(20),
        "three members sharing the four partitions",
        |d| balanced(d, 3, 4),
    );
    let after = owners(&three);
    for (id, partitions) in &before {
        assert!(
            after[id].is_subset(partitions),
            "member {id} kept only its own partitions: {partitions:?} then {:?}",
            after[id]
        );
    }
    // The first two went on reading while the third joined.
    publish(&profile, "events", 4, 50, "b");
    all_printed(&[&first, &second, &third], 400);
    assert!(
        printed(&first.stdout()).len() > first_count
            || printed(&second.stdout()).len() > second_count
    );

    // SIGKILL the third: its partitions go to the others within the session timeout + 1 s.
    let third_id = after
        .keys()
        .find(|id| !before.contains_key(*id))
        .expect("the third member's id")
        .clone();
    third.child.kill().expect("SIGKILL");
    let killed_at = Instant::now();
    let taken = wait_for(
        &profile,
        "workers",
        Duration::from_secs(20),
        "the killed member's partitions taken over",
        |d| balanced(d, 2, 4) && !owners(d).contains_key(&third_id),
    );
    let took = killed_at.elapsed();
    eprintln!("the killed member's partitions were taken over {took:?} after the SIGKILL");
    assert!(
        took <= Duration::from_secs(3) + Duration::from_millis(500),
        "taken over in {took:?}, more than the 2 s session timeout + 1 s"
    );
    assert_eq!(owners(&taken).len(), 2);

    // Nothing skipped: every record published is printed by some member (some twice, after
    // the last commit of the one killed).
    publish(&profile, "events", 4, 50, "c");
    let union = all_printed(&[&first, &second, &third], 600);
    for partition in 0..4 {
        for offset in 0..150 {
            assert!(
                union.contains(&(partition, offset)),
                "partition {partition} offset {offset} was skipped"
            );
        }
    }
    drop(first);
    drop(second);
}

#[test]
fn resets_and_deletes_wait_for_an_empty_group() {
    let broker = broker();
    let profile = broker.profile();
    floe(&profile, &["stream", "create", "jobs"], None);
    publish(&profile, "jobs", 1, 10, "a");
    let reader = Child::spawn(
        &profile,
        &[
            "--json",
            "consume",
            "jobs",
            "--group",
            "busy",
            "--session-timeout",
            "1s",
        ],
        None,
    );
    reader.wait_for_lines(10);
    let refused = Child::spawn(
        &profile,
        &[
            "group", "reset", "busy", "--stream", "jobs", "--to", "earliest",
        ],
        None,
    )
    .wait();
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("live member") && refused.stderr.contains("--force"),
        "{}",
        refused.stderr
    );
    floe(
        &profile,
        &[
            "group", "reset", "busy", "--stream", "jobs", "--to", "3", "--force",
        ],
        None,
    );
    let refused = Child::spawn(&profile, &["group", "delete", "busy"], None).wait();
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("floe group describe busy"),
        "{}",
        refused.stderr
    );
    drop(reader);
    // The killed reader's session lapses; then the delete goes through.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let run = Child::spawn(&profile, &["group", "delete", "busy"], None).wait();
        if run.status.success() {
            break;
        }
        assert!(Instant::now() < until, "{}", run.stderr);
        std::thread::sleep(Duration::from_millis(250));
    }
    let list = floe(&profile, &["--json", "group", "list"], None);
    let list: Value = serde_json::from_str(&list.stdout).expect("JSON");
    assert_eq!(list["groups"], serde_json::json!([]));
}

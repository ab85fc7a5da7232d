//! Long history read with `floe consume` goes through the read replica, not the broker: on
//! `floe-broker dev` with one read replica, 20,000 records of 1 KiB whose oldest have left
//! the broker's disk for the tier are read back whole, and the broker's fetched bytes move
//! by under a tenth of what was read.

mod support {
    pub mod broker_process;
    pub mod floe_process;
    pub mod http;
}

use std::time::{Duration, Instant};

use serde_json::Value;
use support::broker_process::BrokerProcess;
use support::floe_process::{floe, floe_binary};
use support::http::{get, metric};

const RECORDS: usize = 20_000;

#[test]
fn consume_reads_history_through_the_read_replica() {
    let broker = BrokerProcess::start_with(&floe_binary().with_file_name("floe-broker"), 1);
    let profile = broker.profile();
    let metrics_at = floe_client::read_profile(&profile)
        .expect("the profile")
        .metrics
        .expect("the broker's metrics address");
    floe(
        &profile,
        &[
            "stream",
            "create",
            "history",
            "--segment-bytes",
            "1MiB",
            "--local-retention-bytes",
            "2MiB",
        ],
        None,
    );
    let lines: String = (0..RECORDS)
        .map(|i| format!("{i:06}{}\n", "x".repeat(1018)))
        .collect();
    floe(&profile, &["publish", "history"], Some(&lines));

    // Wait for the oldest records to be tiered and gone from the broker's disk, and for the
    // read replica to be live.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let described = floe(&profile, &["--json", "stream", "describe", "history"], None);
        let description: Value = serde_json::from_str(&described.stdout).expect("JSON");
        let partition = &description["partitions"][0];
        let hot_start = partition["hot"]["start"].as_u64().unwrap_or(0);
        let replicas = floe(&profile, &["--json", "read-replica", "list"], None);
        let live = replicas.stdout.contains("\"live\"");
        if hot_start > (RECORDS as u64) / 2 && live {
            break;
        }
        assert!(
            Instant::now() < until,
            "history never left the broker's disk or no replica is live: {description}\n{}",
            replicas.stdout
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    let fetched = |text: &str| metric(text, "floe_fetch_bytes_total{stream=\"history\"}");
    let before = fetched(&get(&metrics_at, "/metrics")).unwrap_or(0.0);
    let consumed = floe(
        &profile,
        &[
            "--json",
            "consume",
            "history",
            "--count",
            &RECORDS.to_string(),
        ],
        None,
    );
    let after = fetched(&get(&metrics_at, "/metrics")).unwrap_or(0.0);
    let values: Vec<String> = consumed
        .stdout
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).expect("a JSON record");
            record["value"].as_str().expect("a value").to_owned()
        })
        .collect();
    assert_eq!(values.len(), RECORDS);
    for (i, value) in values.iter().enumerate() {
        assert!(value.starts_with(&format!("{i:06}")), "record {i} in order");
    }
    let read = (RECORDS * 1024) as f64;
    let from_broker = after - before;
    eprintln!("read {read} bytes; the broker fetched {from_broker} of them");
    assert!(
        from_broker < read / 10.0,
        "the broker served {from_broker} bytes of {read} read: the history did not go through \
         the read replica"
    );
}

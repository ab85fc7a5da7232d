//! `floe bench` end to end against a real `floe-broker dev` process: open-loop runs for a
//! time after a warm-up, checked through their JSON figures. The record counts are exact
//! (the schedule decides them, not the broker's speed); the timings only have to be sane,
//! since the test machine may be busy.
//!
//! The broker binary is found next to `floe` in the target directory. Build both first:
//! `cargo build --workspace --bins` (see the README); without it this test fails and says so.

mod support {
    pub mod broker_process;
    pub mod floe_process;
}

use serde_json::Value;
use support::broker_process::BrokerProcess;
use support::floe_process::{Child, floe, floe_binary};

fn broker() -> BrokerProcess {
    BrokerProcess::start(&floe_binary().with_file_name("floe-broker"))
}

fn figures(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn number(figures: &Value, path: &[&str]) -> f64 {
    let mut value = figures;
    for key in path {
        value = &value[key];
    }
    value
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {figures}"))
}

/// p50 ≤ p99 ≤ p999 ≤ max, all positive and below `ceiling_ms`.
fn assert_percentiles(figures: &Value, field: &str, ceiling_ms: f64) {
    let values: Vec<f64> = ["p50", "p99", "p999", "max"]
        .iter()
        .map(|p| number(figures, &[field, p]))
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "{field} percentiles out of order: {values:?}"
    );
    assert!(
        values[0] >= 0.0 && values[3] < ceiling_ms,
        "{field}: {values:?}"
    );
}

#[test]
fn an_open_loop_publish_measures_the_scheduled_records_after_the_warmup() {
    let broker = broker();
    let run = floe(
        &broker.profile(),
        &[
            "--json",
            "bench",
            "publish",
            "--record-size",
            "1KiB",
            "--rate",
            "2000",
            "--duration",
            "1s",
            "--warmup",
            "500ms",
        ],
        None,
    );
    let figures = figures(&run.stdout);
    assert_eq!(figures["bench"], "publish");
    assert_eq!(figures["ack_mode"], "leader");
    assert_eq!(figures["records"], 2_000, "rate × duration: {figures}");
    assert_eq!(figures["records_sent"], 3_000, "the warm-up is sent too");
    assert_eq!(figures["bytes"], 2_000 * 1024);
    assert_eq!(figures["rate"], 2_000.0);
    assert_eq!(
        figures["linger_ms"], 0.0,
        "no linger on a schedule by default"
    );
    assert_eq!(figures["warmup_s"], 0.5);
    assert_eq!(figures["duration_s"], 1.0);
    assert_eq!(figures["latency_ms"]["kind"], "intended send to ack");
    // The measured records span the duration, so the rate cannot come out much above the
    // schedule's; far below it would mean the warm-up or the tail was counted in.
    let records_per_s = number(&figures, &["records_per_s"]);
    assert!(
        (1_000.0..=2_050.0).contains(&records_per_s),
        "records/s {records_per_s}: {figures}"
    );
    assert_percentiles(&figures, "latency_ms", 10_000.0);
    assert_percentiles(&figures, "send_lag_ms", 10_000.0);
    assert!(
        number(&figures, &["send_lag_ms", "p50"]) <= number(&figures, &["latency_ms", "p99"]),
        "the generator's lateness is part of the latency: {figures}"
    );
}

#[test]
fn a_closed_loop_publish_has_no_send_lag_and_keeps_its_linger() {
    let broker = broker();
    let run = floe(
        &broker.profile(),
        &[
            "--json",
            "bench",
            "publish",
            "--records",
            "500",
            "--warmup",
            "200ms",
        ],
        None,
    );
    let figures = figures(&run.stdout);
    assert_eq!(figures["records"], 500);
    assert!(
        figures["records_sent"]
            .as_u64()
            .is_some_and(|sent| sent >= 500),
        "{figures}"
    );
    assert_eq!(figures["linger_ms"], 5.0);
    assert_eq!(figures["send_lag_ms"], Value::Null);
    assert_eq!(figures["latency_ms"]["kind"], "send to ack");
    assert_percentiles(&figures, "latency_ms", 10_000.0);
}

#[test]
fn a_closed_loop_publish_hands_records_over_many_per_call() {
    let broker = broker();
    let run = floe(
        &broker.profile(),
        &[
            "--json",
            "bench",
            "publish",
            "--records",
            "4096",
            "--record-size",
            "1KiB",
            "--batch",
            "512",
        ],
        None,
    );
    let figures = figures(&run.stdout);
    assert_eq!(figures["batch"], 512);
    assert_eq!(figures["records"], 4096, "{figures}");
    assert_eq!(
        figures["records_sent"], 4096,
        "eight calls of 512: {figures}"
    );
    assert_eq!(figures["bytes"], 4096 * 1024);
    assert_percentiles(&figures, "latency_ms", 10_000.0);
    let refused = Child::spawn(
        &broker.profile(),
        &["bench", "publish", "--batch", "10", "--rate", "100"],
        None,
    )
    .wait();
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("cannot be combined with --rate"),
        "{}",
        refused.stderr
    );
}

#[test]
fn an_open_loop_consume_measures_end_to_end_from_the_intended_send() {
    let broker = broker();
    let run = floe(
        &broker.profile(),
        &[
            "--json",
            "bench",
            "consume",
            "--record-size",
            "100",
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--warmup",
            "300ms",
        ],
        None,
    );
    let figures = figures(&run.stdout);
    assert_eq!(figures["bench"], "consume");
    assert_eq!(figures["mode"], "live");
    assert_eq!(figures["records"], 1_000, "rate × duration: {figures}");
    assert_eq!(figures["bytes"], 1_000 * 100);
    assert_eq!(figures["latency_ms"]["kind"], "intended send to consumed");
    assert_percentiles(&figures, "latency_ms", 10_000.0);
    assert_percentiles(&figures, "ack_latency_ms", 10_000.0);
    assert_percentiles(&figures, "send_lag_ms", 10_000.0);
}

#[test]
fn pacing_flags_are_refused_where_they_mean_nothing() {
    let broker = broker();
    let profile = broker.profile();
    let history = Child::spawn(
        &profile,
        &["bench", "consume", "--from", "earliest", "--rate", "100"],
        None,
    )
    .wait();
    assert!(!history.status.success());
    assert!(
        history.stderr.contains("need --from latest"),
        "{}",
        history.stderr
    );
    let both = Child::spawn(
        &profile,
        &["bench", "publish", "--records", "10", "--duration", "1s"],
        None,
    )
    .wait();
    assert!(!both.status.success());
    assert!(
        both.stderr.contains("cannot be used with"),
        "{}",
        both.stderr
    );
}

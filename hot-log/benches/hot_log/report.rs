//! The human-readable tables and the `BENCH_JSON` line.

use std::time::Duration;

use crate::recovery::{OpenAfterCrash, TORN_BYTES};
use crate::{
    GIB, MIB, Machine, RECORD_VALUE_BYTES, Results, Settings, TARGET_OPEN_MS, TARGET_P99_EXTRA_US,
    TARGET_THROUGHPUT_RATIO, Throughput, Workload,
};

pub fn print_header(m: &Machine, w: &Workload, s: &Settings) {
    println!();
    println!("Floe hot-log benchmark");
    println!("  ack mode leader (acknowledged after fdatasync), replication factor 1");
    println!(
        "  dir {} ({}, {:.1} GiB free), {} cpus, kernel {}, load {}",
        m.dir.display(),
        m.fs_kind,
        m.free_gib,
        m.cpus,
        m.kernel,
        m.load_before
    );
    println!(
        "  batches of {} B ({} records, {} B values), small batches of {} B ({} records)",
        w.batch.len(),
        w.batch_records,
        RECORD_VALUE_BYTES,
        w.small_batch.len(),
        w.small_records
    );
    println!(
        "  {} MiB per throughput figure in {} rounds, {:.2} GiB log for open-after-crash, up \
         to {} latency samples per figure",
        w.volume_bytes() / MIB,
        w.rounds,
        s.open_bytes as f64 / GIB as f64,
        s.latency_samples
    );
}

pub fn print_results(r: &Results, w: &Workload) {
    print_throughput_table(r, w);
    print_latency_table(r, w);
    print_open(&r.open);
}

fn throughput_ratio(r: &Results) -> f64 {
    r.log_concurrent.run.mib_per_sec() / r.raw_batch.mib_per_sec()
}

fn print_throughput_table(r: &Results, w: &Workload) {
    println!();
    println!(
        "Throughput: {} MiB per figure, every write durable before it counts",
        w.volume_bytes() / MIB
    );
    println!(
        "  {:<44} {:>9} {:>8} {:>12} {:>7}",
        "", "MiB/s", "syncs", "bytes/sync", "cpu s"
    );
    print_throughput("raw write+fdatasync, 64 KiB writes", &r.raw_batch);
    print_throughput("raw write+fdatasync, 512 KiB writes", &r.raw_grouped);
    for log in [&r.log_concurrent, &r.log_serial] {
        let label = format!("log, {} appender(s), 64 KiB batches", log.appenders);
        print_throughput(&label, &log.run);
    }
    let ratio = throughput_ratio(r);
    println!(
        "  log (8 appenders) / raw 64 KiB = {ratio:.2} (target >= {TARGET_THROUGHPUT_RATIO:.2}: \
         {}); / raw 512 KiB = {:.2}",
        verdict(ratio >= TARGET_THROUGHPUT_RATIO),
        r.log_concurrent.run.mib_per_sec() / r.raw_grouped.mib_per_sec()
    );
    let rounds: Vec<String> = r.round_ratios.iter().map(|x| format!("{x:.2}")).collect();
    println!("  the same ratio round by round: {}", rounds.join(", "));
    println!(
        "  log (8 appenders) syncer: {} fdatasyncs, {:.0} bytes per sync on average (log stats)",
        r.log_concurrent.run.syncs,
        r.log_concurrent.bytes_per_sync()
    );
}

fn print_throughput(label: &str, t: &Throughput) {
    println!(
        "  {label:<44} {:>9.1} {:>8} {:>12.0} {:>7.2}",
        t.mib_per_sec(),
        t.syncs,
        t.bytes_per_sync(),
        t.cpu.as_secs_f64()
    );
}

fn print_latency_table(r: &Results, w: &Workload) {
    println!();
    println!(
        "Latency in µs, append to durable; low load: one {} B batch at a time",
        w.small_batch.len()
    );
    println!(
        "  {:<44} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "", "p50", "p99", "p999", "max", "samples"
    );
    let rows = [
        ("raw write+fdatasync", &r.raw_latency),
        ("raw write, fdatasync on a 2nd thread", &r.helper_latency),
        ("log append -> wait_synced_blocking", &r.log_latency),
        ("log under load: 8 appenders, 64 KiB", &r.log_concurrent.ack),
        ("log under load: 1 appender, 64 KiB", &r.log_serial.ack),
    ];
    for (label, p) in rows {
        println!(
            "  {label:<44} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8}",
            p.p50_us, p.p99_us, p.p999_us, p.max_us, p.samples
        );
    }
    let extra = r.log_latency.p99_us - r.raw_latency.p99_us;
    println!(
        "  log p99 - raw p99 = {extra:+.1} µs (target <= +{TARGET_P99_EXTRA_US:.0} µs: {}); \
         p50 {:+.1} µs; log p99 - 2nd-thread p99 = {:+.1} µs",
        verdict(extra <= TARGET_P99_EXTRA_US),
        r.log_latency.p50_us - r.raw_latency.p50_us,
        r.log_latency.p99_us - r.helper_latency.p99_us
    );
}

fn print_open(o: &OpenAfterCrash) {
    let list = |runs: &[Duration]| {
        runs.iter()
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!();
    println!(
        "Open after crash: {:.2} GiB log in {} segments (active {:.1} MiB), built at {:.1} MiB/s; \
         a {TORN_BYTES}-byte torn batch re-appended before each open",
        o.log_bytes as f64 / GIB as f64,
        o.segments,
        o.active_segment_bytes as f64 / MIB as f64,
        o.build_mib_per_sec
    );
    let cold = median_ms(&o.cold);
    println!(
        "  cold (log files' cached pages dropped): median {cold:.1} ms [{}] (target < \
         {TARGET_OPEN_MS:.0} ms: {})",
        list(&o.cold),
        verdict(cold < TARGET_OPEN_MS)
    );
    println!(
        "  warm (log files in the page cache):     median {:.1} ms [{}]",
        median_ms(&o.warm),
        list(&o.warm)
    );
}

fn median_ms(runs: &[Duration]) -> f64 {
    let mut ms: Vec<f64> = runs.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN)
}

fn verdict(pass: bool) -> &'static str {
    if pass { "met" } else { "MISSED" }
}

/// A flat JSON object, built by hand.
pub struct Json(Vec<String>);

impl Json {
    pub fn number(&mut self, key: &str, value: f64, decimals: usize) {
        self.0.push(format!("\"{key}\":{value:.decimals$}"));
    }

    fn text(&mut self, key: &str, value: &str) {
        let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
        self.0.push(format!("\"{key}\":\"{escaped}\""));
    }
}

pub fn bench_json(
    m: &Machine,
    w: &Workload,
    s: &Settings,
    r: &Results,
    load_after: &str,
) -> String {
    let mut j = Json(Vec::new());
    j.number("unix_time", m.unix_time as f64, 0);
    j.text("ack_mode", "leader");
    j.number("replication_factor", 1.0, 0);
    j.text("dir", &m.dir.display().to_string());
    j.text("fs", &m.fs_kind);
    j.number("cpus", m.cpus as f64, 0);
    j.text("kernel", &m.kernel);
    j.text("load_before", &m.load_before);
    j.text("load_after", load_after);
    j.number("batch_bytes", w.batch.len() as f64, 0);
    j.number("small_batch_bytes", w.small_batch.len() as f64, 0);
    j.number("volume_bytes", w.volume_bytes() as f64, 0);
    j.number("rounds", w.rounds as f64, 0);
    throughput_json(r, &mut j);
    r.raw_latency.json("raw_latency", &mut j);
    r.helper_latency.json("helper_thread_latency", &mut j);
    r.log_latency.json("log_latency", &mut j);
    let extra = r.log_latency.p99_us - r.raw_latency.p99_us;
    j.number("log_minus_raw_p99_us", extra, 1);
    j.number("open_gib", s.open_bytes as f64 / GIB as f64, 3);
    j.number("open_segments", r.open.segments as f64, 0);
    j.number("open_cold_median_ms", median_ms(&r.open.cold), 1);
    j.number("open_warm_median_ms", median_ms(&r.open.warm), 1);
    j.number("open_build_mib_s", r.open.build_mib_per_sec, 1);
    format!("{{{}}}", j.0.join(","))
}

fn throughput_json(r: &Results, j: &mut Json) {
    j.number("raw_64k_mib_s", r.raw_batch.mib_per_sec(), 1);
    j.number("raw_512k_mib_s", r.raw_grouped.mib_per_sec(), 1);
    for (prefix, log) in [("log_8", &r.log_concurrent), ("log_1", &r.log_serial)] {
        j.number(&format!("{prefix}_mib_s"), log.run.mib_per_sec(), 1);
        j.number(&format!("{prefix}_syncs"), log.run.syncs as f64, 0);
        j.number(&format!("{prefix}_bytes_per_sync"), log.bytes_per_sync(), 0);
        j.number(&format!("{prefix}_cpu_s"), log.run.cpu.as_secs_f64(), 2);
        log.ack.json(&format!("{prefix}_ack"), j);
    }
    j.number("raw_64k_cpu_s", r.raw_batch.cpu.as_secs_f64(), 2);
    j.number("log_8_to_raw_64k_ratio", throughput_ratio(r), 3);
    let grouped = r.log_concurrent.run.mib_per_sec() / r.raw_grouped.mib_per_sec();
    j.number("log_8_to_raw_512k_ratio", grouped, 3);
    let rounds: Vec<String> = r.round_ratios.iter().map(|x| format!("{x:.3}")).collect();
    j.0.push(format!(
        "\"log_8_to_raw_64k_round_ratios\":[{}]",
        rounds.join(",")
    ));
}

//! `floe consume`: prints records, from a position, of one partition or all of them.
//! Without `--count` it follows the tail until interrupted; Ctrl-C ends it cleanly.
//!
//! `--json` prints one object per line: `stream`, `partition`, `offset`, `timestamp` (ms
//! since the Unix epoch), `key`, `value` and `headers`. Keys, values and header values are
//! JSON strings when they are valid UTF-8 — the usual case, and lossless. Bytes that are not
//! UTF-8 are never altered: such a field is replaced by `key_base64` / `value_base64` (or a
//! header's `value_base64`) holding standard padded base64. A record without a key has
//! `"key": null`.

use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Args;
use floe_client::{
    ClientConfig, ConsumedRecord, Consumer, ConsumerConfig, FetchPosition, GroupConfig,
    GroupConsumer, PartitionId, StreamName,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::output::{base64, pad_to_width, write_stdout};
use crate::position::parse_position;
use crate::stream::stream_name;

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Stream to read.
    name: String,
    /// Read only this partition [default: all].
    #[arg(long, conflicts_with = "group")]
    partition: Option<u32>,
    /// Read as a member of this consumer group: the group's members share the partitions,
    /// each starts where the group committed, and what is printed is committed (so a
    /// second run goes on where this one stopped). --from applies to partitions the group
    /// never committed in. Needs the controlplane.
    #[arg(long)]
    group: Option<String>,
    /// With --group: the member is removed from the group this long after it stops
    /// heartbeating, and its partitions go to the others.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "group")]
    session_timeout: Duration,
    /// Where to start: earliest, latest, an offset, or an RFC 3339 time such as
    /// 2024-05-01T12:00:00Z (the first record at or after it).
    #[arg(long, default_value = "earliest", value_parser = parse_position)]
    from: FetchPosition,
    /// Stop after this many records [default: follow the tail until interrupted].
    #[arg(long)]
    count: Option<u64>,
}

/// Records in flight between the partitions' readers and the printer.
const RECORDS_PENDING: usize = 1024;

pub async fn run(config: ClientConfig, args: ConsumeArgs, json: bool) -> Result<()> {
    if let Some(group) = args.group.clone() {
        return run_group(config, args, group, json).await;
    }
    let stream = stream_name(&args.name)?;
    let client = crate::connect(config).await?;
    let info = client
        .stream(&stream)
        .await
        .with_context(|| format!("reading stream {stream}"))?;
    let partitions: Vec<u32> = match args.partition {
        Some(p) if p >= info.partition_count => anyhow::bail!(
            "stream {stream} has {} partition(s); there is no partition {p}",
            info.partition_count
        ),
        Some(p) => vec![p],
        None => (0..info.partition_count).collect(),
    };
    if args.count == Some(0) {
        return Ok(());
    }
    let (records, incoming) = mpsc::channel(RECORDS_PENDING);
    for partition in partitions {
        let mut consumer = Consumer::new(
            client.clone(),
            stream.clone(),
            PartitionId::new(partition),
            args.from,
            ConsumerConfig::default(),
        );
        // `latest` means the end of the log when the command starts: fix it now, before the
        // header tells anyone the command is reading.
        consumer
            .resolve_position()
            .await
            .with_context(|| format!("finding where partition {partition} starts"))?;
        tokio::spawn(read_partition(consumer, records.clone()));
    }
    drop(records);
    let printed = print_records(incoming, &stream, args.count, json).await;
    client.close().await;
    printed
}

/// Prints records as they come until `count` are printed, the readers stop, stdout closes
/// or Ctrl-C.
async fn print_records(
    mut incoming: mpsc::Receiver<Result<ConsumedRecord, floe_client::Error>>,
    stream: &StreamName,
    count: Option<u64>,
    json: bool,
) -> Result<()> {
    if !json && !write_stdout(&header())? {
        return Ok(());
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut printed: u64 = 0;
    let mut out = String::new();
    loop {
        let record = tokio::select! {
            biased;
            _ = &mut interrupted => break,
            record = incoming.recv() => record,
        };
        let record = match record {
            None => break,
            Some(Err(e)) => return Err(e).context(format!("reading stream {stream}")),
            Some(Ok(record)) => record,
        };
        if json {
            out.push_str(&json_line(stream.as_str(), &record).to_string());
            out.push('\n');
        } else {
            out.push_str(&human_line(&record));
        }
        printed += 1;
        let done = count.is_some_and(|count| printed >= count);
        // Print in bursts: whenever the readers have nothing more ready, or at the end.
        if done || incoming.is_empty() || out.len() > 64 * 1024 {
            let open = write_stdout(&out)?;
            out.clear();
            if !open {
                break;
            }
        }
        if done {
            break;
        }
    }
    write_stdout(&out)?;
    Ok(())
}

/// How often a group member commits what it printed, at most (and always at the end).
const GROUP_COMMIT_INTERVAL: Duration = Duration::from_secs(1);

/// `floe consume --group`: prints what the group assigns this member, committing what was
/// printed; at the end (count, Ctrl-C, stdout closed) commits and leaves.
async fn run_group(
    config: ClientConfig,
    args: ConsumeArgs,
    group: String,
    json: bool,
) -> Result<()> {
    let stream = stream_name(&args.name)?;
    if config.controlplane.is_none() {
        anyhow::bail!(
            "a consumer group needs the controlplane: pass --controlplane URL (or set \
             FLOE_CONTROLPLANE), or use a profile that names one"
        );
    }
    if args.count == Some(0) {
        return Ok(());
    }
    let client = crate::connect(config).await?;
    let mut settings = GroupConfig::new(group.clone(), [stream.clone()]);
    settings.start = args.from;
    settings.session_timeout = args.session_timeout;
    settings.client_id = Some(format!(
        "floe-{}@{}",
        std::process::id(),
        hostname().unwrap_or_else(|| "?".into())
    ));
    let mut member = GroupConsumer::join(client.clone(), settings)
        .await
        .with_context(|| format!("joining group {group}"))?;
    let printed = print_group(&mut member, args.count, json).await;
    // Commit what was printed, then leave, whatever ended the printing. Records handed out
    // but not printed (stdout closed) are not committed: the next member prints them.
    let committed = match printed {
        Ok(true) => member
            .commit()
            .await
            .with_context(|| format!("committing group {group}'s offsets")),
        Ok(false) | Err(_) => Ok(()),
    };
    let left = member.close().await.context("leaving the group");
    client.close().await;
    printed.map(|_| ()).and(committed).and(left)
}

/// Prints until `count`, Ctrl-C or an error; `Ok(false)` when stdout closed, so that what
/// was handed out is not all printed.
async fn print_group(member: &mut GroupConsumer, count: Option<u64>, json: bool) -> Result<bool> {
    if !json && !write_stdout(&header())? {
        return Ok(false);
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut printed: u64 = 0;
    let mut last_commit = Instant::now();
    let mut out = String::new();
    loop {
        let pending = !out.is_empty();
        let next = async {
            match pending {
                // Flush what is pending when nothing more comes for a moment.
                true => tokio::time::timeout(Duration::from_millis(20), member.next())
                    .await
                    .ok(),
                false => Some(member.next().await),
            }
        };
        let record = tokio::select! {
            biased;
            _ = &mut interrupted => break,
            record = next => record,
        };
        let Some(record) = record else {
            if !write_stdout(&out)? {
                return Ok(false);
            }
            out.clear();
            // What is printed may be committed; what is only buffered may not.
            if last_commit.elapsed() >= GROUP_COMMIT_INTERVAL {
                member
                    .commit()
                    .await
                    .context("committing the group's offsets")?;
                last_commit = Instant::now();
            }
            continue;
        };
        let record = record.context("reading as a group member")?;
        if json {
            out.push_str(&json_line(record.stream.as_str(), &record.record).to_string());
            out.push('\n');
        } else {
            out.push_str(&human_line(&record.record));
        }
        printed += 1;
        let done = count.is_some_and(|count| printed >= count);
        if done || out.len() > 64 * 1024 {
            let open = write_stdout(&out)?;
            out.clear();
            if !open || done {
                return Ok(open);
            }
        }
        // What is printed may be committed; what is only buffered may not.
        if out.is_empty() && last_commit.elapsed() >= GROUP_COMMIT_INTERVAL {
            member
                .commit()
                .await
                .context("committing the group's offsets")?;
            last_commit = Instant::now();
        }
    }
    Ok(write_stdout(&out)?)
}

/// This machine's name, for the member's label.
fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}

async fn read_partition(
    mut consumer: Consumer,
    records: mpsc::Sender<Result<ConsumedRecord, floe_client::Error>>,
) {
    loop {
        let record = consumer.next().await;
        let failed = record.is_err();
        if records.send(record).await.is_err() || failed {
            return;
        }
    }
}

fn header() -> String {
    format!(
        "{:<9}  {:>10}  {:<24}  {:<16}  VALUE\n",
        "PARTITION", "OFFSET", "TIMESTAMP", "KEY"
    )
}

/// One record for people: fixed-width columns (a key's width counted in terminal columns);
/// bytes that are not UTF-8 are shown lossily and line breaks escaped, so that one record
/// stays one line.
fn human_line(record: &ConsumedRecord) -> String {
    let text = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .replace('\\', "\\\\")
            .replace('\n', "\\n")
            .replace('\r', "\\r")
    };
    let key = record.key.as_deref().map_or_else(|| "-".to_string(), text);
    format!(
        "{:<9}  {:>10}  {:<24}  {}  {}\n",
        record.partition,
        record.offset,
        rfc3339(record.timestamp),
        pad_to_width(&key, 16),
        text(&record.value)
    )
}

/// A timestamp in ms as RFC 3339 UTC with milliseconds; the raw number if out of range.
pub fn rfc3339(timestamp_ms: i64) -> String {
    match u64::try_from(timestamp_ms) {
        Ok(ms) => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        Err(_) => timestamp_ms.to_string(),
    }
}

/// One record as a JSON object (see the module documentation for the encoding).
fn json_line(stream: &str, record: &ConsumedRecord) -> Value {
    let mut object = Map::new();
    object.insert("stream".into(), json!(stream));
    object.insert("partition".into(), json!(record.partition.get()));
    object.insert("offset".into(), json!(record.offset.get()));
    object.insert("timestamp".into(), json!(record.timestamp));
    match &record.key {
        Some(key) => insert_bytes(&mut object, "key", key),
        None => {
            object.insert("key".into(), Value::Null);
        }
    }
    insert_bytes(&mut object, "value", &record.value);
    let headers: Vec<Value> = record
        .headers
        .iter()
        .map(|(name, value)| {
            let mut header = Map::new();
            header.insert("name".into(), json!(name));
            insert_bytes(&mut header, "value", value);
            Value::Object(header)
        })
        .collect();
    object.insert("headers".into(), Value::Array(headers));
    Value::Object(object)
}

/// `field` as a string when the bytes are UTF-8, else `field_base64`.
fn insert_bytes(object: &mut Map<String, Value>, field: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => object.insert(field.into(), json!(text)),
        Err(_) => object.insert(format!("{field}_base64"), json!(base64(bytes))),
    };
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use floe_client::Offset;
    use unicode_width::UnicodeWidthStr;

    use super::*;

    fn record(key: Option<&'static [u8]>, value: &'static [u8]) -> ConsumedRecord {
        ConsumedRecord {
            partition: PartitionId::new(1),
            offset: Offset::new(42),
            timestamp: 1_714_564_800_123,
            key: key.map(Bytes::from_static),
            value: Bytes::from_static(value),
            headers: vec![("trace".into(), Bytes::from_static(b"\xff"))],
        }
    }

    #[test]
    fn json_lines_carry_utf8_as_text_and_other_bytes_as_base64() {
        let line = json_line("orders", &record(Some(b"user-1"), b"hello"));
        assert_eq!(
            line,
            json!({
                "stream": "orders",
                "partition": 1,
                "offset": 42,
                "timestamp": 1_714_564_800_123i64,
                "key": "user-1",
                "value": "hello",
                "headers": [{"name": "trace", "value_base64": "/w=="}],
            })
        );
        let binary = json_line("orders", &record(None, b"\x00\xff"));
        assert_eq!(binary["key"], Value::Null);
        assert_eq!(binary["value_base64"], json!("AP8="));
        assert!(binary.get("value").is_none());
    }

    #[test]
    fn human_lines_stay_on_one_line() {
        let line = human_line(&record(None, b"two\nlines"));
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.contains("two\\nlines"));
        assert!(line.contains("2024-05-01T12:00:00.123Z"));
        assert!(line.starts_with("1 "));
    }

    #[test]
    fn human_lines_align_values_after_wide_keys() {
        let wide = human_line(&record(Some("東京".as_bytes()), b"v"));
        let narrow = human_line(&record(Some(b"tokyo"), b"v"));
        let header = header();
        // The VALUE column starts at the same terminal column whatever the key.
        let value_column = |line: &str| {
            let at = line.rfind("  ").expect("a column gap");
            line[..at + 2].width()
        };
        assert_eq!(value_column(&wide), value_column(&narrow));
        assert_eq!(value_column(&wide), value_column(&header));
    }
}

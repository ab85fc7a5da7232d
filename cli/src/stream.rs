//! `floe stream create|list|describe|alter|delete`, over the client protocol to a broker without a
//! controlplane (with one, `admin` sends them to its REST API).

use anyhow::{Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use floe_client::{
    AckMode, ClientConfig, Offset, PartitionMetadata, StreamInfo, StreamName, StreamSettings,
};
use floe_wire::admin::{AlterStreamRequest, RetentionChange, SegmentChange};
use serde_json::json;

use crate::output::{print, print_json, table};
use crate::size::{
    Setting, duration_ms, parse_duration, parse_duration_setting, parse_size, parse_size_setting,
};

#[derive(Subcommand, Debug)]
pub enum StreamCommand {
    /// Create a stream.
    Create(CreateArgs),
    /// List streams.
    List,
    /// Show a stream's settings and partitions: leader, epoch, local and tiered ranges, high
    /// watermark and upload backlog.
    Describe { name: String },
    /// Change a live stream's ack mode, segment or retention settings (controlplane).
    ///
    /// Retention applies at once, segment settings from each partition's next segment on,
    /// the ack mode from the next publish. A setting given as `default` returns to the
    /// broker's default (for --retention-*: no limit). The partition count and the
    /// replication factor are fixed for a stream's life.
    Alter(AlterArgs),
    /// Delete a stream and all its records.
    Delete { name: String },
    /// Repair a partition in the `corrupt` state (its log holds damaged data that the broker
    /// would not cut on its own).
    ///
    /// Without --discard-from, nothing changes: it says what a repair discards — the damaged
    /// batch and every record after it. Run it again with --discard-from set to that first
    /// discarded offset to acknowledge the loss and repair: the partition then serves again,
    /// continuing from that offset. Records still in object storage are kept.
    Repair(RepairArgs),
}

/// `floe stream repair`'s flags.
#[derive(Args, Debug)]
pub struct RepairArgs {
    pub name: String,
    /// The corrupt partition.
    #[arg(long)]
    pub partition: u32,
    /// Acknowledge the loss: the first offset the repair discards, as its plan names it.
    #[arg(long, value_name = "OFFSET")]
    pub discard_from: Option<u64>,
}

/// `floe stream alter`'s flags: each one given changes that setting, the rest stay.
#[derive(Args, Debug)]
pub struct AlterArgs {
    pub name: String,
    /// When a publish is acknowledged.
    #[arg(long, value_parser = ack_mode_parser())]
    pub ack_mode: Option<AckMode>,
    /// Seal segments at this size, e.g. 64MiB, or `default`.
    #[arg(long, value_parser = parse_size_setting, value_name = "SIZE|default")]
    pub segment_bytes: Option<Setting>,
    /// Seal segments at this age, e.g. 10m, or `default`.
    #[arg(long, value_parser = parse_duration_setting, value_name = "AGE|default")]
    pub segment_age: Option<Setting>,
    /// Keep at most this much per partition on the broker's disk, or `default`.
    #[arg(long, value_parser = parse_size_setting, value_name = "SIZE|default")]
    pub local_retention_bytes: Option<Setting>,
    /// Keep records this long on the broker's disk, or `default`.
    #[arg(long, value_parser = parse_duration_setting, value_name = "AGE|default")]
    pub local_retention_age: Option<Setting>,
    /// Keep at most this much per partition in all, or `unlimited`.
    #[arg(long, value_parser = parse_size_setting, value_name = "SIZE|unlimited")]
    pub retention_bytes: Option<Setting>,
    /// Keep records this long in all, or `unlimited`.
    #[arg(long, value_parser = parse_duration_setting, value_name = "AGE|unlimited")]
    pub retention_age: Option<Setting>,
    /// Refused, with the reason: the partition count is fixed for a stream's life.
    #[arg(long, hide = true)]
    pub partitions: Option<u32>,
    /// Refused, with the reason: the replication factor is fixed for a stream's life.
    #[arg(long, hide = true)]
    pub replication_factor: Option<u32>,
}

impl AlterArgs {
    /// The request for the controlplane's REST API.
    pub fn request(&self) -> AlterStreamRequest {
        let change = |setting: Option<Setting>| setting.map(|s| s.0);
        AlterStreamRequest {
            ack_mode: self.ack_mode,
            segment: SegmentChange {
                bytes: change(self.segment_bytes),
                age_ms: change(self.segment_age),
            },
            retention: RetentionChange {
                local_bytes: change(self.local_retention_bytes),
                local_ms: change(self.local_retention_age),
                tier_bytes: change(self.retention_bytes),
                tier_ms: change(self.retention_age),
            },
            partitions: self.partitions,
            replication_factor: self.replication_factor,
        }
    }
}

/// `floe stream create`'s flags.
#[derive(Args, Debug)]
pub struct CreateArgs {
    pub name: String,
    /// Number of partitions, fixed for the stream's life.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Replicas per partition [default: the controlplane's]
    #[arg(long)]
    pub replication_factor: Option<u32>,
    /// When a publish is acknowledged [default: quorum with replicas, else leader]
    #[arg(long, value_parser = ack_mode_parser())]
    pub ack_mode: Option<AckMode>,
    /// Seal a segment at this size, e.g. 64MiB [default: the broker's]
    #[arg(long, value_parser = parse_size)]
    pub segment_bytes: Option<u64>,
    /// Seal a segment at this age, e.g. 10m [default: the broker's]
    #[arg(long, value_parser = parse_duration)]
    pub segment_age: Option<std::time::Duration>,
    /// Keep at most this much per partition on the broker's disk; older sealed segments
    /// are read from object storage once tiered, e.g. 1GiB [default: the broker's]
    #[arg(long, value_parser = parse_size)]
    pub local_retention_bytes: Option<u64>,
    /// Keep records this long on the broker's disk, e.g. 6h [default: the broker's]
    #[arg(long, value_parser = parse_duration)]
    pub local_retention_age: Option<std::time::Duration>,
    /// Keep at most this much per partition in all, object storage included, e.g. 1TiB
    /// [default: no limit]
    #[arg(long, value_parser = parse_size)]
    pub retention_bytes: Option<u64>,
    /// Keep records this long in all, object storage included, e.g. 30days
    /// [default: no limit]
    #[arg(long, value_parser = parse_duration)]
    pub retention_age: Option<std::time::Duration>,
}

impl CreateArgs {
    /// The settings in the client protocol's terms.
    pub fn settings(&self) -> StreamSettings {
        StreamSettings {
            segment_bytes: self.segment_bytes,
            segment_age_ms: self.segment_age.map(duration_ms),
            local_retention_bytes: self.local_retention_bytes,
            local_retention_ms: self.local_retention_age.map(duration_ms),
            retention_bytes: self.retention_bytes,
            retention_ms: self.retention_age.map(duration_ms),
        }
    }
}

/// What `floe stream create` prints once the stream exists; `extra` adds JSON fields.
pub fn print_created(
    stream: &StreamName,
    partitions: u32,
    ack_mode: AckMode,
    extra: serde_json::Value,
    json: bool,
) -> Result<()> {
    if json {
        let mut object = json!({
            "created": stream.as_str(),
            "partitions": partitions,
            "ack_mode": ack_mode.as_str(),
        });
        if let (Some(object), serde_json::Value::Object(extra)) = (object.as_object_mut(), extra) {
            object.extend(extra);
        }
        print_json(&object)?;
    } else {
        print(&format!(
            "created stream {stream} with {partitions} partition{}\n",
            if partitions == 1 { "" } else { "s" }
        ))?;
    }
    Ok(())
}

/// `--ack-mode`'s values: [`AckMode`]'s own names, each explained in `--help`.
fn ack_mode_parser() -> impl TypedValueParser<Value = AckMode> {
    PossibleValuesParser::new(
        AckMode::ALL.map(|mode| PossibleValue::new(mode.as_str()).help(ack_mode_help(mode))),
    )
    .try_map(|name| name.parse::<AckMode>())
}

fn ack_mode_help(mode: AckMode) -> &'static str {
    match mode {
        AckMode::None => "Once the leader has the batch, before any fsync",
        AckMode::Leader => "Once the leader has fsynced the batch",
        AckMode::Quorum => "Once a majority of replicas has fsynced the batch",
    }
}

/// How long `stream create` waits for the new stream to be served.
pub const SERVED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn stream_name(name: &str) -> Result<StreamName> {
    StreamName::new(name).with_context(|| format!("`{name}` is not a stream name"))
}

pub async fn run(config: ClientConfig, command: StreamCommand, json: bool) -> Result<()> {
    let client = crate::connect(config).await?;
    match command {
        StreamCommand::Create(args) => {
            let stream = stream_name(&args.name)?;
            anyhow::ensure!(
                args.replication_factor.is_none_or(|r| r == 1),
                "a broker without a controlplane keeps one replica; pass --controlplane to \
                 replicate"
            );
            let ack_mode = args.ack_mode.unwrap_or(AckMode::Leader);
            client
                .create_stream(&stream, args.partitions, ack_mode, args.settings())
                .await
                .with_context(|| format!("creating stream {stream}"))?;
            // The broker serves a new stream once its partitions are assigned to it, which
            // the controlplane does a moment after the create returns: wait, so that a
            // command that follows this one finds the stream.
            if let Err(e) = client.stream_when_known(&stream, SERVED_WAIT).await {
                eprintln!("floe: stream {stream} was created, but is not served yet: {e}");
            }
            print_created(&stream, args.partitions, ack_mode, json!({}), json)?;
        }
        StreamCommand::List => list(&client, json).await?,
        StreamCommand::Describe { name } => {
            let stream = stream_name(&name)?;
            let info = client
                .stream(&stream)
                .await
                .with_context(|| format!("describing stream {stream}"))?;
            describe(&stream, &info, json)?;
        }
        StreamCommand::Repair(args) => repair(&client, &args, json).await?,
        StreamCommand::Alter(args) => {
            anyhow::bail!(
                "altering stream {} needs the controlplane, which keeps every stream's \
                 settings: pass --controlplane URL (or set FLOE_CONTROLPLANE)",
                args.name
            );
        }
        StreamCommand::Delete { name } => {
            let stream = stream_name(&name)?;
            client
                .delete_stream(&stream)
                .await
                .with_context(|| format!("deleting stream {stream}"))?;
            if json {
                print_json(&json!({ "deleted": stream.as_str() }))?;
            } else {
                print(&format!("deleted stream {stream}\n"))?;
            }
        }
    }
    client.close().await;
    Ok(())
}

/// `floe stream repair`: the plan, or the repair once acknowledged.
async fn repair(client: &floe_client::Client, args: &RepairArgs, json: bool) -> Result<()> {
    let stream = stream_name(&args.name)?;
    let partition = floe_client::PartitionId::new(args.partition);
    let answer = client
        .repair_partition(&stream, partition, args.discard_from.map(Offset::new))
        .await
        .with_context(|| format!("repairing stream {stream} partition {}", args.partition))?;
    if json {
        print_json(&json!({
            "stream": answer.stream.as_str(),
            "partition": answer.partition.get(),
            "repaired": answer.repaired,
            "discard_from": answer.discard_from.get(),
            "discarded_bytes": answer.discarded_bytes,
            "discarded_segments": answer.discarded_segments,
            "restart": answer.restart,
            "segment": answer.segment,
            "position": answer.position,
            "damage": answer.damage,
        }))?;
        return Ok(());
    }
    let from = answer.discard_from;
    let what = if answer.restart {
        format!(
            "object storage holds every record below offset {from}, the damaged ones included: \
             the broker's local copy ({}) is dropped and the partition continues from offset \
             {from}; records the broker held from {from} on are lost",
            human_bytes(answer.discarded_bytes)
        )
    } else {
        format!(
            "every record from offset {from} on is lost: {} of the damaged segment and {} later \
             segment{}",
            human_bytes(answer.discarded_bytes),
            answer.discarded_segments,
            if answer.discarded_segments == 1 {
                ""
            } else {
                "s"
            }
        )
    };
    let text = if answer.repaired {
        format!(
            "repaired stream {stream} partition {}: {what}. It serves again; the next record \
             gets offset {from}.\n",
            args.partition
        )
    } else {
        format!(
            "stream {stream} partition {} is corrupt: segment {} is damaged at byte {} ({}).\n\
             A repair cuts the log at the damage: {what}.\n\
             To acknowledge the loss and repair:\n  \
             floe stream repair {stream} --partition {} --discard-from {from}\n",
            args.partition, answer.segment, answer.position, answer.damage, args.partition
        )
    };
    print(&text)?;
    Ok(())
}

/// Records readable in a stream: the sum over partitions of high watermark less log start.
fn record_count(info: &StreamInfo) -> u64 {
    info.partitions
        .iter()
        .map(|p| p.high_watermark.distance_from(p.log_start))
        .sum()
}

async fn list(client: &floe_client::Client, json: bool) -> Result<()> {
    let streams = client.metadata(&[]).await.context("listing streams")?;
    let mut rows = Vec::new();
    let mut objects = Vec::new();
    for entry in &streams {
        match &entry.result {
            Ok(info) => {
                rows.push(vec![
                    entry.name.to_string(),
                    info.partition_count.to_string(),
                    info.ack_mode.to_string(),
                    record_count(info).to_string(),
                ]);
                objects.push(json!({
                    "name": entry.name.as_str(),
                    "partitions": info.partition_count,
                    "ack_mode": info.ack_mode.as_str(),
                    "records": record_count(info),
                }));
            }
            Err(code) => {
                rows.push(vec![
                    entry.name.to_string(),
                    "-".into(),
                    format!("{code}"),
                    "-".into(),
                ]);
                objects.push(json!({ "name": entry.name.as_str(), "error": code.to_string() }));
            }
        }
    }
    if json {
        print_json(&serde_json::Value::Array(objects))?;
    } else {
        print(&table(
            &["NAME", "PARTITIONS", "ACK MODE", "RECORDS"],
            &rows,
        ))?;
    }
    Ok(())
}

fn settings_json(settings: &StreamSettings) -> serde_json::Value {
    json!({
        "segment_bytes": settings.segment_bytes,
        "segment_age_ms": settings.segment_age_ms,
        "local_retention_bytes": settings.local_retention_bytes,
        "local_retention_ms": settings.local_retention_ms,
        "retention_bytes": settings.retention_bytes,
        "retention_ms": settings.retention_ms,
    })
}

fn size_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "unlimited".into(), human_bytes)
}

pub fn age_text(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "unlimited".into(),
        |ms| humantime::format_duration(std::time::Duration::from_millis(ms)).to_string(),
    )
}

pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

/// `a..b`, or `-` for an empty range.
fn range_text(start: Offset, end: Offset) -> String {
    if end > start {
        format!("{start}..{end}")
    } else {
        "-".into()
    }
}

fn describe(stream: &StreamName, info: &StreamInfo, json: bool) -> Result<()> {
    if json {
        print_json(&description_json(stream, info))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = info.partitions.iter().map(partition_row).collect();
    let damage: String = info
        .partitions
        .iter()
        .filter_map(|p| Some((p.id, p.damaged?)))
        .map(|(id, damaged)| {
            format!(
                "partition {id} is corrupt: {}; it refuses publishes and fetches. `floe stream \
                 repair {stream} --partition {id}` shows what a repair discards.\n",
                damaged_text(damaged)
            )
        })
        .collect();
    let s = &info.settings;
    print(&format!(
        "stream {stream}: {} partition{}, ack mode {}\n\
         segments: {} or {}; local retention: {}, {}; retention: {}, {}\n{}",
        info.partition_count,
        if info.partition_count == 1 { "" } else { "s" },
        info.ack_mode.as_str(),
        size_text(s.segment_bytes),
        age_text(s.segment_age_ms),
        size_text(s.local_retention_bytes),
        age_text(s.local_retention_ms),
        size_text(s.retention_bytes),
        age_text(s.retention_ms),
        table(
            &[
                "PARTITION",
                "LEADER",
                "EPOCH",
                "TIERED",
                "LOCAL",
                "HIGH WATERMARK",
                "UPLOAD BACKLOG",
                "STATE"
            ],
            &rows
        )
    ))?;
    if !damage.is_empty() {
        print(&damage)?;
    }
    Ok(())
}

/// A corrupt partition's damaged offsets, in words.
fn damaged_text(damaged: floe_client::DamagedRange) -> String {
    match damaged.end {
        Some(end) if end > damaged.start => {
            format!("offsets {} to {} are damaged", damaged.start, end.get() - 1)
        }
        _ => format!(
            "offsets from {} to the log's end are damaged",
            damaged.start
        ),
    }
}

/// `floe stream describe --json`: the stream's settings and each partition's state.
fn description_json(stream: &StreamName, info: &StreamInfo) -> serde_json::Value {
    let partitions: Vec<serde_json::Value> = info
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.id.get(),
                "leader": p.leader.as_ref().map(|l| l.as_str()),
                "leader_epoch": p.leader_epoch,
                "log_start": p.log_start.get(),
                "high_watermark": p.high_watermark.get(),
                "local_start": p.local_start.get(),
                "tier_end": p.tier_end.get(),
                "upload_backlog_segments": p.upload_backlog.segments,
                "upload_backlog_bytes": p.upload_backlog.bytes,
                "state": if p.damaged.is_some() { "corrupt" } else { "ok" },
                "damaged": p.damaged.map(|d| json!({
                    "start": d.start.get(),
                    "end": d.end.map(|end| end.get()),
                })),
            })
        })
        .collect();
    json!({
        "name": stream.as_str(),
        "partition_count": info.partition_count,
        "ack_mode": info.ack_mode.as_str(),
        "settings": settings_json(&info.settings),
        "partitions": partitions,
    })
}

/// One partition's row of the `describe` table.
fn partition_row(p: &PartitionMetadata) -> Vec<String> {
    vec![
        p.id.to_string(),
        p.leader.as_ref().map_or("-".into(), |l| l.to_string()),
        p.leader_epoch.to_string(),
        range_text(p.log_start, p.tier_end),
        range_text(p.local_start, p.high_watermark),
        p.high_watermark.to_string(),
        format!(
            "{} ({})",
            p.upload_backlog.segments,
            human_bytes(p.upload_backlog.bytes)
        ),
        if p.damaged.is_some() { "corrupt" } else { "ok" }.to_owned(),
    ]
}

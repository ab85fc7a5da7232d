//! `floe group`: list, describe, reset and delete consumer groups (controlplane).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use floe_client::rest::Controlplane;
use floe_client::{ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId};
use floe_wire::admin::{
    ApiErrorCode, GroupDescription, GroupOffsets, ResetOffsetsRequest, ResetTarget,
};
use serde_json::json;

use crate::output::{print, print_json, table};
use crate::position::parse_position;
use crate::stream::stream_name;

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// Every group: those with committed offsets and those with live members.
    List,
    /// A group's state and members, and per partition: committed offset, high watermark,
    /// lag and the member reading it.
    Describe { group: String },
    /// Move a group's committed offsets in one stream. Refused while the group has live
    /// members, unless --force.
    Reset(ResetArgs),
    /// Forget a group's committed offsets. Refused while the group has live members.
    Delete { group: String },
}

#[derive(Args, Debug)]
pub struct ResetArgs {
    group: String,
    /// The stream whose offsets move.
    #[arg(long)]
    stream: String,
    /// Where to: earliest, latest, an offset, or an RFC 3339 time such as
    /// 2024-05-01T12:00:00Z (each partition's first record at or after it).
    #[arg(long, value_parser = parse_position)]
    to: FetchPosition,
    /// Only this partition [default: all].
    #[arg(long)]
    partition: Option<u32>,
    /// Reset even while members read: they keep their positions, and their next commits
    /// overwrite the reset.
    #[arg(long)]
    force: bool,
}

pub async fn run(
    controlplane: &Controlplane,
    client: Result<ClientConfig>,
    command: GroupCommand,
    json: bool,
) -> Result<()> {
    match command {
        GroupCommand::List => list(controlplane, json).await,
        GroupCommand::Describe { group } => {
            let description = controlplane
                .describe_group(&group)
                .await
                .with_context(|| format!("describing group {group}"))?;
            describe(&description, json)
        }
        GroupCommand::Reset(args) => reset(controlplane, client, args, json).await,
        GroupCommand::Delete { group } => {
            controlplane
                .delete_group(&group)
                .await
                .map_err(|e| explain(e, &group))
                .with_context(|| format!("deleting group {group}"))?;
            if json {
                print_json(&json!({ "deleted": group }))?;
            } else {
                print(&format!("deleted group {group}\n"))?;
            }
            Ok(())
        }
    }
}

/// Adds what to do to a refusal for live members.
fn explain(error: floe_client::rest::RestError, group: &str) -> anyhow::Error {
    let hint = (error.code() == Some(ApiErrorCode::GroupNotEmpty))
        .then(|| format!("`floe group describe {group}` lists its members; stop them first"));
    match hint {
        Some(hint) => anyhow::Error::new(error).context(hint),
        None => anyhow::Error::new(error),
    }
}

async fn list(controlplane: &Controlplane, json: bool) -> Result<()> {
    let list = controlplane.groups().await.context("listing groups")?;
    if json {
        return print_json(&serde_json::to_value(&list)?).map_err(Into::into);
    }
    let rows: Vec<Vec<String>> = list
        .groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.members.to_string(),
                g.streams.to_string(),
                g.partitions.to_string(),
            ]
        })
        .collect();
    print(&table(
        &["GROUP", "MEMBERS", "STREAMS", "PARTITIONS"],
        &rows,
    ))?;
    Ok(())
}

fn dash(value: Option<u64>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}

fn describe(description: &GroupDescription, json: bool) -> Result<()> {
    if json {
        return print_json(&serde_json::to_value(description)?).map_err(Into::into);
    }
    let state = serde_json::to_value(description.state)?;
    let mut text = format!(
        "group {}: {}, generation {}, {} member(s)\n\n",
        description.group,
        state.as_str().unwrap_or("?"),
        description.generation,
        description.members.len()
    );
    let rows: Vec<Vec<String>> = description
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.stream.to_string(),
                p.partition.to_string(),
                dash(p.committed),
                dash(p.high_watermark),
                dash(p.lag),
                p.member.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "STREAM",
            "PARTITION",
            "COMMITTED",
            "HIGH-WATERMARK",
            "LAG",
            "MEMBER",
        ],
        &rows,
    ));
    if !description.members.is_empty() {
        let rows: Vec<Vec<String>> = description
            .members
            .iter()
            .map(|m| {
                vec![
                    m.member_id.clone(),
                    m.client_id.clone().unwrap_or_else(|| "-".into()),
                    m.partitions.len().to_string(),
                    format!("{} ms ago", m.last_heartbeat_ms),
                ]
            })
            .collect();
        text.push('\n');
        text.push_str(&table(
            &["MEMBER", "CLIENT", "PARTITIONS", "LAST-HEARTBEAT"],
            &rows,
        ));
    }
    print(&text)?;
    Ok(())
}

async fn reset(
    controlplane: &Controlplane,
    client: Result<ClientConfig>,
    args: ResetArgs,
    json: bool,
) -> Result<()> {
    let stream = stream_name(&args.stream)?;
    let partitions = args.partition.map(|p| vec![PartitionId::new(p)]);
    let context = || format!("resetting group {} in stream {stream}", args.group);
    let answer: GroupOffsets = match args.to {
        FetchPosition::Earliest | FetchPosition::Latest | FetchPosition::Offset(_) => {
            let to = match args.to {
                FetchPosition::Earliest => ResetTarget::Earliest,
                FetchPosition::Latest => ResetTarget::Latest,
                FetchPosition::Offset(offset) => ResetTarget::Offset {
                    offset: offset.get(),
                },
                FetchPosition::Timestamp(_) => unreachable!("matched above"),
            };
            let request = ResetOffsetsRequest {
                stream: stream.clone(),
                partitions,
                to,
                force: args.force,
            };
            controlplane
                .reset_offsets(&args.group, &request)
                .await
                .map_err(|e| explain(e, &args.group))
                .with_context(context)?
        }
        // The brokers know where a time falls: ask each partition's, then set the offsets.
        FetchPosition::Timestamp(_) => {
            let config = client.context("finding offsets by time needs the brokers")?;
            let client = crate::connect(config).await?;
            let info = client.stream(&stream).await.with_context(context)?;
            let chosen: Vec<u32> = match args.partition {
                Some(p) => vec![p],
                None => (0..info.partition_count).collect(),
            };
            let mut last = None;
            for partition in chosen {
                let mut consumer = Consumer::new(
                    client.clone(),
                    stream.clone(),
                    PartitionId::new(partition),
                    args.to,
                    ConsumerConfig::default(),
                );
                let offset = consumer.resolve_position().await.with_context(|| {
                    format!("finding the offset of that time in partition {partition}")
                })?;
                let request = ResetOffsetsRequest {
                    stream: stream.clone(),
                    partitions: Some(vec![PartitionId::new(partition)]),
                    to: ResetTarget::Offset {
                        offset: offset.get(),
                    },
                    force: args.force,
                };
                last = Some(
                    controlplane
                        .reset_offsets(&args.group, &request)
                        .await
                        .map_err(|e| explain(e, &args.group))
                        .with_context(context)?,
                );
            }
            client.close().await;
            last.with_context(context)?
        }
    };
    if json {
        return print_json(&serde_json::to_value(&answer)?).map_err(Into::into);
    }
    let rows: Vec<Vec<String>> = answer
        .offsets
        .iter()
        .filter(|o| o.stream == stream)
        .map(|o| vec![o.partition.to_string(), o.offset.to_string()])
        .collect();
    print(&format!("group {} in stream {stream}:\n", answer.group))?;
    print(&table(&["PARTITION", "COMMITTED"], &rows))?;
    Ok(())
}

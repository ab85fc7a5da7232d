//! The commands that talk to the controlplane's REST API: `floe stream …` when a controlplane
//! is configured, `floe broker list|drain|undrain`, `floe cluster status` and `floe cluster policy`.

use anyhow::{Context, Result};
use clap::Subcommand;
use floe_client::rest::Controlplane;
use floe_wire::BrokerId;
use floe_wire::admin::{
    BrokerInfo, BrokerState, CreateStreamRequest, OffsetRange, PartitionDescription,
    ReadReplicaInfo, ReadReplicaState, Readiness, RetentionSettings, ScalingPolicy,
    SegmentSettings, StreamConfig, StreamDescription, StreamInfo,
};
use serde_json::json;

use crate::output::{print, print_json, table};
use crate::read_replica::{PolicyCommand, policy_text, read_replica_table};
use crate::stream::{
    AlterArgs, CreateArgs, StreamCommand, age_text, human_bytes, print_created, stream_name,
};

#[derive(Subcommand, Debug)]
pub enum BrokerCommand {
    /// List brokers: endpoints, zone, lease state, replicas and leaders.
    List,
    /// Stop placing replicas on a broker and move its replicas away.
    Drain { id: u32 },
    /// End a drain: the broker may take replicas and lead again.
    Undrain { id: u32 },
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// The controlplane's role, brokers by state, streams and partitions, read replicas and
    /// their scaling policy.
    Status,
    /// Show or change the read-replica scaling policy.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// `floe stream …` through the controlplane.
pub async fn stream(controlplane: &Controlplane, command: StreamCommand, json: bool) -> Result<()> {
    match command {
        StreamCommand::Create(args) => create_stream(controlplane, &args, json).await?,
        StreamCommand::List => list_streams(controlplane, json).await?,
        StreamCommand::Describe { name } => {
            let stream = stream_name(&name)?;
            let description = controlplane
                .stream(stream.as_str())
                .await
                .with_context(|| format!("describing stream {stream}"))?;
            // The brokers' states explain partitions without a leader or short of replicas.
            let brokers = controlplane
                .brokers()
                .await
                .with_context(|| format!("describing stream {stream}: listing the brokers"))?;
            describe(&description, &brokers.brokers, json)?;
        }
        StreamCommand::Alter(args) => alter_stream(controlplane, &args, json).await?,
        StreamCommand::Repair(args) => anyhow::bail!(
            "repairing stream {} goes to the broker that holds the partition, over the client \
             protocol, not to the controlplane",
            args.name
        ),
        StreamCommand::Delete { name } => {
            let stream = stream_name(&name)?;
            controlplane
                .delete_stream(stream.as_str())
                .await
                .with_context(|| format!("deleting stream {stream}"))?;
            if json {
                print_json(&json!({ "deleted": stream.as_str() }))?;
            } else {
                print(&format!("deleted stream {stream}\n"))?;
            }
        }
    }
    Ok(())
}

/// `floe stream alter`: sends the changes, then shows the settings as they now are.
async fn alter_stream(controlplane: &Controlplane, args: &AlterArgs, json: bool) -> Result<()> {
    let stream = stream_name(&args.name)?;
    let request = args.request();
    anyhow::ensure!(
        !request.is_empty(),
        "nothing to change: pass at least one of --ack-mode, --segment-bytes, --segment-age, \
         --local-retention-bytes, --local-retention-age, --retention-bytes, --retention-age"
    );
    let altered = controlplane
        .alter_stream(stream.as_str(), &request)
        .await
        .with_context(|| format!("altering stream {stream}"))?;
    if json {
        print_json(&serde_json::to_value(&altered)?)?;
    } else {
        let config = &altered.config;
        print(&format!(
            "altered stream {stream}: ack mode {}; {}\n",
            config.ack_mode,
            settings_text(config)
        ))?;
    }
    Ok(())
}

/// `floe stream create`.
async fn create_stream(controlplane: &Controlplane, args: &CreateArgs, json: bool) -> Result<()> {
    let stream = stream_name(&args.name)?;
    let settings = args.settings();
    let request = CreateStreamRequest {
        name: stream.clone(),
        partitions: args.partitions,
        replication_factor: args.replication_factor,
        ack_mode: args.ack_mode,
        segment: SegmentSettings::from_client(&settings),
        retention: RetentionSettings::from_client(&settings),
    };
    let info = controlplane
        .create_stream(&request)
        .await
        .with_context(|| format!("creating stream {stream}"))?;
    let extra = json!({ "replication_factor": info.config.replication_factor });
    print_created(
        &stream,
        info.config.partitions,
        info.config.ack_mode,
        extra,
        json,
    )
}

/// `floe stream list`.
async fn list_streams(controlplane: &Controlplane, json: bool) -> Result<()> {
    let list = controlplane.streams().await.context("listing streams")?;
    if json {
        print_json(&serde_json::to_value(&list.streams)?)?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .streams
        .iter()
        .map(|s| {
            vec![
                s.name.to_string(),
                s.config.partitions.to_string(),
                s.config.replication_factor.to_string(),
                s.config.ack_mode.to_string(),
            ]
        })
        .collect();
    print(&table(
        &["NAME", "PARTITIONS", "REPLICATION", "ACK MODE"],
        &rows,
    ))?;
    Ok(())
}

fn settings_json(config: &StreamConfig) -> serde_json::Value {
    json!({
        "segment_bytes": config.segment.bytes,
        "segment_age_ms": config.segment.age_ms,
        "local_retention_bytes": config.retention.local_bytes,
        "local_retention_ms": config.retention.local_ms,
        "retention_bytes": config.retention.tier_bytes,
        "retention_ms": config.retention.tier_ms,
    })
}

fn range_json(range: Option<OffsetRange>) -> serde_json::Value {
    range.map_or(
        serde_json::Value::Null,
        |r| json!({"start": r.start, "end": r.end}),
    )
}

fn range_text(range: Option<OffsetRange>) -> String {
    match range {
        Some(r) if r.end > r.start => format!("{}..{}", r.start, r.end),
        Some(_) => "empty".into(),
        None => "-".into(),
    }
}

/// A size and an age setting of a stream, joined by `separator`; either may be left to the
/// broker, and both left read as one "broker default".
fn size_and_age(size: Option<u64>, age_ms: Option<u64>, separator: &str) -> String {
    match (size, age_ms) {
        (None, None) => "broker default".into(),
        (size, age_ms) => format!(
            "{}{separator}{}",
            size.map_or("default size".into(), human_bytes),
            age_ms.map_or("default age".into(), |ms| age_text(Some(ms)))
        ),
    }
}

/// A stream's segment and retention settings in words, as `describe` and `alter` print them.
fn settings_text(c: &StreamConfig) -> String {
    format!(
        "segments: {}; local retention: {}; retention: {}, {}",
        size_and_age(c.segment.bytes, c.segment.age_ms, " or "),
        size_and_age(c.retention.local_bytes, c.retention.local_ms, ", "),
        c.retention
            .tier_bytes
            .map_or("unlimited".into(), human_bytes),
        age_text(c.retention.tier_ms),
    )
}

fn describe(d: &StreamDescription, brokers: &[BrokerInfo], json: bool) -> Result<()> {
    let health: Vec<Health> = d
        .partitions
        .iter()
        .map(|p| Health::of(d.name.as_str(), p, d.config.replication_factor, brokers))
        .collect();
    if json {
        print_json(&description_json(d, &health))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = d
        .partitions
        .iter()
        .zip(&health)
        .map(|(p, h)| partition_row(p, h))
        .collect();
    let mut why = String::new();
    for (p, h) in d.partitions.iter().zip(&health) {
        for reason in &h.reasons {
            why.push_str(&format!(
                "partition {}: {}: {reason}\n",
                p.partition, h.state
            ));
        }
    }
    let c = &d.config;
    print(&format!(
        "stream {}: {} partition{}, replication {}, ack mode {}\n{}\n\
         (ranges and sizes as the leaders last reported them)\n{}{why}",
        d.name,
        c.partitions,
        if c.partitions == 1 { "" } else { "s" },
        c.replication_factor,
        c.ack_mode.as_str(),
        settings_text(c),
        table(
            &[
                "PARTITION",
                "STATE",
                "LEADER",
                "REPLICAS",
                "EPOCH",
                "HIGH WATERMARK",
                "FOLLOWER LAG",
                "TIERED",
                "HOT",
                "BYTES",
                "UPLOAD BACKLOG",
            ],
            &rows
        )
    ))?;
    Ok(())
}

/// A partition's state in words: `ok`, `no-leader` or `under-replicated`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Health {
    state: &'static str,
    reasons: Vec<String>,
}

impl Health {
    /// What `p`'s assignment, the brokers' states and the replicas reported corrupt say of
    /// it: `corrupt` when the copy clients are served from is damaged.
    fn of(
        stream: &str,
        p: &PartitionDescription,
        replication_factor: u32,
        brokers: &[BrokerInfo],
    ) -> Health {
        let mut health = Health::placed(p, replication_factor, brokers);
        for corrupt in &p.corrupt {
            let damaged = match (corrupt.damaged_start, corrupt.damaged_end) {
                (Some(start), Some(end)) if end > start => {
                    format!("offsets {start} to {} are damaged", end - 1)
                }
                (Some(start), _) => format!("offsets from {start} to the log's end are damaged"),
                _ => "its log is damaged".to_owned(),
            };
            let serving = p.leader == Some(corrupt.broker_id) || p.replicas.len() <= 1;
            health.reasons.push(format!(
                "broker {} holds it corrupt: {damaged} (segment {} at byte {}: {}); {}",
                corrupt.broker_id.get(),
                corrupt.segment,
                corrupt.position,
                corrupt.reason,
                if serving {
                    format!(
                        "it refuses publishes and fetches until an operator repairs it: `floe \
                         stream repair {stream} --partition {}` shows what a repair discards",
                        p.partition
                    )
                } else {
                    "the leader serves from the other replicas".to_owned()
                }
            ));
            if serving {
                health.state = "corrupt";
            } else if health.state == "ok" {
                health.state = "under-replicated";
            }
        }
        health
    }

    /// What `p`'s assignment and the brokers' states say of it.
    fn placed(p: &PartitionDescription, replication_factor: u32, brokers: &[BrokerInfo]) -> Health {
        let state_of = |id: BrokerId| brokers.iter().find(|b| b.broker_id == id).map(|b| b.state);
        let not_live = |id: BrokerId| match state_of(id) {
            Some(BrokerState::Live) => None,
            Some(state) => Some(format!("broker {} is {}", id.get(), state_name(state))),
            None => Some(format!("broker {} is not registered", id.get())),
        };
        let list = |ids: &[BrokerId]| {
            ids.iter()
                .map(|b| b.get().to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut reasons = Vec::new();
        if p.replicas.is_empty() {
            reasons.push(
                "no broker was live to place it on; it is placed when one registers".to_owned(),
            );
            return Health {
                state: "no-leader",
                reasons,
            };
        }
        let down: Vec<String> = p.replicas.iter().filter_map(|id| not_live(*id)).collect();
        let Some(leader) = p.leader else {
            let live = p.replicas.len() - down.len();
            let majority = p.replicas.len() / 2 + 1;
            reasons.push(if p.electing && live >= majority {
                format!(
                    "electing a leader at epoch {} among replicas {} (a majority of {majority} \
                     is live; it ends as soon as they answer)",
                    p.epoch,
                    list(&p.replicas)
                )
            } else if p.electing {
                format!(
                    "electing a leader at epoch {}, but only {live} of replicas {} are live and \
                     {majority} must answer: {}; the election completes when enough return, or \
                     once dead members are replaced (--replace-dead-after)",
                    p.epoch,
                    list(&p.replicas),
                    down.join(", ")
                )
            } else if !down.is_empty() {
                format!(
                    "{}; the controlplane moves it to a live broker, if any, once the lease lapses",
                    down.join(", ")
                )
            } else {
                "no leader named yet: the controlplane assigns one on its next pass".to_owned()
            });
            return Health {
                state: "no-leader",
                reasons,
            };
        };
        if let Some(why) = not_live(leader) {
            reasons.push(format!(
                "its leader, {why}: clients are moved once a new leader is chosen"
            ));
        }
        for why in p
            .replicas
            .iter()
            .filter(|id| **id != leader)
            .filter_map(|id| not_live(*id))
        {
            reasons.push(format!(
                "{why}: its replica is replaced by a live broker after --replace-dead-after \
                 (at once when draining)"
            ));
        }
        let have = u32::try_from(p.replicas.len()).unwrap_or(u32::MAX);
        if have < replication_factor {
            reasons.push(format!(
                "{have} of {replication_factor} replicas: too few live brokers to place the \
                 rest; add brokers and they are placed"
            ));
        }
        if !p.previous_replicas.is_empty() {
            reasons.push(format!(
                "the replica set is changing from {} to {}: new members copy the leader's log",
                list(&p.previous_replicas),
                list(&p.replicas)
            ));
        }
        for lag in p.replica_lag.iter().filter(|l| l.records > 0) {
            reasons.push(format!(
                "broker {} is {} records behind the leader",
                lag.broker_id.get(),
                lag.records
            ));
        }
        Health {
            state: if reasons.is_empty() {
                "ok"
            } else {
                "under-replicated"
            },
            reasons,
        }
    }
}

/// `floe stream describe --json`: the stream's configuration and each partition's state.
fn description_json(d: &StreamDescription, health: &[Health]) -> serde_json::Value {
    let partitions: Vec<serde_json::Value> = d
        .partitions
        .iter()
        .zip(health)
        .map(|(p, h)| {
            json!({
                "partition": p.partition.get(),
                "state": h.state,
                "why": h.reasons,
                "replicas": p.replicas.iter().map(|b| b.get()).collect::<Vec<_>>(),
                "leader": p.leader.map(BrokerId::get),
                "epoch": p.epoch,
                "hot": range_json(p.hot),
                "tier": range_json(p.tier),
                "bytes": p.bytes,
                "upload_backlog_bytes": p.upload_backlog_bytes,
                "high_watermark": p.high_watermark,
                "replica_lag": p.replica_lag.iter()
                    .map(|l| json!({"broker_id": l.broker_id.get(), "records": l.records}))
                    .collect::<Vec<_>>(),
                "previous_replicas":
                    p.previous_replicas.iter().map(|b| b.get()).collect::<Vec<_>>(),
                "corrupt": p.corrupt.iter().map(|c| json!({
                    "broker_id": c.broker_id.get(),
                    "segment": c.segment,
                    "position": c.position,
                    "damaged_start": c.damaged_start,
                    "damaged_end": c.damaged_end,
                    "reason": c.reason,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "name": d.name.as_str(),
        "partition_count": d.config.partitions,
        "replication_factor": d.config.replication_factor,
        "ack_mode": d.config.ack_mode.as_str(),
        "created_at_ms": d.created_at_ms,
        "settings": settings_json(&d.config),
        "partitions": partitions,
    })
}

/// One partition's row of the `describe` table.
fn partition_row(p: &PartitionDescription, health: &Health) -> Vec<String> {
    let replicas: Vec<String> = p.replicas.iter().map(|b| b.get().to_string()).collect();
    let mut set = if replicas.is_empty() {
        "-".into()
    } else {
        replicas.join(",")
    };
    if !p.previous_replicas.is_empty() {
        // A change in progress: the set being left, after the new one.
        let previous: Vec<String> = p
            .previous_replicas
            .iter()
            .map(|b| b.get().to_string())
            .collect();
        set = format!("{set} (from {})", previous.join(","));
    }
    vec![
        p.partition.to_string(),
        health.state.to_owned(),
        p.leader.map_or("-".into(), |l| l.get().to_string()),
        set,
        p.epoch.to_string(),
        p.high_watermark.map_or("-".into(), |hw| hw.to_string()),
        lag_text(&p.replica_lag),
        range_text(p.tier),
        range_text(p.hot),
        p.bytes.map_or("-".into(), human_bytes),
        p.upload_backlog_bytes.map_or("-".into(), human_bytes),
    ]
}

/// Each follower's lag in records, `broker:records`, or `-` for none reported.
fn lag_text(lag: &[floe_wire::admin::ReplicaLag]) -> String {
    if lag.is_empty() {
        return "-".into();
    }
    lag.iter()
        .map(|l| format!("{}:{}", l.broker_id.get(), l.records))
        .collect::<Vec<_>>()
        .join(",")
}

fn state_name(state: BrokerState) -> &'static str {
    match state {
        BrokerState::Live => "live",
        BrokerState::Draining => "draining",
        BrokerState::Dead => "dead",
    }
}

fn broker_rows(brokers: &[BrokerInfo]) -> Vec<Vec<String>> {
    brokers
        .iter()
        .map(|b| {
            vec![
                b.broker_id.get().to_string(),
                b.client_endpoint.to_string(),
                b.zone.clone().unwrap_or_else(|| "-".into()),
                state_name(b.state).to_string(),
                b.replicas.to_string(),
                b.leaders.to_string(),
            ]
        })
        .collect()
}

const BROKER_HEADER: [&str; 6] = ["ID", "ENDPOINT", "ZONE", "STATE", "REPLICAS", "LEADERS"];

/// `floe broker …`.
pub async fn broker(controlplane: &Controlplane, command: BrokerCommand, json: bool) -> Result<()> {
    match command {
        BrokerCommand::List => {
            let list = controlplane.brokers().await.context("listing brokers")?;
            if json {
                print_json(&serde_json::to_value(&list.brokers)?)?;
            } else {
                print(&table(&BROKER_HEADER, &broker_rows(&list.brokers)))?;
            }
        }
        BrokerCommand::Drain { id } => {
            let broker = controlplane
                .drain_broker(BrokerId::new(id))
                .await
                .with_context(|| format!("draining broker {id}"))?;
            if json {
                print_json(&serde_json::to_value(&broker)?)?;
            } else {
                print(&format!(
                    "broker {id} is draining: of its {} replicas, those of replicated \
                     partitions move to other brokers where there are any (`floe stream \
                     describe` shows them go); partitions without replicas stay, since \
                     their records not yet tiered are only on this broker; `floe broker \
                     undrain {id}` ends the drain\n",
                    broker.replicas
                ))?;
            }
        }
        BrokerCommand::Undrain { id } => {
            let broker = controlplane
                .undrain_broker(BrokerId::new(id))
                .await
                .with_context(|| format!("undraining broker {id}"))?;
            if json {
                print_json(&serde_json::to_value(&broker)?)?;
            } else {
                print(&format!(
                    "broker {id} is live again: new replicas may be placed on it\n"
                ))?;
            }
        }
    }
    Ok(())
}

/// `floe cluster status`.
pub async fn cluster(
    controlplane: &Controlplane,
    command: ClusterCommand,
    json: bool,
) -> Result<()> {
    if let ClusterCommand::Policy { command } = command {
        return crate::read_replica::policy(controlplane, command, json).await;
    }
    let status = ClusterStatus::read(controlplane).await?;
    if json {
        print_json(&status.json(controlplane.url()))?;
        return Ok(());
    }
    print(&status.text(controlplane.url())?)?;
    Ok(())
}

/// What `floe cluster status` shows, as the controlplane answered.
struct ClusterStatus {
    ready: Readiness,
    brokers: Vec<BrokerInfo>,
    streams: Vec<StreamInfo>,
    read_replicas: Vec<ReadReplicaInfo>,
    policy: ScalingPolicy,
}

impl ClusterStatus {
    async fn read(controlplane: &Controlplane) -> Result<ClusterStatus> {
        let ready = controlplane
            .ready()
            .await
            .context("asking the controlplane")?;
        let brokers = controlplane
            .brokers()
            .await
            .context("listing brokers")?
            .brokers;
        let streams = controlplane
            .streams()
            .await
            .context("listing streams")?
            .streams;
        let read_replicas = controlplane
            .read_replicas()
            .await
            .context("listing read replicas")?
            .replicas;
        let policy = controlplane
            .scaling_policy()
            .await
            .context("reading the scaling policy")?;
        Ok(ClusterStatus {
            ready,
            brokers,
            streams,
            read_replicas,
            policy,
        })
    }

    fn brokers_in(&self, state: BrokerState) -> usize {
        self.brokers.iter().filter(|b| b.state == state).count()
    }

    fn read_replicas_in(&self, state: ReadReplicaState) -> usize {
        self.read_replicas
            .iter()
            .filter(|r| r.state == state)
            .count()
    }

    fn partitions(&self) -> u64 {
        self.streams
            .iter()
            .map(|s| u64::from(s.config.partitions))
            .sum()
    }

    /// `floe cluster status --json`; `url` is the controlplane's.
    fn json(&self, url: &str) -> serde_json::Value {
        json!({
            "controlplane": {"url": url, "ready": self.ready.ready, "role": self.ready.role},
            "brokers": {
                "live": self.brokers_in(BrokerState::Live),
                "draining": self.brokers_in(BrokerState::Draining),
                "dead": self.brokers_in(BrokerState::Dead),
            },
            "streams": self.streams.len(),
            "partitions": self.partitions(),
            "read_replicas": {
                "live": self.read_replicas_in(ReadReplicaState::Live),
                "draining": self.read_replicas_in(ReadReplicaState::Draining),
                "dead": self.read_replicas_in(ReadReplicaState::Dead),
            },
            "scaling_policy": self.policy,
        })
    }

    /// The summary, then the brokers' table and the read replicas' (if any).
    fn text(&self, url: &str) -> Result<String> {
        let role = serde_json::to_value(self.ready.role)?;
        Ok(format!(
            "controlplane {} ({}, {})\n\
             brokers: {} live, {} draining, {} dead\n\
             streams: {}, partitions: {}\n\
             read replicas: {} live, {} draining, {} dead\n\
             scaling policy: {}\n{}{}",
            url,
            role.as_str().unwrap_or("?"),
            if self.ready.ready {
                "ready"
            } else {
                "not ready"
            },
            self.brokers_in(BrokerState::Live),
            self.brokers_in(BrokerState::Draining),
            self.brokers_in(BrokerState::Dead),
            self.streams.len(),
            self.partitions(),
            self.read_replicas_in(ReadReplicaState::Live),
            self.read_replicas_in(ReadReplicaState::Draining),
            self.read_replicas_in(ReadReplicaState::Dead),
            policy_text(&self.policy),
            table(&BROKER_HEADER, &broker_rows(&self.brokers)),
            if self.read_replicas.is_empty() {
                String::new()
            } else {
                format!("\n{}", read_replica_table(&self.read_replicas))
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_wire::Endpoint;
    use floe_wire::admin::ReplicaLag;

    fn broker(id: u32, state: BrokerState) -> BrokerInfo {
        BrokerInfo {
            broker_id: BrokerId::new(id),
            client_endpoint: Endpoint::new(format!("b{id}:7100")).expect("an endpoint"),
            peer_endpoint: Endpoint::new(format!("b{id}:7200")).expect("an endpoint"),
            zone: None,
            state,
            lease_expires_at_ms: 0,
            replicas: 0,
            leaders: 0,
            build: None,
        }
    }

    fn partition(replicas: &[u32], leader: Option<u32>) -> PartitionDescription {
        PartitionDescription {
            partition: floe_wire::PartitionId::new(0),
            replicas: replicas.iter().copied().map(BrokerId::new).collect(),
            leader: leader.map(BrokerId::new),
            epoch: floe_wire::LeaderEpoch::new(7),
            electing: false,
            hot: None,
            tier: None,
            bytes: None,
            upload_backlog_bytes: None,
            high_watermark: None,
            replica_lag: Vec::new(),
            previous_replicas: Vec::new(),
            corrupt: Vec::new(),
        }
    }

    #[test]
    fn a_partition_says_why_it_has_no_leader_or_too_few_replicas() {
        let brokers = [
            broker(1, BrokerState::Live),
            broker(2, BrokerState::Live),
            broker(3, BrokerState::Dead),
            broker(4, BrokerState::Draining),
        ];
        let healthy = Health::of("s", &partition(&[1, 2], Some(1)), 2, &brokers);
        assert_eq!(healthy.state, "ok");
        assert!(healthy.reasons.is_empty());

        let short = Health::of("s", &partition(&[1, 3, 4], Some(1)), 3, &brokers);
        assert_eq!(short.state, "under-replicated");
        assert!(
            short.reasons[0].starts_with("broker 3 is dead"),
            "{short:?}"
        );
        assert!(
            short.reasons[1].starts_with("broker 4 is draining"),
            "{short:?}"
        );

        let placed_short = Health::of("s", &partition(&[1], Some(1)), 3, &brokers);
        assert!(
            placed_short.reasons[0].contains("1 of 3 replicas"),
            "{placed_short:?}"
        );

        let mut lagging = partition(&[1, 2], Some(1));
        lagging.replica_lag = vec![ReplicaLag {
            broker_id: BrokerId::new(2),
            records: 1234,
        }];
        let lagging = Health::of("s", &lagging, 2, &brokers);
        assert_eq!(
            lagging.reasons,
            ["broker 2 is 1234 records behind the leader"]
        );

        let mut stuck = partition(&[1, 3, 5], None);
        stuck.electing = true;
        let stuck = Health::of("s", &stuck, 3, &brokers);
        assert_eq!(stuck.state, "no-leader");
        assert!(
            stuck.reasons[0].contains("only 1 of replicas 1,3,5 are live and 2 must answer")
                && stuck.reasons[0].contains("broker 3 is dead")
                && stuck.reasons[0].contains("broker 5 is not registered"),
            "{stuck:?}"
        );

        let orphan = Health::of("s", &partition(&[3], None), 1, &brokers);
        assert!(orphan.reasons[0].starts_with("broker 3 is dead; the controlplane moves it"));

        let unplaced = Health::of("s", &partition(&[], None), 1, &brokers);
        assert_eq!(unplaced.state, "no-leader");
        assert!(unplaced.reasons[0].contains("no broker was live"));

        let lost_leader = Health::of("s", &partition(&[3, 1], Some(3)), 2, &brokers);
        assert!(lost_leader.reasons[0].starts_with("its leader, broker 3 is dead"));
    }
}

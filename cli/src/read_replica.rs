//! Read replicas and their scaling policy through the controlplane: `floe read-replica
//! list|drain` and `floe cluster policy show|set`. ("Replica" alone is a partition's replica
//! on a broker; `floe replica` stays as a hidden alias of `floe read-replica`.)

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use floe_client::rest::Controlplane;
use floe_wire::admin::{ReadReplicaInfo, ReadReplicaState, ScalingPolicy};
use serde_json::json;

use crate::output::{print, print_json, table};
use crate::size::{duration_ms, parse_duration, parse_size};
use crate::stream::{age_text, human_bytes};

#[derive(Subcommand, Debug)]
pub enum ReadReplicaCommand {
    /// List read replicas: endpoint, zone, state and their last reported load.
    List,
    /// Send a read replica no new readers; the autoscaler stops it once it is idle.
    Drain { id: String },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Print the scaling policy.
    Show,
    /// Change the scaling policy; fields not given keep their current value.
    Set(PolicyArgs),
}

#[derive(Args, Debug)]
pub struct PolicyArgs {
    /// At least this many read replicas, even when idle (0: scale to zero).
    #[arg(long)]
    min: Option<u32>,
    /// Never more read replicas than this.
    #[arg(long)]
    max: Option<u32>,
    /// Bytes per second one read replica should serve, e.g. 100MiB (0: not a signal).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    target_bytes_per_second: Option<u64>,
    /// Consumers one read replica should serve (0: not a signal).
    #[arg(long)]
    target_consumers: Option<u32>,
    /// How far from the target the load must be before the count changes, 0 to 100.
    #[arg(long, value_name = "PERCENT")]
    hysteresis_percent: Option<u32>,
    /// Quiet time after scaling up, e.g. 1m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    scale_up_cooldown: Option<Duration>,
    /// Quiet time after scaling down, e.g. 5m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    scale_down_cooldown: Option<Duration>,
}

impl PolicyArgs {
    /// `current` with the given fields replaced.
    fn apply(&self, current: ScalingPolicy) -> ScalingPolicy {
        ScalingPolicy {
            min_replicas: self.min.unwrap_or(current.min_replicas),
            max_replicas: self.max.unwrap_or(current.max_replicas),
            target_bytes_per_second: self
                .target_bytes_per_second
                .unwrap_or(current.target_bytes_per_second),
            target_consumers: self.target_consumers.unwrap_or(current.target_consumers),
            hysteresis_percent: self
                .hysteresis_percent
                .unwrap_or(current.hysteresis_percent),
            scale_up_cooldown_ms: self
                .scale_up_cooldown
                .map_or(current.scale_up_cooldown_ms, duration_ms),
            scale_down_cooldown_ms: self
                .scale_down_cooldown
                .map_or(current.scale_down_cooldown_ms, duration_ms),
        }
    }
}

pub fn state_name(state: ReadReplicaState) -> &'static str {
    match state {
        ReadReplicaState::Live => "live",
        ReadReplicaState::Draining => "draining",
        ReadReplicaState::Dead => "dead",
    }
}

fn read_replica_rows(read_replicas: &[ReadReplicaInfo]) -> Vec<Vec<String>> {
    read_replicas
        .iter()
        .map(|r| {
            vec![
                r.replica_id.clone(),
                r.endpoint.to_string(),
                r.zone.clone().unwrap_or_else(|| "-".into()),
                state_name(r.state).to_string(),
                format!("{}/s", human_bytes(r.bytes_served_per_second)),
                r.consumers.to_string(),
                format!("{:.1}ms", r.fetch_latency_p99_us as f64 / 1000.0),
                format!("{:.1}%", f64::from(r.cache_hit_ratio_permille) / 10.0),
            ]
        })
        .collect()
}

pub const READ_REPLICA_HEADER: [&str; 8] = [
    "ID",
    "ENDPOINT",
    "ZONE",
    "STATE",
    "SERVED",
    "CONSUMERS",
    "FETCH P99",
    "CACHE HITS",
];

/// The read replicas as a table.
pub fn read_replica_table(read_replicas: &[ReadReplicaInfo]) -> String {
    table(&READ_REPLICA_HEADER, &read_replica_rows(read_replicas))
}

/// One line for people: `min 0, max 8, target 100.0 MiB/s and 1000 consumers per read
/// replica…`.
pub fn policy_text(policy: &ScalingPolicy) -> String {
    format!(
        "min {}, max {}, target {}/s and {} consumers per read replica, hysteresis {}%, \
         cooldown {} up / {} down",
        policy.min_replicas,
        policy.max_replicas,
        human_bytes(policy.target_bytes_per_second),
        policy.target_consumers,
        policy.hysteresis_percent,
        age_text(Some(policy.scale_up_cooldown_ms)),
        age_text(Some(policy.scale_down_cooldown_ms)),
    )
}

/// `floe read-replica …`.
pub async fn read_replica(
    controlplane: &Controlplane,
    command: ReadReplicaCommand,
    json: bool,
) -> Result<()> {
    match command {
        ReadReplicaCommand::List => {
            let list = controlplane
                .read_replicas()
                .await
                .context("listing read replicas")?;
            if json {
                print_json(&serde_json::to_value(&list.replicas)?)?;
            } else {
                print(&read_replica_table(&list.replicas))?;
            }
        }
        ReadReplicaCommand::Drain { id } => {
            let read_replica = controlplane
                .drain_read_replica(&id)
                .await
                .with_context(|| format!("draining read replica {id}"))?;
            if json {
                print_json(&serde_json::to_value(&read_replica)?)?;
            } else {
                print(&format!(
                    "read replica {id} is {}: it gets no new readers\n",
                    state_name(read_replica.state)
                ))?;
            }
        }
    }
    Ok(())
}

/// `floe cluster policy …`.
pub async fn policy(controlplane: &Controlplane, command: PolicyCommand, json: bool) -> Result<()> {
    let current = controlplane
        .scaling_policy()
        .await
        .context("reading the scaling policy")?;
    let policy = match command {
        PolicyCommand::Show => current,
        PolicyCommand::Set(args) => {
            let policy = args.apply(current);
            if policy.min_replicas > policy.max_replicas {
                bail!(
                    "--min {} is above --max {}",
                    policy.min_replicas,
                    policy.max_replicas
                );
            }
            controlplane
                .set_scaling_policy(&policy)
                .await
                .context("setting the scaling policy")?
        }
    };
    if json {
        print_json(&json!(policy))?;
    } else {
        print(&format!("scaling policy: {}\n", policy_text(&policy)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_not_given_keep_their_value() {
        let args = PolicyArgs {
            min: Some(1),
            max: None,
            target_bytes_per_second: Some(64 << 20),
            target_consumers: None,
            hysteresis_percent: None,
            scale_up_cooldown: Some(Duration::from_secs(30)),
            scale_down_cooldown: None,
        };
        let current = ScalingPolicy::default();
        let changed = args.apply(current);
        assert_eq!(changed.min_replicas, 1);
        assert_eq!(changed.max_replicas, current.max_replicas);
        assert_eq!(changed.target_bytes_per_second, 64 << 20);
        assert_eq!(changed.scale_up_cooldown_ms, 30_000);
        assert_eq!(
            changed.scale_down_cooldown_ms,
            current.scale_down_cooldown_ms
        );
    }
}

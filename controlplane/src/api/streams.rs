//! `/v1/streams`: create (placing every partition), list, describe, alter, delete.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use floe_wire::admin::BrokerState;
use floe_wire::admin::{
    AlterStreamRequest, CreateStreamRequest, MAX_SEGMENT_BYTES, RetentionSettings, SegmentSettings,
    StreamConfig, StreamDescription, StreamInfo, StreamList,
};
use floe_wire::{AckMode, BrokerId, StreamName};

use floe_wire::auth::Action;

use crate::api::Caller;
use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::cluster::{Cluster, now_ms};
use crate::placement::place_new;
use crate::reconcile::live_placer;
use crate::store::{Store, StoreError};

/// The most replicas a partition may have.
const MAX_REPLICATION_FACTOR: u32 = 16;

/// The streams the caller may describe.
pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
) -> Result<Json<StreamList>, Failure> {
    let mut streams = cluster.store.streams().await?;
    streams.retain(|stream| caller.may(Action::Describe, &stream.name));
    Ok(Json(StreamList { streams }))
}

pub(super) async fn create<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    Body(request): Body<CreateStreamRequest>,
) -> Result<(StatusCode, Json<StreamInfo>), Failure> {
    caller.require(Action::Admin, &request.name)?;
    let creator = caller.principal().map(|principal| principal.name.clone());
    let config = resolve_config(&request, &cluster.config)?;
    let explicit_factor = request.replication_factor.is_some();
    let stream = StreamInfo {
        name: request.name,
        config,
        created_at_ms: now_ms(),
    };
    let _writes = cluster.write_lock().await;
    if let Some(creator) = &creator {
        check_streams_per_principal(&cluster, creator).await?;
    }
    let brokers = cluster.store.brokers().await?;
    let live = brokers
        .iter()
        .filter(|broker| broker.state == BrokerState::Live)
        .count();
    let draining: Vec<BrokerId> = brokers
        .iter()
        .filter(|broker| broker.state == BrokerState::Draining)
        .map(|broker| broker.broker_id)
        .collect();
    if let Some(refusal) = too_few_brokers(&stream, explicit_factor, live, &draining) {
        return Err(Failure::Invalid(refusal));
    }
    let mut placer = live_placer(&brokers);
    let placements = place_new(&mut placer, config.partitions, config.replication_factor);
    check_partitions_per_broker(&stream, &placer, &placements, &cluster.config)?;
    let under_replicated = placements
        .iter()
        .any(|p| p.replicas.len() < config.replication_factor as usize);
    let replicas: Vec<Vec<BrokerId>> = placements.into_iter().map(|p| p.replicas).collect();
    let version = cluster
        .store
        .create_stream_by(&stream, &replicas, creator.as_deref())
        .await?;
    cluster.announce(version);
    if config.replication_factor > 1 {
        // Its partitions elect their first leader; the reconciler times the elections.
        cluster.request_election_check();
    }
    if under_replicated {
        // Topped up as brokers register.
        cluster.request_repair();
    }
    Ok((StatusCode::CREATED, Json(stream)))
}

/// `limit_exceeded` when `creator` already has as many streams as a principal may.
async fn check_streams_per_principal<S: Store>(
    cluster: &Cluster<S>,
    creator: &str,
) -> Result<(), Failure> {
    let limit = cluster.config.max_streams_per_principal;
    let created = cluster.store.streams_created_by(creator).await?;
    if created < u64::from(limit) {
        return Ok(());
    }
    Err(Failure::LimitExceeded(format!(
        "principal `{creator}` has created {created} streams, its limit of \
         {limit} streams per principal (the controlplane's --max-streams-per-principal): \
         delete streams it no longer needs, or raise the limit"
    )))
}

/// `limit_exceeded` when `placements` (already counted by `placer`) would put more
/// partition replicas on a broker than the limit.
fn check_partitions_per_broker(
    stream: &StreamInfo,
    placer: &crate::placement::Placer,
    placements: &[crate::placement::Placement],
    config: &crate::Config,
) -> Result<(), Failure> {
    let limit = config.max_partitions_per_broker;
    let over = placements
        .iter()
        .flat_map(|placement| &placement.replicas)
        .filter_map(|&id| placer.replicas_of(id).map(|held| (id, held)))
        .find(|&(_, held)| held > limit);
    let Some((broker, held)) = over else {
        return Ok(());
    };
    let needed = stream.config.partitions * stream.config.replication_factor;
    Err(Failure::LimitExceeded(format!(
        "stream `{name}` needs {needed} partition replicas, and placing them would put \
         {held} on broker {broker}, past the limit of {limit} partitions per broker (the \
         controlplane's --max-partitions-per-broker): delete streams, add brokers, or raise \
         the limit",
        name = stream.name,
    )))
}

/// Why `stream` cannot be created on `live` brokers, if it cannot; `draining` are the
/// brokers that would count but for their drain, named so that the refusal says how to end it.
///
/// Refused rather than created under-replicated: a partition with fewer live replicas than
/// its factor cannot take a quorum write, and with none it cannot take any, so a stream
/// accepted here would fail its first publish instead of its create. (Brokers that die
/// later are a different matter: their partitions are repaired as brokers come and go.)
fn too_few_brokers(
    stream: &StreamInfo,
    explicit_factor: bool,
    live: usize,
    draining: &[BrokerId],
) -> Option<String> {
    let replication_factor = stream.config.replication_factor;
    if replication_factor as usize <= live {
        return None;
    }
    let factor = if explicit_factor {
        format!("replication factor {replication_factor}")
    } else {
        format!(
            "the default replication factor {replication_factor} (the controlplane's \
             --default-replication-factor)"
        )
    };
    let (drains, undrain) = match draining {
        [] => (String::new(), String::new()),
        [one] => (
            format!(" (broker {one} is draining: `floe broker undrain {one}` ends its drain)"),
            "undrain a broker, ".to_owned(),
        ),
        several => {
            let ids: Vec<String> = several.iter().map(ToString::to_string).collect();
            (
                format!(
                    " (brokers {} are draining: `floe broker undrain ID` ends a drain)",
                    ids.join(", ")
                ),
                "undrain brokers, ".to_owned(),
            )
        }
    };
    Some(match live {
        0 => format!(
            "no broker is live{drains}, and {factor} needs {replication_factor}: {start} \
             before creating streams",
            start = if draining.is_empty() {
                "start brokers"
            } else {
                "undrain or start brokers"
            },
        ),
        live => format!(
            "{factor} needs {replication_factor} live brokers and {live} {is} live{drains}: \
             {undrain}add brokers, or create the stream with a replication factor of at most \
             {live} (`floe stream create {name} --replication-factor {live}`)",
            is = if live == 1 { "is" } else { "are" },
            name = stream.name,
        ),
    })
}

/// The stream's settings with defaults filled in, or why the request is out of range.
fn resolve_config(
    request: &CreateStreamRequest,
    config: &crate::Config,
) -> Result<StreamConfig, Failure> {
    let max_partitions = config.max_partitions_per_stream;
    if request.partitions == 0 || request.partitions > max_partitions {
        return Err(Failure::Invalid(format!(
            "partitions must be from 1 to {max_partitions}"
        )));
    }
    let replication_factor = request
        .replication_factor
        .unwrap_or(config.default_replication_factor);
    if replication_factor == 0 || replication_factor > MAX_REPLICATION_FACTOR {
        return Err(Failure::Invalid(format!(
            "replication_factor must be from 1 to {MAX_REPLICATION_FACTOR}"
        )));
    }
    check_segment(&request.segment)?;
    check_retention(&request.retention)?;
    let ack_mode = request.ack_mode.unwrap_or(if replication_factor > 1 {
        AckMode::Quorum
    } else {
        AckMode::Leader
    });
    Ok(StreamConfig {
        partitions: request.partitions,
        replication_factor,
        ack_mode,
        segment: request.segment,
        retention: request.retention,
    })
}

/// Every setting, when present, is from 1 to `i64::MAX` (the store's integers).
fn check_positive(field: &str, value: Option<u64>) -> Result<(), Failure> {
    match value {
        Some(value) if value == 0 || i64::try_from(value).is_err() => Err(Failure::Invalid(
            format!("{field} must be from 1 to {}", i64::MAX),
        )),
        _ => Ok(()),
    }
}

fn check_segment(segment: &SegmentSettings) -> Result<(), Failure> {
    // A broker's log cannot hold a larger segment, and would refuse to serve the stream.
    if let Some(bytes) = segment.bytes
        && (bytes == 0 || bytes > MAX_SEGMENT_BYTES)
    {
        return Err(Failure::Invalid(format!(
            "segment.bytes must be from 1 to {MAX_SEGMENT_BYTES} (2 GiB)"
        )));
    }
    check_positive("segment.age_ms", segment.age_ms)
}

fn check_retention(retention: &RetentionSettings) -> Result<(), Failure> {
    check_positive("retention.local_bytes", retention.local_bytes)?;
    check_positive("retention.local_ms", retention.local_ms)?;
    check_positive("retention.tier_bytes", retention.tier_bytes)?;
    check_positive("retention.tier_ms", retention.tier_ms)
}

/// A stream name from the path; one that cannot be a name is a bad request.
pub(super) fn stream_name(name: String) -> Result<StreamName, Failure> {
    StreamName::new(name).map_err(|error| Failure::BadRequest(error.to_string()))
}

pub(super) async fn describe<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(name): PathParams<String>,
) -> Result<Json<StreamDescription>, Failure> {
    let name = stream_name(name)?;
    match cluster.store.describe_stream(&name).await? {
        Some(mut description) => {
            cluster.add_corrupt(&mut description);
            Ok(Json(description))
        }
        None => Err(StoreError::StreamNotFound { name }.into()),
    }
}

/// `PUT /v1/streams/{name}/retention`: replaces the retention settings alone.
pub(super) async fn set_retention<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(name): PathParams<String>,
    Body(retention): Body<RetentionSettings>,
) -> Result<Json<StreamInfo>, Failure> {
    let name = stream_name(name)?;
    check_retention(&retention)?;
    let stream = change_settings(&cluster, &name, |config| config.retention = retention).await?;
    Ok(Json(stream))
}

/// `PATCH /v1/streams/{name}`: changes what can change on a live stream; brokers apply it
/// as they learn it (retention at once, segment settings from the next segment on, the ack
/// mode from the next publish).
pub(super) async fn alter<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(name): PathParams<String>,
    Body(request): Body<AlterStreamRequest>,
) -> Result<Json<StreamInfo>, Failure> {
    let name = stream_name(name)?;
    if let Some(partitions) = request.partitions {
        return Err(Failure::Invalid(format!(
            "partitions cannot change on a live stream (asked for {partitions}): records are \
             placed on partitions by their key, so a new count would break every key's order; \
             create a new stream with the partitions you need and move producers and \
             consumers to it"
        )));
    }
    if let Some(factor) = request.replication_factor {
        return Err(Failure::Invalid(format!(
            "the replication factor cannot change on a live stream (asked for {factor}): \
             create a new stream with --replication-factor {factor} and move producers and \
             consumers to it"
        )));
    }
    if request.is_empty() {
        return Err(Failure::Invalid(
            "nothing to change: name at least one of ack_mode, segment, retention".into(),
        ));
    }
    let stream = change_settings(&cluster, &name, |config| *config = request.apply(config)).await?;
    Ok(Json(stream))
}

/// Changes a stream's settings with `change`, checks the result, stores it and announces
/// it to the brokers.
async fn change_settings<S: Store>(
    cluster: &Cluster<S>,
    name: &StreamName,
    change: impl FnOnce(&mut StreamConfig),
) -> Result<StreamInfo, Failure> {
    let _writes = cluster.write_lock().await;
    let Some(description) = cluster.store.describe_stream(name).await? else {
        return Err(StoreError::StreamNotFound { name: name.clone() }.into());
    };
    let mut config = description.config;
    change(&mut config);
    check_segment(&config.segment)?;
    check_retention(&config.retention)?;
    let (stream, version) = cluster.store.set_stream_settings(name, &config).await?;
    cluster.announce(version);
    Ok(stream)
}

pub(super) async fn delete<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(name): PathParams<String>,
) -> Result<StatusCode, Failure> {
    let name = stream_name(name)?;
    let _writes = cluster.write_lock().await;
    let version = cluster.store.delete_stream(&name).await?;
    cluster.announce(version);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use floe_wire::admin::{RetentionSettings, SegmentSettings};

    use super::*;

    fn orders(replication_factor: u32) -> StreamInfo {
        StreamInfo {
            name: StreamName::new("orders").expect("a valid name"),
            config: StreamConfig {
                partitions: 1,
                replication_factor,
                ack_mode: AckMode::Quorum,
                segment: SegmentSettings::default(),
                retention: RetentionSettings::default(),
            },
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_create_short_of_live_brokers_names_the_draining_ones_and_how_to_undrain() {
        let one = too_few_brokers(&orders(3), true, 2, &[BrokerId::new(1)]).expect("refused");
        assert_eq!(
            one,
            "replication factor 3 needs 3 live brokers and 2 are live (broker 1 is draining: \
             `floe broker undrain 1` ends its drain): undrain a broker, add brokers, or create \
             the stream with a replication factor of at most 2 (`floe stream create orders \
             --replication-factor 2`)"
        );
        let none = too_few_brokers(&orders(1), false, 0, &[BrokerId::new(1), BrokerId::new(4)])
            .expect("refused");
        assert!(
            none.starts_with(
                "no broker is live (brokers 1, 4 are draining: `floe broker undrain ID`"
            ) && none.ends_with("undrain or start brokers before creating streams"),
            "{none}"
        );
        assert_eq!(
            too_few_brokers(&orders(3), true, 3, &[BrokerId::new(1)]),
            None
        );
        let without = too_few_brokers(&orders(3), true, 1, &[]).expect("refused");
        assert!(!without.contains("drain"), "{without}");
    }
}

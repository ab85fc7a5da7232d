//! `/v1/groups`: consumer groups, their committed offsets, commits and resets.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use floe_wire::StreamName;
use floe_wire::admin::{
    CommitOffsetsRequest, GroupList, GroupOffsets, OffsetCommit, PartitionDescription,
    ResetOffsetsRequest, ResetTarget,
};

use floe_wire::auth::Action;

use crate::api::Caller;
use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::cluster::{Cluster, now_ms};
use crate::store::{Store, StoreError};

/// The most offsets one commit may carry.
const MAX_COMMITS: usize = 100_000;

pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<GroupList>, Failure> {
    let groups = cluster.store.groups().await?;
    Ok(Json(GroupList { groups }))
}

/// Group names follow the stream-name alphabet: they appear in URLs and CLI output.
fn group_name(group: String) -> Result<String, Failure> {
    StreamName::new(group)
        .map(StreamName::into_string)
        .map_err(|error| Failure::BadRequest(error.to_string().replace("stream", "group")))
}

/// A group's offsets in the streams the caller may describe.
pub(super) async fn offsets<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
) -> Result<Json<GroupOffsets>, Failure> {
    let group = group_name(group)?;
    let mut offsets = cluster.store.group_offsets(&group).await?;
    offsets.retain(|offset| caller.may(Action::Describe, &offset.stream));
    if offsets.is_empty() {
        return Err(Failure::GroupNotFound(group));
    }
    Ok(Json(GroupOffsets { group, offsets }))
}

/// Commits offsets; the caller must be allowed to consume every stream they are in.
pub(super) async fn commit<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
    Body(request): Body<CommitOffsetsRequest>,
) -> Result<Json<GroupOffsets>, Failure> {
    let group = group_name(group)?;
    if request.offsets.is_empty() || request.offsets.len() > MAX_COMMITS {
        return Err(Failure::Invalid(format!(
            "a commit carries from 1 to {MAX_COMMITS} offsets"
        )));
    }
    for commit in &request.offsets {
        caller.require(Action::Consume, &commit.stream)?;
    }
    commit_and_read(&cluster, &caller, group, &request.offsets).await
}

async fn commit_and_read<S: Store>(
    cluster: &Cluster<S>,
    caller: &Caller,
    group: String,
    commits: &[OffsetCommit],
) -> Result<Json<GroupOffsets>, Failure> {
    let _writes = cluster.write_lock().await;
    cluster
        .store
        .commit_offsets(&group, commits, now_ms())
        .await?;
    let mut offsets = cluster.store.group_offsets(&group).await?;
    offsets.retain(|offset| caller.may(Action::Describe, &offset.stream));
    Ok(Json(GroupOffsets { group, offsets }))
}

/// Moves a group's offsets in one stream; the caller must be allowed to consume it.
pub(super) async fn reset<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
    Body(request): Body<ResetOffsetsRequest>,
) -> Result<Json<GroupOffsets>, Failure> {
    let group = group_name(group)?;
    caller.require(Action::Consume, &request.stream)?;
    let Some(description) = cluster.store.describe_stream(&request.stream).await? else {
        return Err(StoreError::StreamNotFound {
            name: request.stream,
        }
        .into());
    };
    let chosen: Vec<&PartitionDescription> = match &request.partitions {
        None => description.partitions.iter().collect(),
        Some(partitions) => partitions
            .iter()
            .map(|partition| {
                description
                    .partitions
                    .get(partition.get() as usize)
                    .ok_or_else(|| StoreError::PartitionNotFound {
                        stream: request.stream.clone(),
                        partition: *partition,
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let commits = chosen
        .into_iter()
        .map(|partition| {
            Ok(OffsetCommit {
                stream: request.stream.clone(),
                partition: partition.partition,
                offset: target_offset(&request.stream, partition, request.to)?,
            })
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    commit_and_read(&cluster, &caller, group, &commits).await
}

/// Where `to` puts a partition, from what its leader last reported.
fn target_offset(
    stream: &StreamName,
    partition: &PartitionDescription,
    to: ResetTarget,
) -> Result<u64, Failure> {
    match to {
        ResetTarget::Offset { offset } => Ok(offset),
        ResetTarget::Earliest => Ok([partition.tier, partition.hot]
            .into_iter()
            .flatten()
            .map(|range| range.start)
            .min()
            .unwrap_or(0)),
        ResetTarget::Latest => {
            partition
                .hot
                .map(|range| range.end)
                .ok_or_else(|| Failure::RangeUnknown {
                    stream: stream.to_string(),
                    partition: partition.partition.get(),
                })
        }
    }
}

//! `/v1/groups`: consumer groups, their committed offsets, commits and resets.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use floe_wire::StreamName;
use floe_wire::admin::{
    CommitOffsetsRequest, CommittedOffset, GroupDescription, GroupList, GroupOffsets,
    GroupPartition, GroupPartitionState, GroupState, JoinGroupRequest, MemberHeartbeat, Membership,
    OffsetCommit, PartitionDescription, ResetOffsetsRequest, ResetTarget,
};
use tokio::sync::{mpsc, oneshot, watch};

use floe_wire::auth::Action;

use crate::api::Caller;
use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::cluster::{Cluster, now_ms};
use crate::groups::{GroupError, Joining, LiveGroup};
use crate::metrics::{GroupLag, GroupLagLabels};
use crate::store::{Store, StoreError};

/// The most offsets one commit may carry.
const MAX_COMMITS: usize = 100_000;

pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<GroupList>, Failure> {
    let mut groups = cluster.store.groups().await?;
    // Groups with members and no commit yet are groups too.
    for (group, members) in cluster.groups.member_counts() {
        let members = u32::try_from(members).unwrap_or(u32::MAX);
        match groups.iter_mut().find(|summary| summary.group == group) {
            Some(summary) => summary.members = members,
            None => groups.push(floe_wire::admin::GroupSummary {
                group,
                streams: 0,
                partitions: 0,
                members,
            }),
        }
    }
    groups.sort_by(|a, b| a.group.cmp(&b.group));
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
    let member = request.member.map(|m| (m.member_id, m.generation));
    let (answer, answered) = oneshot::channel();
    let pending = PendingCommit {
        group: group.clone(),
        commits: request.offsets,
        member,
        answer,
    };
    let stopping = || Failure::Internal("the controlplane is stopping".into());
    cluster
        .commits
        .send(pending)
        .await
        .map_err(|_| stopping())?;
    let (commits, updated_at_ms) = answered.await.map_err(|_| stopping())??;
    let offsets = commits
        .into_iter()
        .filter(|commit| caller.may(Action::Describe, &commit.stream))
        .map(|commit| CommittedOffset {
            stream: commit.stream,
            partition: commit.partition,
            offset: commit.offset,
            updated_at_ms,
        })
        .collect();
    Ok(Json(GroupOffsets { group, offsets }))
}

/// The most offsets one write of the commit queue carries.
const MAX_BATCH_OFFSETS: usize = 20_000;

/// What a commit's handler hears back: the offsets written and when, or why not.
type CommitAnswer = Result<(Vec<OffsetCommit>, u64), Failure>;

/// A commit waiting for the writer.
#[derive(Debug)]
pub(crate) struct PendingCommit {
    group: String,
    commits: Vec<OffsetCommit>,
    member: Option<(String, u64)>,
    answer: oneshot::Sender<CommitAnswer>,
}

/// Writes queued commits until the controlplane stops: all those waiting at once in one
/// transaction, so that many members committing cost one database write, not one each.
/// Each is fenced by the coordinator under the write lock, just before the write.
pub(crate) async fn commit_offsets_loop<S: Store>(
    cluster: Arc<Cluster<S>>,
    mut queue: mpsc::Receiver<PendingCommit>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let first = tokio::select! {
            first = queue.recv() => first,
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        let Some(first) = first else {
            return;
        };
        let mut offsets = first.commits.len();
        let mut batch = vec![first];
        while offsets < MAX_BATCH_OFFSETS {
            match queue.try_recv() {
                Ok(pending) => {
                    offsets += pending.commits.len();
                    batch.push(pending);
                }
                Err(_) => break,
            }
        }
        write_commits(&cluster, batch).await;
    }
}

async fn write_commits<S: Store>(cluster: &Cluster<S>, batch: Vec<PendingCommit>) {
    let _writes = cluster.write_lock().await;
    let mut accepted = Vec::new();
    for pending in batch {
        let slots: Vec<GroupPartition> = pending.commits.iter().map(OffsetCommit::slot).collect();
        let member = pending.member.as_ref().map(|(m, g)| (m.as_str(), *g));
        match cluster.groups.check_commit(&pending.group, member, &slots) {
            Ok(()) => accepted.push(pending),
            Err(error) => {
                let _ = pending.answer.send(Err(error.into()));
            }
        }
    }
    if accepted.is_empty() {
        return;
    }
    let now = now_ms();
    let entries: Vec<(&str, &OffsetCommit)> = accepted
        .iter()
        .flat_map(|p| p.commits.iter().map(|c| (p.group.as_str(), c)))
        .collect();
    let written = cluster.store.commit_offsets_batch(&entries, now).await;
    drop(entries);
    match written {
        Ok(()) => {
            for pending in accepted {
                let _ = pending.answer.send(Ok((pending.commits, now)));
            }
        }
        // One of them names a partition that is gone, or the store failed: each alone
        // learns which, and why.
        Err(_) => {
            for pending in accepted {
                let result = cluster
                    .store
                    .commit_offsets(&pending.group, &pending.commits, now)
                    .await
                    .map(|()| (pending.commits, now))
                    .map_err(Failure::from);
                let _ = pending.answer.send(result);
            }
        }
    }
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
    if !request.force {
        cluster.groups.check_empty(&group)?;
    }
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
    // A forced reset is the operator's word over the members': not theirs to fence.
    let _writes = cluster.write_lock().await;
    cluster
        .store
        .commit_offsets(&group, &commits, now_ms())
        .await?;
    let mut offsets = cluster.store.group_offsets(&group).await?;
    offsets.retain(|offset| caller.may(Action::Describe, &offset.stream));
    Ok(Json(GroupOffsets { group, offsets }))
}

/// Where `to` puts a partition, from what its leader last reported.
fn target_offset(
    stream: &StreamName,
    partition: &PartitionDescription,
    to: ResetTarget,
) -> Result<u64, Failure> {
    match to {
        ResetTarget::Offset { offset } => Ok(offset),
        ResetTarget::Earliest => Ok(log_start(partition)),
        // Where consumers stop: past the high watermark a group would skip nothing but wait.
        ResetTarget::Latest => high_watermark(partition).ok_or_else(|| Failure::RangeUnknown {
            stream: stream.to_string(),
            partition: partition.partition.get(),
        }),
    }
}

/// The most streams one member may read.
const MAX_MEMBER_STREAMS: usize = 100;

/// `POST /v1/groups/{group}/members`: joins as a new member reading `streams`.
pub(super) async fn join<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
    Body(request): Body<JoinGroupRequest>,
) -> Result<Json<Membership>, Failure> {
    let group = group_name(group)?;
    if request.streams.is_empty() || request.streams.len() > MAX_MEMBER_STREAMS {
        return Err(Failure::Invalid(format!(
            "a member reads from 1 to {MAX_MEMBER_STREAMS} streams"
        )));
    }
    let session_timeout_ms = request
        .session_timeout_ms
        .unwrap_or(crate::groups::DEFAULT_SESSION_TIMEOUT_MS);
    if !crate::groups::SESSION_TIMEOUT_MS.contains(&session_timeout_ms) {
        let range = crate::groups::SESSION_TIMEOUT_MS;
        return Err(Failure::Invalid(format!(
            "session_timeout_ms {session_timeout_ms} is outside {} to {}",
            range.start(),
            range.end()
        )));
    }
    if let Some(client_id) = &request.client_id
        && (client_id.len() > 255 || client_id.chars().any(char::is_control))
    {
        return Err(Failure::Invalid(
            "client_id is at most 255 bytes of printable text".into(),
        ));
    }
    let mut streams = BTreeMap::new();
    for stream in &request.streams {
        caller.require(Action::Consume, stream)?;
        let Some(description) = cluster.store.describe_stream(stream).await? else {
            return Err(StoreError::StreamNotFound {
                name: stream.clone(),
            }
            .into());
        };
        let count = u32::try_from(description.partitions.len()).unwrap_or(u32::MAX);
        streams.insert(stream.clone(), count);
    }
    let joining = Joining {
        streams: &streams,
        client_id: request.client_id,
        session_timeout_ms,
        max_members: usize::try_from(cluster.config.max_group_members).unwrap_or(usize::MAX),
    };
    let membership = cluster.groups.join(&group, joining, now_ms())?;
    tracing::info!(%group, member = %membership.member_id, generation = membership.generation, "a member joined");
    Ok(Json(membership))
}

/// The caller may read everything `member` reads.
fn require_member<S: Store>(
    cluster: &Cluster<S>,
    caller: &Caller,
    group: &str,
    member: &str,
) -> Result<(), Failure> {
    let streams = cluster
        .groups
        .member_streams(group, member)
        .ok_or_else(|| GroupError::UnknownMember {
            group: group.to_owned(),
            member: member.to_owned(),
        })?;
    for stream in &streams {
        caller.require(Action::Consume, stream)?;
    }
    Ok(())
}

/// `POST /v1/groups/{group}/members/{member}/heartbeat`: answers at once when the member
/// has something to take or give up, else when that changes or `wait_ms` passes.
pub(super) async fn heartbeat<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams((group, member)): PathParams<(String, String)>,
    Body(request): Body<MemberHeartbeat>,
) -> Result<Json<Membership>, Failure> {
    let group = group_name(group)?;
    require_member(&cluster, &caller, &group, &member)?;
    let owned: BTreeSet<GroupPartition> = request.owned.into_iter().collect();
    let (membership, mut changes) = cluster
        .groups
        .heartbeat(&group, &member, &owned, now_ms())?;
    let wait = Duration::from_millis(request.wait_ms.min(membership.heartbeat_interval_ms))
        .min(cluster.config.long_poll_max);
    let settled = membership.assignment.iter().eq(owned.iter());
    if wait.is_zero() || !settled {
        return Ok(Json(membership));
    }
    tokio::select! {
        _ = changes.changed() => {}
        _ = cluster.stopped_within(wait) => {}
    }
    let (membership, _) = cluster
        .groups
        .heartbeat(&group, &member, &owned, now_ms())?;
    Ok(Json(membership))
}

/// `DELETE /v1/groups/{group}/members/{member}`: leaves; what it read goes to the others.
/// Leaving twice, or after the session lapsed, is no error.
pub(super) async fn leave<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams((group, member)): PathParams<(String, String)>,
) -> Result<StatusCode, Failure> {
    let group = group_name(group)?;
    match require_member(&cluster, &caller, &group, &member) {
        Err(Failure::Group(GroupError::UnknownMember { .. })) => {}
        other => other?,
    }
    if cluster.groups.leave(&group, &member) {
        tracing::info!(%group, %member, "a member left");
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/groups/{group}`: members, and per partition the committed offset, the high
/// watermark, the lag and the member reading it; only streams the caller may describe.
pub(super) async fn describe<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
) -> Result<Json<GroupDescription>, Failure> {
    let group = group_name(group)?;
    let live = cluster.groups.describe(&group, now_ms());
    let offsets = cluster.store.group_offsets(&group).await?;
    if live.is_none() && offsets.is_empty() {
        return Err(Failure::GroupNotFound(group));
    }
    let mut partitions = partition_states(live.as_ref(), &offsets);
    partitions.retain(|slot, _| caller.may(Action::Describe, &slot.stream));
    complete(&cluster, &mut Descriptions::new(), &mut partitions).await?;
    let (state, generation, mut members) = match live {
        Some(live) => (live.state, live.generation, live.members),
        None => (GroupState::Empty, 0, Vec::new()),
    };
    for member in &mut members {
        member
            .partitions
            .retain(|slot| caller.may(Action::Describe, &slot.stream));
        member
            .streams
            .retain(|stream| caller.may(Action::Describe, stream));
    }
    Ok(Json(GroupDescription {
        group,
        state,
        generation,
        members,
        partitions: partitions.into_values().collect(),
    }))
}

/// Every partition of `group`: those its members read and those it committed in.
fn partition_states(
    live: Option<&LiveGroup>,
    offsets: &[CommittedOffset],
) -> BTreeMap<GroupPartition, GroupPartitionState> {
    let mut partitions: BTreeMap<GroupPartition, GroupPartitionState> = BTreeMap::new();
    if let Some(live) = live {
        for (slot, owner) in &live.partitions {
            let mut state = unread(slot);
            state.member = owner.clone();
            partitions.insert(slot.clone(), state);
        }
    }
    for offset in offsets {
        let slot = offset.slot();
        partitions
            .entry(slot.clone())
            .or_insert_with(|| unread(&slot))
            .committed = Some(offset.offset);
    }
    partitions
}

/// Every group's lag per partition, where the partition's end is known: the
/// `floe_group_lag_records` metric.
pub(crate) async fn lags<S: Store>(cluster: &Cluster<S>) -> Result<Vec<GroupLag>, Failure> {
    let mut names: BTreeSet<String> = cluster
        .store
        .groups()
        .await?
        .into_iter()
        .map(|summary| summary.group)
        .collect();
    names.extend(cluster.groups.member_counts().into_keys());
    let mut lags = Vec::new();
    // Groups that read one stream share its description: read once per scrape.
    let mut descriptions = Descriptions::new();
    for group in names {
        let live = cluster.groups.describe(&group, now_ms());
        let offsets = cluster.store.group_offsets(&group).await?;
        let mut partitions = partition_states(live.as_ref(), &offsets);
        complete(cluster, &mut descriptions, &mut partitions).await?;
        for state in partitions.into_values() {
            if let Some(lag) = state.lag {
                let labels = GroupLagLabels {
                    group: group.clone(),
                    stream: state.stream.to_string(),
                    partition: state.partition.get(),
                };
                lags.push((labels, lag));
            }
        }
    }
    Ok(lags)
}

/// Where consumers stop in `partition`, as its leader last reported: the high watermark,
/// else the end of its hot log.
fn high_watermark(partition: &PartitionDescription) -> Option<u64> {
    partition
        .high_watermark
        .or(partition.hot.map(|range| range.end))
}

/// The oldest offset `partition` still keeps (tiered or hot), 0 if none was reported.
fn log_start(partition: &PartitionDescription) -> u64 {
    [partition.tier, partition.hot]
        .into_iter()
        .flatten()
        .map(|range| range.start)
        .min()
        .unwrap_or(0)
}

/// Streams' partitions as described, `None` for a stream that is gone.
type Descriptions = BTreeMap<StreamName, Option<Vec<PartitionDescription>>>;

/// A partition no member reads and the group never committed in.
fn unread(slot: &GroupPartition) -> GroupPartitionState {
    GroupPartitionState {
        stream: slot.stream.clone(),
        partition: slot.partition,
        committed: None,
        high_watermark: None,
        lag: None,
        member: None,
    }
}

/// Completes `partitions` with every partition of their streams (a group shows all of a
/// stream it reads or committed in, committed or not), and sets each one's high watermark,
/// as its leader last reported it, and the lag.
async fn complete<S: Store>(
    cluster: &Cluster<S>,
    descriptions: &mut Descriptions,
    partitions: &mut BTreeMap<GroupPartition, GroupPartitionState>,
) -> Result<(), Failure> {
    let streams: BTreeSet<StreamName> = partitions.keys().map(|s| s.stream.clone()).collect();
    for stream in streams {
        if !descriptions.contains_key(&stream) {
            let description = cluster.store.describe_stream(&stream).await?;
            descriptions.insert(stream.clone(), description.map(|d| d.partitions));
        }
        let Some(Some(reported_partitions)) = descriptions.get(&stream) else {
            continue;
        };
        for reported in reported_partitions {
            let slot = GroupPartition {
                stream: stream.clone(),
                partition: reported.partition,
            };
            let state = partitions
                .entry(slot.clone())
                .or_insert_with(|| unread(&slot));
            state.high_watermark = high_watermark(reported);
            // Before a first commit the group would read the whole log that is kept.
            let from = state.committed.unwrap_or_else(|| log_start(reported));
            state.lag = state.high_watermark.map(|end| end.saturating_sub(from));
        }
    }
    Ok(())
}

/// `DELETE /v1/groups/{group}`: forgets a group's committed offsets. Refused while it has
/// live members; the caller must be allowed to consume every stream it committed in.
pub(super) async fn delete<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
) -> Result<StatusCode, Failure> {
    let group = group_name(group)?;
    let _writes = cluster.write_lock().await;
    cluster.groups.check_empty(&group)?;
    let offsets = cluster.store.group_offsets(&group).await?;
    if offsets.is_empty() {
        return Err(Failure::GroupNotFound(group));
    }
    for offset in &offsets {
        caller.require(Action::Consume, &offset.stream)?;
    }
    cluster.store.delete_group(&group).await?;
    tracing::info!(%group, "group deleted");
    Ok(StatusCode::NO_CONTENT)
}

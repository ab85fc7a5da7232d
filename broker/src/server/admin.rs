//! Metadata and stream administration over the client protocol. A broker with a controlplane
//! forwards creates and deletes to it and answers once its own assignments reflect them.

use std::sync::Arc;

use floe_client::rest::RestError;
use floe_wire::admin::{CreateStreamRequest, RetentionSettings, SegmentSettings};
use floe_wire::frame::{
    CreateStream, CreateStreamResponse, DamagedRange, DeleteStream, DeleteStreamResponse, Message,
    MetadataRequest, MetadataResponse, PartitionMetadata, RepairPartition, RepairPartitionResponse,
    StreamInfo, StreamMetadata, StreamSettings, UploadBacklog,
};
use floe_wire::{Endpoint, LeaderEpoch, Offset, PartitionId, StreamName};
use std::time::Duration;

use super::{Broker, Refusal};
use crate::auth::Caller;
use crate::catalog::StreamEntry;
use crate::partition::corrupt::CorruptPartition;
use crate::partition::{LOCAL_EPOCH, Partition};
use crate::partitions::StreamError;
use crate::session::Session;

/// The partition a request names, or the error to answer with.
pub(crate) fn partition(
    state: &Broker,
    stream: &StreamName,
    id: PartitionId,
) -> Result<Arc<Partition>, Message> {
    if let Some(p) = state.partitions.get(stream.as_str(), id.get()) {
        return Ok(p);
    }
    if let Some(corrupt) = state.partitions.corrupt(stream.as_str(), id.get()) {
        return Err(Refusal::PartitionCorrupt(corrupt).into());
    }
    let known = state
        .partitions
        .streams()
        .iter()
        .any(|(name, _)| name == stream.as_str());
    Err(if known {
        Refusal::UnknownPartition {
            stream: stream.clone(),
            partition: id.get(),
        }
    } else {
        Refusal::UnknownStream(stream.clone())
    }
    .into())
}

pub(crate) fn metadata(state: &Broker, request: MetadataRequest) -> Message {
    let catalog = state.partitions.streams();
    let wanted: Vec<StreamName> = if request.streams.is_empty() {
        catalog
            .iter()
            .filter_map(|(name, _)| StreamName::new(name.clone()).ok())
            .collect()
    } else {
        request.streams
    };
    let streams = wanted
        .into_iter()
        .map(|name| {
            let result = match catalog.iter().find(|(n, _)| n == name.as_str()) {
                None => Err(Refusal::UnknownStream(name.clone()).code()),
                Some((_, entry)) => Ok(stream_info(state, &name, entry)),
            };
            StreamMetadata { name, result }
        })
        .collect();
    Message::MetadataResponse(MetadataResponse { streams })
}

fn stream_info(state: &Broker, name: &StreamName, entry: &StreamEntry) -> StreamInfo {
    let mut partitions: Vec<PartitionMetadata> = (0..entry.partitions)
        .filter_map(|id| state.partitions.get(name.as_str(), id))
        .map(|p| {
            let backlog = p.upload_backlog();
            let leading = p.tiers_here();
            let committed = p.committed_end();
            let (leader, leader_epoch) = match leading {
                Some(epoch) => (Some(state.advertised.clone()), epoch),
                // A replica that does not lead names the leader it was told of, when it
                // knows where clients reach it.
                None => assigned_leader(state, &p),
            };
            PartitionMetadata {
                id: PartitionId::new(p.id()),
                leader,
                leader_epoch,
                log_start: p.log_start(),
                high_watermark: committed.unwrap_or(Offset::ZERO),
                local_start: p.log().log_start(),
                tier_end: p.tier_end(),
                upload_backlog: UploadBacklog {
                    segments: backlog.segments,
                    bytes: backlog.bytes,
                },
                damaged: None,
            }
        })
        .collect();
    partitions.extend(
        (0..entry.partitions)
            .filter_map(|id| state.partitions.corrupt(name.as_str(), id))
            .map(|corrupt| corrupt_partition(state, &corrupt)),
    );
    partitions.sort_by_key(|p| p.id);
    let effective = state.partitions.effective(entry);
    StreamInfo {
        ack_mode: entry.ack_mode,
        partition_count: entry.partitions,
        settings: StreamSettings {
            segment_bytes: effective.segment_bytes,
            segment_age_ms: effective.segment_age_ms,
            local_retention_bytes: effective.local_retention_bytes,
            local_retention_ms: effective.local_retention_ms,
            retention_bytes: effective.retention_bytes,
            retention_ms: effective.retention_ms,
        },
        partitions,
    }
}

/// A partition in the `corrupt` state, as metadata: this broker holds it, so clients come here
/// and are told it is corrupt (`CorruptData`); its log's offsets are not known (all zero),
/// the damaged range is.
fn corrupt_partition(state: &Broker, corrupt: &CorruptPartition) -> PartitionMetadata {
    PartitionMetadata {
        id: PartitionId::new(corrupt.partition),
        leader: Some(state.advertised.clone()),
        leader_epoch: LOCAL_EPOCH,
        log_start: Offset::ZERO,
        high_watermark: Offset::ZERO,
        local_start: Offset::ZERO,
        tier_end: Offset::ZERO,
        upload_backlog: UploadBacklog::default(),
        // A damaged file that is not a segment (a state file): the whole log is in doubt.
        damaged: corrupt.damaged_range().or(Some(DamagedRange {
            start: Offset::ZERO,
            end: None,
        })),
    }
}

/// An operator's repair of a corrupt partition held here: what it discards, and, once they
/// acknowledged that, the repair itself.
pub(crate) async fn repair_partition(state: &Broker, request: RepairPartition) -> Message {
    let outcome = state
        .partitions
        .repair(
            request.stream.as_str(),
            request.partition.get(),
            request.discard_from,
        )
        .await;
    match outcome {
        Ok(outcome) => Message::RepairPartitionResponse(RepairPartitionResponse {
            stream: request.stream,
            partition: request.partition,
            repaired: outcome.repaired,
            discard_from: outcome.plan.discard_from,
            discarded_bytes: outcome.plan.discarded_bytes,
            discarded_segments: u32::try_from(outcome.plan.discarded_segments).unwrap_or(u32::MAX),
            restart: outcome.plan.restart,
            segment: outcome
                .corrupt
                .file
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            position: outcome.plan.position,
            damage: outcome.corrupt.reason,
        }),
        Err(e) => Refusal::from(e).into(),
    }
}

/// The leader's client endpoint and epoch as the latest assignment names them, for a
/// replica that does not lead.
fn assigned_leader(state: &Broker, partition: &Partition) -> (Option<Endpoint>, LeaderEpoch) {
    let assigned = partition.replica().and_then(|r| r.assigned_leader());
    let (Some((leader, epoch)), Some(context)) = (assigned, &state.replication) else {
        return (None, LOCAL_EPOCH);
    };
    (context.peers().client_endpoint(leader), epoch)
}

/// How long a forwarded create or delete waits for the assignments that carry it.
const APPLY_WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn create_stream(
    state: &Broker,
    caller: &Caller,
    request: CreateStream,
) -> Message {
    if let Some(managed) = &state.session {
        return forward_create(state, managed, caller, request).await;
    }
    let settings = request.settings;
    let entry = StreamEntry {
        partitions: request.partition_count,
        ack_mode: request.ack_mode,
        segment_bytes: settings.segment_bytes,
        segment_age_ms: settings.segment_age_ms,
        local_retention_bytes: settings.local_retention_bytes,
        local_retention_ms: settings.local_retention_ms,
        retention_bytes: settings.retention_bytes,
        retention_ms: settings.retention_ms,
        created_at_ms: None,
        replication_factor: None,
        held: None,
        deleting: false,
    };
    let name = request.name.as_str();
    if state.partitions.streams().iter().any(|(n, _)| n == name) {
        return stream_error(StreamError::Exists(name.to_string()));
    }
    if state.partitions.deleting().iter().any(|n| n == name) {
        return stream_error(StreamError::Deleting(name.to_string()));
    }
    // A new stream must not adopt objects an earlier one of that name left in the bucket:
    // its uploader would take them for its own history.
    match state.tiering.has_objects(request.name.as_str()).await {
        Ok(false) => {}
        Ok(true) => return Refusal::ObjectsLeft(request.name).into(),
        Err(source) => {
            return Refusal::TierCheck {
                stream: request.name,
                source,
            }
            .into();
        }
    }
    match state
        .partitions
        .create_stream(request.name.as_str(), entry)
        .await
    {
        Ok(()) => Message::CreateStreamResponse(CreateStreamResponse { name: request.name }),
        Err(e) => stream_error(e),
    }
}

pub(crate) async fn delete_stream(
    state: &Broker,
    caller: &Caller,
    request: DeleteStream,
) -> Message {
    if let Some(managed) = &state.session {
        return match as_caller(managed, caller)
            .delete_stream(request.name.as_str())
            .await
        {
            Ok(()) => {
                let name = request.name.as_str();
                let gone = || !state.partitions.streams().iter().any(|(n, _)| n == name);
                managed.wait_until(APPLY_WAIT, gone).await;
                Message::DeleteStreamResponse(DeleteStreamResponse { name: request.name })
            }
            Err(e) => rest_error(e),
        };
    }
    match state.partitions.delete_stream(request.name.as_str()) {
        Ok(()) => Message::DeleteStreamResponse(DeleteStreamResponse { name: request.name }),
        Err(e) => stream_error(e),
    }
}

fn stream_error(e: StreamError) -> Message {
    Refusal::Stream(e).into()
}

/// Creates the stream through the controlplane, then waits (bounded) until this broker's
/// assignments carry it, so that a publish right after the answer finds its partitions.
async fn forward_create(
    state: &Broker,
    managed: &Session,
    caller: &Caller,
    request: CreateStream,
) -> Message {
    let settings = request.settings;
    let create = CreateStreamRequest {
        name: request.name.clone(),
        partitions: request.partition_count,
        replication_factor: None,
        ack_mode: Some(request.ack_mode),
        segment: SegmentSettings::from_client(&settings),
        retention: RetentionSettings::from_client(&settings),
    };
    match as_caller(managed, caller).create_stream(&create).await {
        Ok(info) => {
            let name = request.name.as_str();
            // Served once the catalog holds the new stream and every partition it holds is
            // open: the catalog entry is written before the partitions' logs are opened,
            // and a produce in between would find no partition.
            let served = || {
                state.partitions.streams().iter().any(|(n, e)| {
                    n == name
                        && e.created_at_ms == Some(info.created_at_ms)
                        && e.held.as_ref().is_some_and(|h| !h.is_empty())
                        && e.held_ids()
                            .all(|id| state.partitions.get(name, id).is_some())
                })
            };
            managed.wait_until(APPLY_WAIT, served).await;
            Message::CreateStreamResponse(CreateStreamResponse { name: request.name })
        }
        Err(e) => rest_error(e),
    }
}

/// The controlplane, called as the client: it decides whether the client may administer
/// the stream, never on the broker's own token.
fn as_caller(managed: &Session, caller: &Caller) -> floe_client::rest::Controlplane {
    managed.controlplane().with_token(caller.token())
}

/// The client-protocol error for a failed controlplane call.
fn rest_error(e: RestError) -> Message {
    Refusal::Controlplane(e).into()
}

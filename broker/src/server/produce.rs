//! Produce: append each batch to the partition's log and acknowledge per the stream's ack
//! mode. With `leader`, the acknowledgement waits for the fdatasync covering the last batch;
//! with `quorum` on a replicated partition, for the high watermark to pass it (a majority
//! holds it durably). A replicated partition takes appends only on its leader, in the
//! leader's epoch.

use std::time::Instant;

use floe_wire::BatchHeader;
use floe_wire::frame::{BatchAck, ErrorCode, Message, Produce, ProduceAck};

use super::order::Turn;
use super::{BrokerState, admin, error_map};
use crate::metrics::{ErrorLabels, StreamLabels};
use crate::partitions::Durability;
use crate::replica::ReplicaError;

pub(crate) use crate::tiering::LOCAL_EPOCH;

/// `turn` is this request's place in its connection's order of appends; it is given up once
/// the batches are appended, before waiting for their sync.
pub(crate) async fn produce(
    state: &BrokerState,
    request: Produce,
    started: Instant,
    turn: Option<Turn<'_>>,
) -> Message {
    let partition = match admin::partition(state, &request.stream, request.partition) {
        Ok(p) => p,
        Err(message) => return message,
    };
    let labels = StreamLabels {
        stream: partition.stream.clone(),
    };
    if state
        .disk_high_water
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        // Nothing is appended: the producer retries once tiering and local retention have
        // freed space.
        return Message::ProduceAck(ProduceAck {
            results: vec![Err(ErrorCode::DiskHighWater); request.batches.len()],
        });
    }
    let replica = match (partition.replicated, partition.replica()) {
        (false, _) => None,
        (true, Some(replica)) => Some(replica),
        (true, None) => return not_leader(request.batches.len()),
    };
    let mut results = Vec::with_capacity(request.batches.len());
    let mut durable_at = None;
    let mut leader_epoch = None;
    let mut failed = None;
    for batch in &request.batches {
        if let Some(code) = failed {
            // Batches after a refused one are not appended: appending them would reorder the
            // partition relative to the producer's retry.
            results.push(Err(code));
            continue;
        }
        let appended = match replica {
            None => partition
                .log
                .append(batch, LOCAL_EPOCH)
                .map_err(Refusal::Log),
            Some(replica) => match replica.append(&partition.log, batch) {
                Ok((appended, epoch)) => {
                    leader_epoch = Some(epoch);
                    Ok(appended)
                }
                Err(ReplicaError::Log(e)) => Err(Refusal::Log(e)),
                Err(ReplicaError::NotLeader) => Err(Refusal::NotLeader),
            },
        };
        match appended {
            Ok(appended) => {
                if !appended.duplicate {
                    state.metrics.publish_batches.get_or_create(&labels).inc();
                    state
                        .metrics
                        .publish_bytes
                        .get_or_create(&labels)
                        .inc_by(batch.len() as u64);
                    if let Ok(header) = BatchHeader::parse(batch) {
                        state
                            .metrics
                            .publish_records
                            .get_or_create(&labels)
                            .inc_by(u64::from(header.record_count));
                    }
                }
                durable_at = Some(appended.next_offset());
                results.push(Ok(BatchAck {
                    base_offset: appended.base_offset,
                    last_offset: appended.last_offset,
                }));
            }
            Err(e) => {
                let code = match &e {
                    Refusal::Log(e) => {
                        tracing::debug!(stream = %partition.stream, partition = partition.id, error = %e, "produce refused");
                        error_map::code(e)
                    }
                    Refusal::NotLeader => ErrorCode::NotLeader,
                };
                state
                    .metrics
                    .publish_refused
                    .get_or_create(&ErrorLabels {
                        code: format!("{code:?}"),
                    })
                    .inc();
                failed = Some(code);
                results.push(Err(code));
            }
        }
    }
    drop(turn);
    if let Some(replica) = replica {
        replica.appended();
    }
    let durable = match (partition.durability, durable_at, replica, leader_epoch) {
        (_, None, _, _) | (Durability::None, ..) => Ok(()),
        (Durability::Quorum, Some(end), Some(replica), Some(epoch)) => {
            let started = Instant::now();
            let committed = replica.wait_committed(end.get(), epoch).await;
            state
                .metrics
                .quorum_ack_latency
                .observe(started.elapsed().as_secs_f64());
            committed.map_err(|e| match e {
                ReplicaError::NotLeader => ErrorCode::NotLeader,
                ReplicaError::Log(e) => error_map::code(&e),
            })
        }
        (_, Some(end), ..) => partition
            .log
            .wait_synced(end)
            .await
            .map_err(|e| error_map::code(&e)),
    };
    if let Err(code) = durable {
        for result in &mut results {
            if result.is_ok() {
                *result = Err(code);
            }
        }
    }
    if results.iter().any(Result::is_err) {
        let code = results
            .iter()
            .find_map(|r| r.err())
            .unwrap_or(ErrorCode::Internal);
        tracing::debug!(?code, "produce answered with errors");
    }
    state
        .metrics
        .publish_latency
        .observe(started.elapsed().as_secs_f64());
    Message::ProduceAck(ProduceAck { results })
}

/// Why a batch was not appended.
enum Refusal {
    Log(floe_hot_log::LogError),
    NotLeader,
}

/// Every batch refused: this broker holds the partition but does not lead it (now).
fn not_leader(batches: usize) -> Message {
    Message::ProduceAck(ProduceAck {
        results: vec![Err(ErrorCode::NotLeader); batches],
    })
}

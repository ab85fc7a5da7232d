//! Produce: append each batch to the partition's log and acknowledge per the stream's ack
//! mode. With `leader`, the acknowledgement waits for the fdatasync covering the last batch.

use std::time::Instant;

use floe_wire::BatchHeader;
use floe_wire::frame::{BatchAck, ErrorCode, Message, Produce, ProduceAck};

use super::order::Turn;
use super::{BrokerState, admin, error_map};
use crate::metrics::{ErrorLabels, StreamLabels};
use crate::partitions::Durability;

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
    let mut results = Vec::with_capacity(request.batches.len());
    let mut durable_at = None;
    let mut failed = None;
    for batch in &request.batches {
        if let Some(code) = failed {
            // Batches after a refused one are not appended: appending them would reorder the
            // partition relative to the producer's retry.
            results.push(Err(code));
            continue;
        }
        match partition.log.append(batch, LOCAL_EPOCH) {
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
                tracing::debug!(stream = %partition.stream, partition = partition.id, error = %e, "produce refused");
                let code = error_map::code(&e);
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
    if let (Durability::Leader, Some(offset)) = (partition.durability, durable_at)
        && let Err(e) = partition.log.wait_synced(offset).await
    {
        let code = error_map::code(&e);
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

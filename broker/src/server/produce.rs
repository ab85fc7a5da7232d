//! Produce: append each batch to the partition's log and acknowledge per the stream's ack
//! mode. With `leader`, the acknowledgement waits for the fdatasync covering the last batch;
//! with `quorum` on a replicated partition, for the high watermark to pass it (a majority
//! holds it durably). A replicated partition takes appends only on its leader, in the
//! leader's epoch. A partition without replicas on a managed broker takes appends only while
//! the broker's lease holds, in the epoch its controlplane gave it, and acknowledges them
//! only if the lease still holds once they are durable: otherwise `NotLeader`, and the
//! producer retries where the partition went.

use std::time::Instant;

use floe_wire::frame::{BatchAck, ErrorCode, Message, Produce, ProduceAck};
use floe_wire::{AckMode, BatchHeader, LeaderEpoch, Offset};

use super::order::Turn;
use super::{Broker, Refusal, admin};
use crate::metrics::{ErrorLabels, StreamLabels};
use crate::partition::Partition;
use crate::partition::replica::{ReplicaError, ReplicaHandle};

/// `turn` is this request's place in its connection's order of appends; it is given up once
/// the batches are appended, before waiting for their sync.
pub(crate) async fn produce(
    state: &Broker,
    request: Produce,
    started: Instant,
    turn: Option<Turn<'_>>,
) -> Message {
    let partition = match admin::partition(state, &request.stream, request.partition) {
        Ok(p) => p,
        Err(message) => return message,
    };
    if state.disk.is_reached() {
        // Nothing is appended: the producer retries once tiering and local retention have
        // freed space.
        return refuse_all(state, &Refusal::DiskHighWater, request.batches.len());
    }
    let writer = match (partition.is_replicated(), partition.replica()) {
        (false, _) => match partition.write_epoch(Instant::now()) {
            Some(epoch) => Writer::Local(epoch),
            None => return refuse_all(state, &not_leader(&partition), request.batches.len()),
        },
        (true, Some(replica)) => Writer::Replica(replica),
        (true, None) => {
            return refuse_all(state, &not_leader(&partition), request.batches.len());
        }
    };
    let appends = append_batches(state, &partition, writer, &request.batches);
    drop(turn);
    let replica = match writer {
        Writer::Replica(replica) => {
            replica.appended();
            Some(replica)
        }
        Writer::Local(_) => None,
    };
    let mut results = appends.results;
    let mut durable = match appends.durable_at {
        Some(end) => wait_durable(state, &partition, replica, end, appends.leader_epoch).await,
        None => Ok(()),
    };
    if let Writer::Local(epoch) = writer
        && durable.is_ok()
        && partition.write_epoch(Instant::now()) != Some(epoch)
    {
        // Durable, but the lease lapsed meanwhile (or the partition moved): the controlplane
        // may have given the partition to another broker, whose history this is not in.
        durable = Err(not_leader(&partition).code());
    }
    if let Err(code) = durable {
        for result in &mut results {
            if result.is_ok() {
                *result = Err(code);
            }
        }
    }
    if let Some(code) = results.iter().find_map(|r| r.err()) {
        tracing::debug!(?code, "produce answered with errors");
    }
    state
        .metrics
        .publish_latency
        .observe(started.elapsed().as_secs_f64());
    Message::ProduceAck(ProduceAck { results })
}

/// Who appends a request's batches.
#[derive(Clone, Copy)]
enum Writer<'a> {
    /// A partition without replicas, in this epoch.
    Local(LeaderEpoch),
    /// A replicated partition, through its replica (in the leader's epoch).
    Replica(&'a ReplicaHandle),
}

/// What appending a request's batches came to, before any wait for durability.
struct Appends {
    /// One per batch, in order.
    results: Vec<Result<BatchAck, ErrorCode>>,
    /// The offset after the last batch appended (or recognised as a retry), if any.
    durable_at: Option<Offset>,
    /// The epoch a replicated partition's leader appended in.
    leader_epoch: Option<LeaderEpoch>,
}

/// Appends each batch in turn. Batches after a refused one are not appended: appending them
/// would reorder the partition relative to the producer's retry.
fn append_batches(
    state: &Broker,
    partition: &Partition,
    writer: Writer<'_>,
    batches: &[bytes::Bytes],
) -> Appends {
    let labels = StreamLabels {
        stream: partition.stream().to_string(),
    };
    let mut appends = Appends {
        results: Vec::with_capacity(batches.len()),
        durable_at: None,
        leader_epoch: None,
    };
    let mut failed = None;
    for batch in batches {
        if let Some(code) = failed {
            count_refused(state, code, 1);
            appends.results.push(Err(code));
            continue;
        }
        let appended = match writer {
            Writer::Local(epoch) => partition.log().append(batch, epoch).map_err(Refusal::Log),
            Writer::Replica(replica) => match replica.append(partition.log(), batch) {
                Ok((appended, epoch)) => {
                    appends.leader_epoch = Some(epoch);
                    Ok(appended)
                }
                Err(e) => Err(replica_refusal(e, partition)),
            },
        };
        match appended {
            Ok(appended) => {
                if !appended.duplicate {
                    count_published(state, &labels, batch);
                }
                appends.durable_at = Some(appended.next_offset());
                appends.results.push(Ok(BatchAck {
                    base_offset: appended.base_offset,
                    last_offset: appended.last_offset,
                }));
            }
            Err(refusal) => {
                let code = refused(state, partition, &refusal);
                failed = Some(code);
                appends.results.push(Err(code));
            }
        }
    }
    appends
}

fn count_published(state: &Broker, labels: &StreamLabels, batch: &[u8]) {
    let metrics = &state.metrics;
    metrics.publish_batches.get_or_create(labels).inc();
    metrics
        .publish_bytes
        .get_or_create(labels)
        .inc_by(batch.len() as u64);
    if let Ok(header) = BatchHeader::parse(batch) {
        metrics
            .publish_records
            .get_or_create(labels)
            .inc_by(u64::from(header.record_count));
    }
}

/// The wire code for a refused batch, counted and logged.
fn refused(state: &Broker, partition: &Partition, refusal: &Refusal) -> ErrorCode {
    let code = refusal.code();
    if let Refusal::Log(e) = refusal {
        tracing::debug!(stream = partition.stream(), partition = partition.id(), error = %e, "produce refused");
    }
    count_refused(state, code, 1);
    code
}

/// Counts `batches` refused with `code` in `floe_publish_refused_batches_total`.
fn count_refused(state: &Broker, code: ErrorCode, batches: usize) {
    state
        .metrics
        .publish_refused
        .get_or_create(&ErrorLabels {
            code: format!("{code:?}"),
        })
        .inc_by(batches as u64);
}

/// Waits until every offset below `end` is as durable as the stream's ack mode asks: synced
/// locally (`leader`), or below the high watermark of `leader_epoch` (`quorum` on a
/// replicated partition). Ack mode `none` does not wait.
async fn wait_durable(
    state: &Broker,
    partition: &Partition,
    replica: Option<&ReplicaHandle>,
    end: Offset,
    leader_epoch: Option<LeaderEpoch>,
) -> Result<(), ErrorCode> {
    match (partition.ack_mode(), replica, leader_epoch) {
        (AckMode::None, ..) => Ok(()),
        (AckMode::Quorum, Some(replica), Some(epoch)) => {
            let started = Instant::now();
            let committed = replica.wait_committed(end.get(), epoch).await;
            state
                .metrics
                .quorum_ack_latency
                .observe(started.elapsed().as_secs_f64());
            committed.map_err(|e| replica_refusal(e, partition).code())
        }
        _ => partition
            .log()
            .wait_synced(end)
            .await
            .map_err(|e| Refusal::Log(e).code()),
    }
}

fn not_leader(partition: &Partition) -> Refusal {
    Refusal::NotLeader {
        stream: partition.stream().to_string(),
        partition: partition.id(),
    }
}

fn replica_refusal(error: ReplicaError, partition: &Partition) -> Refusal {
    match error {
        ReplicaError::NotLeader => not_leader(partition),
        ReplicaError::Log(e) => Refusal::Log(e),
    }
}

/// Every batch refused with `code`, none appended, and counted: the disk is above its
/// high-water mark, or this broker holds the partition but does not lead it (now).
fn refuse_all(state: &Broker, refusal: &Refusal, batches: usize) -> Message {
    let code = refusal.code();
    count_refused(state, code, batches);
    Message::ProduceAck(ProduceAck {
        results: vec![Err(code); batches],
    })
}

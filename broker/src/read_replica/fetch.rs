//! A fetch at a read replica: from the tail window when it holds the position, from the
//! tier when the position is history, long-polling at the window's end; anything else is
//! asked of the partition's leader on the consumer's behalf. Only committed records are ever
//! served: the window holds what the leader served, which is below its high watermark, and
//! the tier holds only committed segments.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_client::Error;
use floe_wire::Offset;
use floe_wire::frame::{ErrorResponse, Fetch, FetchPosition, FetchResponse, Message};

use super::ReadReplica;
use super::window::WindowRead;
use crate::metrics::StreamLabels;
use crate::server::{self, Refusal};

/// How long a fetch from the earliest offset waits for a newly followed partition's first
/// answer from its leader before the leader is asked instead.
const START_WAIT: Duration = Duration::from_secs(1);

pub(super) async fn fetch(state: &Arc<ReadReplica>, request: Fetch, started: Instant) -> Message {
    let labels = StreamLabels {
        stream: request.stream.to_string(),
    };
    state.metrics.fetch_requests.get_or_create(&labels).inc();
    let answer = serve(state, &request).await;
    if let Message::FetchResponse(response) = &answer {
        let bytes = response.records.len() as u64;
        state
            .metrics
            .fetch_bytes
            .get_or_create(&labels)
            .inc_by(bytes);
        state.load.served(bytes);
    }
    let took = started.elapsed();
    state.metrics.fetch_latency.observe(took.as_secs_f64());
    state.load.latency(took);
    answer
}

async fn serve(state: &Arc<ReadReplica>, request: &Fetch) -> Message {
    let (max_bytes, wait) = server::fetch::bounds(request, &state.limits, state.fetch_wait_max);
    let deadline = tokio::time::Instant::now() + wait;
    let tail = state.tail(&request.stream, request.partition);
    let mut changes = tail.watch();
    let from = match request.position {
        FetchPosition::Offset(from) => from,
        // The earliest offset is the log's start, which the follower learns from the
        // leader's answers: history readers starting from the beginning cost the leader
        // nothing (it would serve their first fetch from the tier).
        FetchPosition::Earliest => {
            let learnt = tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + START_WAIT),
                changes.wait_for(|p| p.started || p.failed.is_some()),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|progress| progress.failed.is_none().then_some(progress.log_start));
            match learnt {
                Some(log_start) => log_start,
                None => return relay(state, request, deadline_left(deadline)).await,
            }
        }
        // The latest offset and a time need the leader's log and index; the consumer then
        // reads on by offset, here.
        _ => return relay(state, request, wait).await,
    };
    loop {
        let progress = *changes.borrow_and_update();
        if let Some(code) = progress.failed {
            return Refusal::Unreadable {
                stream: request.stream.clone(),
                partition: request.partition.get(),
                code,
            }
            .into();
        }
        let read = tail.read(from, max_bytes);
        let wait_for_more = match read {
            Some(WindowRead::Batches { bytes, next }) => {
                return respond(progress.log_start, progress.high_watermark, next, bytes);
            }
            Some(WindowRead::Below) => return history(state, request, from, max_bytes, wait).await,
            Some(WindowRead::AtEnd) => true,
            // Beyond the window: wait while the window catches up with the leader's high
            // watermark; beyond that the leader decides (it may be out of range).
            Some(WindowRead::Beyond) => from <= progress.high_watermark || !progress.started,
            None => true,
        };
        if !wait_for_more {
            return relay(state, request, deadline_left(deadline)).await;
        }
        let changed = tokio::time::timeout_at(deadline, changes.changed()).await;
        if !matches!(changed, Ok(Ok(()))) {
            // The deadline: nothing new. A consumer beyond the window gets the leader's word.
            return match tail.read(from, max_bytes) {
                Some(WindowRead::AtEnd) => respond(
                    progress.log_start,
                    progress.high_watermark,
                    from,
                    Bytes::new(),
                ),
                _ => relay(state, request, Duration::ZERO).await,
            };
        }
    }
}

/// History below the window: from the tier, else (a gap after an eviction, or the tier not
/// reachable from here) from the leader.
async fn history(
    state: &Arc<ReadReplica>,
    request: &Fetch,
    from: Offset,
    max_bytes: usize,
    wait: Duration,
) -> Message {
    if let Some(path) = ReadReplica::tier_path(&request.stream, request.partition) {
        match state.reader.read(&path, from, max_bytes).await {
            Ok(read) if !read.bytes.is_empty() => {
                let progress = state.tail(&request.stream, request.partition).progress();
                return respond(
                    progress.log_start.min(from),
                    progress.high_watermark.max(read.next_offset),
                    read.next_offset,
                    read.bytes,
                );
            }
            Ok(_) => {}
            Err(source @ floe_tier::TierError::Corrupt { .. }) => {
                return Refusal::Tier {
                    source,
                    log_start: from,
                    log_end: from,
                }
                .into();
            }
            Err(e) => {
                tracing::debug!(stream = %request.stream, partition = request.partition.get(), %from, error = %e, "not in the tier here; asking the leader");
            }
        }
    }
    relay(state, request, wait).await
}

/// Asks the partition's leader, and passes its answer on.
async fn relay(state: &Arc<ReadReplica>, request: &Fetch, wait: Duration) -> Message {
    state.load.relayed();
    let answer = state
        .brokers
        .fetch_batches(
            &request.stream,
            request.partition,
            request.position,
            request.max_bytes,
            wait,
        )
        .await;
    match answer {
        Ok(response) => Message::FetchResponse(response),
        Err(Error::Broker {
            code,
            message,
            details,
            ..
        }) => Message::Error(ErrorResponse {
            code,
            message,
            details,
        }),
        Err(e) => Refusal::LeaderUnreachable(e.to_string()).into(),
    }
}

fn respond(log_start: Offset, high_watermark: Offset, next: Offset, records: Bytes) -> Message {
    Message::FetchResponse(FetchResponse {
        log_start,
        high_watermark,
        next_offset: next,
        records,
    })
}

fn deadline_left(deadline: tokio::time::Instant) -> Duration {
    deadline.saturating_duration_since(tokio::time::Instant::now())
}

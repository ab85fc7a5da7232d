//! Fetch: whole stored batches from a position, up to a byte budget, only below the synced
//! end (what a crash cannot take back); long-polls on the tail until data or the deadline.

use std::time::{Duration, Instant};

use floe_hot_log::LogError;
use floe_wire::Offset;
use floe_wire::frame::{FRAME_OVERHEAD_BYTES, Fetch, FetchPosition, FetchResponse, Message};

use super::{BrokerState, admin, error_map};
use crate::metrics::StreamLabels;

pub(crate) async fn fetch(state: &BrokerState, request: Fetch, started: Instant) -> Message {
    let partition = match admin::partition(state, &request.stream, request.partition) {
        Ok(p) => p,
        Err(message) => return message,
    };
    let log = &partition.log;
    let labels = StreamLabels {
        stream: partition.stream.clone(),
    };
    state.metrics.fetch_requests.get_or_create(&labels).inc();
    let budget = state
        .limits
        .max_frame_bytes
        .saturating_sub(FRAME_OVERHEAD_BYTES);
    let max_bytes = request.max_bytes.clamp(1, budget.max(1)) as usize;
    let wait = Duration::from_millis(u64::from(request.max_wait_ms)).min(state.fetch_wait_max);
    let deadline = tokio::time::Instant::now() + wait;
    let mut synced = log.sync_status();
    let from = match resolve(log, request.position) {
        Ok(offset) => offset,
        Err(e) => return error_map::message(&e),
    };
    loop {
        let high_watermark = log.synced_end();
        let read = if from > log.log_end() {
            Err(LogError::OffsetOutOfRange {
                requested: from,
                log_start: log.log_start(),
                log_end: log.log_end(),
            })
        } else if from >= high_watermark {
            Ok(None)
        } else {
            log.read(from, max_bytes, high_watermark)
                .map(|r| (!r.bytes.is_empty()).then_some(r))
        };
        match read {
            Ok(Some(batches)) => {
                state
                    .metrics
                    .fetch_bytes
                    .get_or_create(&labels)
                    .inc_by(batches.bytes.len() as u64);
                state
                    .metrics
                    .fetch_latency
                    .observe(started.elapsed().as_secs_f64());
                return Message::FetchResponse(FetchResponse {
                    log_start: log.log_start(),
                    high_watermark,
                    next_offset: batches.next_offset,
                    records: batches.bytes,
                });
            }
            Ok(None) => {
                let changed = tokio::time::timeout_at(deadline, synced.changed()).await;
                if !matches!(changed, Ok(Ok(()))) {
                    state
                        .metrics
                        .fetch_latency
                        .observe(started.elapsed().as_secs_f64());
                    return Message::FetchResponse(FetchResponse {
                        log_start: log.log_start(),
                        high_watermark: log.synced_end(),
                        next_offset: from,
                        records: bytes::Bytes::new(),
                    });
                }
            }
            Err(e) => return error_map::message(&e),
        }
    }
}

fn resolve(log: &floe_hot_log::Log, position: FetchPosition) -> Result<Offset, LogError> {
    Ok(match position {
        FetchPosition::Offset(offset) => offset,
        FetchPosition::Earliest => log.log_start(),
        FetchPosition::Latest => log.synced_end(),
        FetchPosition::Timestamp(ms) => log
            .offset_for_timestamp(ms)?
            .unwrap_or_else(|| log.synced_end()),
    })
}

//! Fetch: whole stored batches from a position, up to a byte budget, only below the committed
//! end — the synced end of an unreplicated partition (what a crash cannot take back), the
//! high watermark of a replicated one, served by its leader only; long-polls on the tail
//! until data or the deadline.
//! A position below the local log is served from the tier, one segment object at a time, so
//! a consumer reading from the start crosses into the hot log with no gap and no duplicate;
//! so is a position in a local segment that fails its checksums and is already tiered,
//! while the segment is healed from the tier ([`heal`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_hot_log::{LogError, ReadBatches, SyncStatus};
use floe_wire::Offset;
use floe_wire::frame::{
    ConnectionLimits, FRAME_OVERHEAD_BYTES, Fetch, FetchPosition, FetchResponse, Message,
};
use tokio::sync::watch;

use super::{Broker, Refusal, admin};
use crate::metrics::StreamLabels;
use crate::partition::Partition;
use crate::partition::replica::Commit;
use crate::tiering::heal;

pub(crate) async fn fetch(state: &Broker, request: Fetch, started: Instant) -> Message {
    let partition = match admin::partition(state, &request.stream, request.partition) {
        Ok(p) => p,
        Err(message) => return message,
    };
    let labels = StreamLabels {
        stream: partition.stream().to_string(),
    };
    state.metrics.fetch_requests.get_or_create(&labels).inc();
    let response = serve(state, &partition, &request).await;
    if let Message::FetchResponse(r) = &response
        && !r.records.is_empty()
    {
        state
            .metrics
            .fetch_bytes
            .get_or_create(&labels)
            .inc_by(r.records.len() as u64);
    }
    state
        .metrics
        .fetch_latency
        .observe(started.elapsed().as_secs_f64());
    response
}

/// The response to `request`: batches from the tier below the local log, batches from the
/// log below the committed end, or, at the tail, whatever arrives before the deadline.
async fn serve(state: &Broker, partition: &Arc<Partition>, request: &Fetch) -> Message {
    let log = partition.log();
    let (max_bytes, wait) = bounds(request, &state.limits, state.fetch_wait_max);
    let deadline = tokio::time::Instant::now() + wait;
    let mut tail = match Tail::watch(partition) {
        Ok(tail) => tail,
        Err(message) => return message,
    };
    let from = match resolve(state, partition, request.position).await {
        Ok(offset) => offset,
        Err(message) => return message,
    };
    // A read of history held back by the broker's history read rate waits at most this
    // long (the fetch's own wait, or a second for one that asked not to wait), then gets an
    // empty answer and asks again.
    let history_bound = deadline.max(tokio::time::Instant::now() + HISTORY_WAIT_MIN);
    loop {
        if from < log.log_start() {
            return tiered(state, partition, from, max_bytes, history_bound).await;
        }
        let high_watermark = match visible_end(partition) {
            Ok(end) => end,
            Err(message) => return message,
        };
        let response = |next_offset, records| {
            Message::FetchResponse(FetchResponse {
                log_start: partition.log_start(),
                high_watermark,
                next_offset,
                records,
            })
        };
        let mut admission = None;
        if reads_capped_history(state, partition, from, high_watermark) {
            match admit_history(state, max_bytes, history_bound).await {
                Some(admitted) => admission = Some(admitted),
                None => return response(from, bytes::Bytes::new()),
            }
        }
        match read_local(partition, from, max_bytes, high_watermark).await {
            Ok(Some(batches)) => {
                if let Some(admission) = &mut admission {
                    admission.used(batches.bytes.len() as u64);
                }
                return response(batches.next_offset, batches.bytes);
            }
            Ok(None) => {
                let changed = tokio::time::timeout_at(deadline, tail.changed()).await;
                if !matches!(changed, Ok(true)) {
                    return response(from, bytes::Bytes::new());
                }
            }
            // Local retention deleted the segment since the check above: the tier has it.
            Err(LogError::OffsetOutOfRange { .. }) if from < log.log_start() => continue,
            // Rot in a local segment: where the tier holds it, served from the tier, and the
            // local file replaced by the tiered copy in the background.
            Err(LogError::Corrupt {
                file,
                position,
                reason,
            }) => {
                if let Some(range) = heal::tier_range(partition).await
                    && range.contains(&from)
                {
                    heal::start(&state.tiering, &state.metrics, partition, &file, range);
                    return tiered(state, partition, from, max_bytes, history_bound).await;
                }
                let rot = LogError::Corrupt {
                    file,
                    position,
                    reason,
                };
                return read_refusal(partition, from, rot);
            }
            Err(e) => return read_refusal(partition, from, e),
        }
    }
}

/// Whether a read at `from` is of history while the broker's history read rate is capped.
fn reads_capped_history(
    state: &Broker,
    partition: &Partition,
    from: Offset,
    high_watermark: Offset,
) -> bool {
    // History: committed records in a sealed segment (asked only when capped: finding
    // the sealed end costs a look at the segment list). A consumer at the high
    // watermark is at the tail, even while the watermark still lies in the segment a
    // roll just sealed.
    state.history_cap.is_capped() && from < high_watermark.min(partition.log().sealed_end())
}

/// The refusal of a failed local read at `from`; out of range, it names the partition's
/// whole range, the tier's history included.
fn read_refusal(partition: &Partition, from: Offset, error: LogError) -> Message {
    match error {
        LogError::OffsetOutOfRange { .. } => {
            let range = LogError::OffsetOutOfRange {
                requested: from,
                log_start: partition.log_start(),
                log_end: partition.log().log_end(),
            };
            Refusal::Log(range).into()
        }
        e => Refusal::Log(e).into(),
    }
}

/// The least a read of history may wait for the broker's history read rate before it is
/// answered with nothing, whatever wait the fetch asked for.
const HISTORY_WAIT_MIN: Duration = Duration::from_secs(1);

/// Waits until the broker's history read rate lets a read of up to `max_bytes` of history
/// start (`None`: not before `until`), and counts the wait.
async fn admit_history(
    state: &Broker,
    max_bytes: usize,
    until: tokio::time::Instant,
) -> Option<crate::history_read_cap::Admission<'_>> {
    let started = tokio::time::Instant::now();
    let admission = state.history_cap.admit(max_bytes as u64, until).await;
    let waited = started.elapsed();
    if state.history_cap.is_capped() && !waited.is_zero() {
        state
            .metrics
            .history_read_throttle_seconds
            .inc_by(waited.as_secs_f64());
    }
    admission
}

/// Batches from the local log at `from`, below `high_watermark`; `None` at the tail (nothing
/// committed there yet).
async fn read_local(
    partition: &Arc<Partition>,
    from: Offset,
    max_bytes: usize,
    high_watermark: Offset,
) -> Result<Option<ReadBatches>, LogError> {
    let log = partition.log();
    if from > log.log_end() {
        return Err(LogError::OffsetOutOfRange {
            requested: from,
            log_start: log.log_start(),
            log_end: log.log_end(),
        });
    }
    if from >= high_watermark {
        return Ok(None);
    }
    let read = if log.read_is_uncached(from) {
        // A read of history the page cache let go of waits for the disk: on a blocking
        // thread, so that a consumer catching up does not hold up the connections this
        // worker serves (publishers among them).
        let reading = partition.clone();
        tokio::task::spawn_blocking(move || reading.log().read(from, max_bytes, high_watermark))
            .await
            .unwrap_or_else(|e| {
                Err(LogError::Io {
                    op: "read (blocking task)",
                    path: log.dir().to_path_buf(),
                    source: std::io::Error::other(e.to_string()),
                })
            })
    } else {
        log.read(from, max_bytes, high_watermark)
    };
    read.map(|r| (!r.bytes.is_empty()).then_some(r))
}

/// What one fetch may return and how long it may wait: the request's asks, capped by what
/// one response frame holds and by the server's longest wait.
pub(crate) fn bounds(
    request: &Fetch,
    limits: &ConnectionLimits,
    wait_max: Duration,
) -> (usize, Duration) {
    let budget = limits.max_frame_bytes.saturating_sub(FRAME_OVERHEAD_BYTES);
    let max_bytes = request.max_bytes.clamp(1, budget.max(1)) as usize;
    let wait = Duration::from_millis(u64::from(request.max_wait_ms)).min(wait_max);
    (max_bytes, wait)
}

/// Whole batches from the tier, from `from` (below the local log) on, once the broker's
/// history read rate lets the read start; none, at `from`, if it does not before
/// `history_bound`.
async fn tiered(
    state: &Broker,
    partition: &Partition,
    from: Offset,
    max_bytes: usize,
    history_bound: tokio::time::Instant,
) -> Message {
    let Some(mut admission) = admit_history(state, max_bytes, history_bound).await else {
        return Message::FetchResponse(FetchResponse {
            log_start: partition.log_start(),
            high_watermark: partition.committed_end().unwrap_or(from),
            next_offset: from,
            records: bytes::Bytes::new(),
        });
    };
    let read = state
        .tiering
        .reader()
        .read(partition.tier_path(), from, max_bytes)
        .await;
    let log = partition.log();
    match read {
        Ok(read) => {
            let bytes = read.bytes.len() as u64;
            admission.used(bytes);
            state.metrics.fetch_tier_bytes.inc_by(bytes);
            Message::FetchResponse(FetchResponse {
                log_start: partition.log_start(),
                high_watermark: partition.committed_end().unwrap_or(read.next_offset),
                next_offset: read.next_offset,
                records: read.bytes,
            })
        }
        Err(e) => {
            tracing::debug!(stream = partition.stream(), partition = partition.id(), %from, error = %e, "tiered read failed");
            Refusal::Tier {
                source: e,
                log_start: partition.log_start(),
                log_end: log.log_end(),
            }
            .into()
        }
    }
}

/// The offset a position names. History older than the local log is looked up in the tier.
async fn resolve(
    state: &Broker,
    partition: &Partition,
    position: FetchPosition,
) -> Result<Offset, Message> {
    let log = partition.log();
    Ok(match position {
        FetchPosition::Offset(offset) => offset,
        FetchPosition::Earliest => partition.log_start(),
        FetchPosition::Latest => visible_end(partition)?,
        FetchPosition::Timestamp(ms) => {
            let local = log
                .offset_for_timestamp(ms)
                .map_err(|e| Message::from(Refusal::Log(e)))?;
            let tiered_history = partition.log_start() < log.log_start();
            match local {
                // A record at or after `ms` may sit in the tier only if the local answer is
                // the local log's first batch.
                Some(offset) if offset > log.log_start() || !tiered_history => offset,
                _ if tiered_history => {
                    let tier = state
                        .tiering
                        .reader()
                        .offset_for_timestamp(partition.tier_path(), ms)
                        .await
                        .map_err(|source| {
                            Message::from(Refusal::Tier {
                                source,
                                log_start: partition.log_start(),
                                log_end: log.log_end(),
                            })
                        })?;
                    match tier.or(local) {
                        Some(offset) => offset,
                        None => visible_end(partition)?,
                    }
                }
                _ => visible_end(partition)?,
            }
        }
    })
}

/// The end of what consumers may read, or `NotLeader` on a replica that does not lead.
fn visible_end(partition: &Partition) -> Result<Offset, Message> {
    partition.committed_end().ok_or_else(|| {
        Refusal::NotLeader {
            stream: partition.stream().to_string(),
            partition: partition.id(),
        }
        .into()
    })
}

/// What a fetch waiting on the tail watches: the log's syncs, or a replica's commits.
enum Tail {
    Synced(watch::Receiver<SyncStatus>),
    Committed(watch::Receiver<Commit>),
}

impl Tail {
    fn watch(partition: &Partition) -> Result<Tail, Message> {
        if !partition.is_replicated() {
            return Ok(Tail::Synced(partition.log().sync_status()));
        }
        match partition.replica() {
            Some(replica) => Ok(Tail::Committed(replica.watch_commit())),
            None => {
                visible_end(partition).map(|_| unreachable!("an unstarted replica leads nothing"))
            }
        }
    }

    /// Waits for a change; false when the source is gone.
    async fn changed(&mut self) -> bool {
        match self {
            Tail::Synced(rx) => rx.changed().await.is_ok(),
            Tail::Committed(rx) => rx.changed().await.is_ok(),
        }
    }
}

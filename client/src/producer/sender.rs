//! The producer's shell: the state `send` and `flush` share with one background task, which
//! turns ready batches into `Produce` requests, feeds the answers to each partition's send
//! window, and completes the records' deliveries. All decisions are made by the pure
//! [`Accumulator`] and [`SequenceWindow`]; this module only locks, spawns and sleeps.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use floe_wire::batch::{HEADER_LEN, RecordFields};
use floe_wire::frame::{BatchAck, ErrorCode, Message, Produce};
use floe_wire::{BufferPool, PartitionId, StreamName};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use super::accumulator::Accumulator;
use super::config::Settings;
use super::delivery::{BatchOutcome, Deliveries, Delivery};
use super::partitioner::Partitioner;
use super::window::{Completion, SequenceWindow};
use crate::client::{Client, OpenRequest, ROUTED_OPEN_WAIT, points_elsewhere};
use crate::error::{Error, ProtocolViolation};
use crate::record::ProducerRecord;

/// How long a produce request may wait for its answer before the producer asks whether the
/// partition's leader moved.
const STALL: Duration = Duration::from_secs(1);

/// What the shell attaches to each batch.
#[derive(Debug, Default)]
pub(crate) struct BatchHandle {
    outcome: Arc<BatchOutcome>,
    /// Buffer permits the batch's records hold until it is done.
    reserved: u32,
}

#[derive(Debug)]
struct PartitionState {
    accumulator: Accumulator<BatchHandle>,
    window: SequenceWindow<BatchHandle>,
}

#[derive(Debug)]
struct State {
    partitions: Vec<PartitionState>,
    partitioner: Partitioner,
    /// No more sends; the task drains what is buffered, then stops.
    closing: bool,
}

/// One `Produce` request to make.
#[derive(Debug)]
struct Outgoing {
    partition: u32,
    sequences: Vec<i32>,
    batches: Vec<Bytes>,
}

/// The base sequences and bytes of the batches of one request, in order.
type Request = (Vec<i32>, Vec<Bytes>);

/// The broker's answer to an [`Outgoing`].
#[derive(Debug)]
struct Answer {
    partition: u32,
    sequences: Vec<i32>,
    outcome: Result<Vec<Result<BatchAck, ErrorCode>>, Error>,
}

/// What a producer's handles and its background task share.
#[derive(Debug)]
pub(crate) struct Shared {
    client: Client,
    stream: StreamName,
    partition_count: u32,
    producer_id: i64,
    settings: Settings,
    state: Mutex<State>,
    /// Wakes the task: a batch opened or filled, a flush, closing.
    wake: Notify,
    /// Permits are record bytes: `send` waits here when the buffer is full.
    memory: Semaphore,
}

impl Shared {
    pub fn new(
        client: Client,
        stream: StreamName,
        partition_count: u32,
        settings: Settings,
        producer_id: i64,
    ) -> Shared {
        // As many batch allocations as the buffer holds at once are kept for reuse.
        let buffers = Arc::new(BufferPool::new(
            (settings.buffer_bytes as usize / settings.max_batch_bytes.max(1)).max(1),
            settings.max_batch_bytes,
        ));
        let partitions = (0..partition_count)
            .map(|_| PartitionState {
                accumulator: Accumulator::new(
                    settings.max_batch_bytes,
                    settings.linger,
                    buffers.clone(),
                ),
                window: SequenceWindow::new(
                    settings.max_in_flight,
                    settings.retry,
                    floe_wire::Jitter::unpredictable(),
                ),
            })
            .collect();
        Shared {
            client,
            stream,
            partition_count,
            producer_id,
            settings,
            state: Mutex::new(State {
                partitions,
                partitioner: Partitioner::new(partition_count, producer_id as u32),
                closing: false,
            }),
            wake: Notify::new(),
            memory: Semaphore::new(settings.buffer_bytes as usize),
        }
    }

    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    pub fn partition_count(&self) -> u32 {
        self.partition_count
    }

    pub fn stream(&self) -> &StreamName {
        &self.stream
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Buffers a record; waits while the buffer is full.
    pub async fn send(&self, record: ProducerRecord) -> Result<Delivery, Error> {
        let headers = header_refs(&record);
        let fields = record_fields(&record, &headers, now_ms)?;
        let reserved = self.check(&record, fields.len())?;
        self.reserve(reserved).await?;
        let pushed = {
            let mut state = self.lock();
            if state.closing {
                Err(Error::Closed)
            } else {
                state
                    .push(&record, fields, reserved)
                    .map(|(outcome, index, wake)| (Delivery::new(outcome.clone(), index), wake))
            }
        };
        match pushed {
            Ok((delivery, wake)) => {
                if wake {
                    self.wake.notify_one();
                }
                Ok(delivery)
            }
            Err(e) => {
                self.memory.add_permits(reserved as usize);
                Err(e)
            }
        }
    }

    /// Buffers `records` in order, as many [`Shared::send`] calls would, with one clock read,
    /// one buffer reservation and one lock for each share of them that fits the buffer.
    /// Every record is checked before any is buffered: one that cannot be sent fails the call
    /// and buffers nothing.
    pub async fn send_all(&self, records: &[ProducerRecord]) -> Result<Deliveries, Error> {
        let now = now_ms();
        let mut sizes = Vec::with_capacity(records.len());
        for record in records {
            let headers = header_refs(record);
            let len = record_fields(record, &headers, || now)?.len();
            sizes.push(self.check(record, len)?);
        }
        let mut deliveries = Deliveries::with_capacity(records.len());
        let mut start = 0;
        while start < records.len() {
            // As many records as the buffer can hold at once, at least one.
            let mut end = start;
            let mut reserved: u32 = 0;
            while let Some(&size) = sizes.get(end) {
                if end > start
                    && u64::from(reserved) + u64::from(size) > u64::from(self.settings.buffer_bytes)
                {
                    break;
                }
                reserved += size;
                end += 1;
            }
            self.reserve(reserved).await?;
            let mut wake = false;
            let mut state = self.lock();
            if state.closing {
                drop(state);
                self.memory.add_permits(reserved as usize);
                return Err(Error::Closed);
            }
            for (record, &size) in records[start..end].iter().zip(&sizes[start..end]) {
                let headers = header_refs(record);
                let pushed = record_fields(record, &headers, || now)
                    .and_then(|fields| state.push(record, fields, size));
                match pushed {
                    Ok((outcome, index, opened)) => {
                        deliveries.push(outcome, index);
                        wake |= opened;
                        reserved -= size;
                    }
                    Err(e) => {
                        // Checked above, so only a timestamp too far from its batch's first
                        // gets here. The records before it are buffered and will be sent.
                        drop(state);
                        self.memory.add_permits(reserved as usize);
                        if wake {
                            self.wake.notify_one();
                        }
                        return Err(e);
                    }
                }
            }
            drop(state);
            if wake {
                self.wake.notify_one();
            }
            start = end;
        }
        Ok(deliveries)
    }

    /// Checks that `record`, of `record_len` bytes in a batch, can be sent; returns the
    /// buffer bytes it holds until it is done.
    #[inline]
    fn check(&self, record: &ProducerRecord, record_len: usize) -> Result<u32, Error> {
        if HEADER_LEN + record_len > self.settings.max_batch_bytes {
            return Err(Error::InvalidRecord(
                floe_wire::batch::BuildError::TooLarge {
                    would_be: HEADER_LEN + record_len,
                    limit: self.settings.max_batch_bytes,
                },
            ));
        }
        if let Some(partition) = record.partition.filter(|p| p.get() >= self.partition_count) {
            return Err(Error::NoSuchPartition {
                stream: self.stream.to_string(),
                partition: partition.get(),
                partition_count: self.partition_count,
            });
        }
        Ok(u32::try_from(record_len)
            .unwrap_or(u32::MAX)
            .min(self.settings.buffer_bytes))
    }

    /// Takes `bytes` of the buffer, waiting while it is full.
    async fn reserve(&self, bytes: u32) -> Result<(), Error> {
        // Room in the buffer is the common case: take it without building a waiting future.
        match self.memory.try_acquire_many(bytes) {
            Ok(permit) => permit.forget(),
            Err(tokio::sync::TryAcquireError::Closed) => return Err(Error::Closed),
            Err(tokio::sync::TryAcquireError::NoPermits) => self
                .memory
                .acquire_many(bytes)
                .await
                .map_err(|_| Error::Closed)?
                .forget(),
        }
        Ok(())
    }

    /// Sends every buffered batch now and waits until each is done; the first error, if
    /// any batch failed.
    pub async fn flush(&self) -> Result<(), Error> {
        let outcomes: Vec<Arc<BatchOutcome>> = {
            let mut state = self.lock();
            let mut outcomes = Vec::new();
            for partition in &mut state.partitions {
                partition.accumulator.seal_all();
                outcomes.extend(
                    partition
                        .accumulator
                        .attachments()
                        .map(|h| h.outcome.clone()),
                );
                outcomes.extend(partition.window.attachments().map(|h| h.outcome.clone()));
            }
            outcomes
        };
        self.wake.notify_one();
        let mut first_error = None;
        for outcome in outcomes {
            if let Err(e) = Delivery::new(outcome, 0).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Refuses further sends; the task sends what is buffered, then stops.
    pub fn close(&self) {
        self.lock().closing = true;
        self.wake.notify_one();
    }

    /// Decides what to send now. Returns the requests, when to look again, and whether the
    /// producer is closed and drained.
    fn plan(&self, now: Instant) -> (Vec<Outgoing>, Option<Instant>, bool) {
        let mut state = self.lock();
        let closing = state.closing;
        let mut outgoing = Vec::new();
        let mut failed = Vec::new();
        let mut deadline: Option<Instant> = None;
        let mut drained = true;
        for (index, partition) in state.partitions.iter_mut().enumerate() {
            if closing {
                partition.accumulator.seal_all();
            }
            let (request, blocked) =
                partition.next_request(now, self.producer_id, &self.settings, &mut failed);
            if let Some((sequences, batches)) = request {
                outgoing.push(Outgoing {
                    partition: index as u32,
                    sequences,
                    batches,
                });
            }
            let mut wake_at = partition.window.next_deadline();
            if !blocked && partition.window.room() > 0 {
                wake_at = earliest(wake_at, partition.accumulator.next_deadline());
            }
            deadline = earliest(deadline, wake_at);
            drained &= partition.accumulator.is_empty() && partition.window.is_idle();
        }
        drop(state);
        self.finish(failed, now);
        (outgoing, deadline, closing && drained)
    }

    /// Feeds a request's answer to its partition's window and completes what is done.
    fn answer(&self, answer: Answer) {
        let now = Instant::now();
        match &answer.outcome {
            Err(error) => {
                tracing::debug!(partition = answer.partition, %error, "produce request failed");
            }
            Ok(results) => {
                if let Some(code) = results.iter().find_map(|r| r.err()) {
                    tracing::debug!(partition = answer.partition, %code, sequences = ?answer.sequences, ?results, "produce refused");
                }
            }
        }
        let done = {
            let mut state = self.lock();
            match state.partitions.get_mut(answer.partition as usize) {
                Some(partition) => {
                    partition
                        .window
                        .on_results(&answer.sequences, answer.outcome, now)
                }
                None => Vec::new(),
            }
        };
        self.finish(done, now);
    }

    fn finish(&self, done: Vec<Completion<BatchHandle>>, now: Instant) {
        for (handle, result) in done {
            handle.outcome.complete(result, now);
            self.memory.add_permits(handle.reserved as usize);
        }
    }
}

impl State {
    /// Places a record in its partition's accumulator. Returns its batch's outcome, its
    /// index in the batch, and whether the task must look (a batch opened, so a linger timer
    /// starts, or one is full).
    fn push(
        &mut self,
        record: &ProducerRecord,
        fields: RecordFields<'_>,
        reserved: u32,
    ) -> Result<(&Arc<BatchOutcome>, u32, bool), Error> {
        let partition = match (record.partition, &record.key) {
            (Some(partition), _) => partition,
            (None, Some(key)) => self.partitioner.choose(Some(key)),
            (None, None) => {
                let partitions = &self.partitions;
                let record_len = fields.len();
                self.partitioner.choose_keyless(|p| {
                    partitions
                        .get(p.get() as usize)
                        .is_some_and(|state| state.accumulator.fits(record_len))
                })
            }
        };
        let partition_count = self.partitions.len() as u32;
        let state = self
            .partitions
            .get_mut(partition.get() as usize)
            .ok_or_else(|| Error::NoSuchPartition {
                stream: String::new(),
                partition: partition.get(),
                partition_count,
            })?;
        let pushed = state
            .accumulator
            .push(fields, Instant::now, BatchHandle::default)?;
        pushed.attachment.reserved += reserved;
        Ok((
            &pushed.attachment.outcome,
            pushed.index,
            pushed.opened || pushed.ready,
        ))
    }
}

/// Batches per `Produce` request. One: the window's batches then travel as separate,
/// pipelined requests, so the broker appends and syncs the first while the next ones arrive.
/// (Several batches per request left one request in flight: transfer, append and sync took
/// turns, and publishing reached about half the disk's sync bandwidth.)
const BATCHES_PER_REQUEST: usize = 1;

impl PartitionState {
    /// The next request for this partition: a resend while recovering, otherwise the ready
    /// batches the window has room for, numbered and encoded, as many as fit one frame.
    /// `blocked` is true when ready batches wait for something other than time.
    fn next_request(
        &mut self,
        now: Instant,
        producer_id: i64,
        settings: &Settings,
        failed: &mut Vec<Completion<BatchHandle>>,
    ) -> (Option<Request>, bool) {
        if let Some(resend) = self.window.resend(now, settings.request_bytes) {
            return (Some(resend.into_iter().unzip()), false);
        }
        let mut sequences = Vec::new();
        let mut batches: Vec<Bytes> = Vec::new();
        let mut size = 0;
        let mut blocked = false;
        while let Some(front) = self.accumulator.peek_ready(now) {
            if !batches.is_empty()
                && (size + front.len() > settings.request_bytes
                    || batches.len() >= BATCHES_PER_REQUEST)
            {
                break;
            }
            let Some((epoch, sequence)) = self.window.sequence_for(front.record_count()) else {
                blocked = self.window.room() > 0;
                break;
            };
            let Some(batch) = self.accumulator.pop_ready(now) else {
                break;
            };
            let record_count = batch.record_count();
            match batch.finish(producer_id, epoch, sequence) {
                (Ok(bytes), handle) => {
                    size += bytes.len();
                    self.window
                        .sent(sequence, record_count, bytes.clone(), handle, now);
                    sequences.push(sequence);
                    batches.push(bytes);
                }
                // Records were checked when pushed; a batch that still cannot be encoded
                // fails alone and takes no sequence number.
                (Err(e), handle) => failed.push((handle, Err(Error::InvalidRecord(e)))),
            }
        }
        if batches.is_empty() {
            return (None, blocked);
        }
        self.window.request_started();
        (Some((sequences, batches)), blocked)
    }
}

/// The background task: plans, sends, and applies answers until the producer is closed and
/// drained.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut requests: JoinSet<Answer> = JoinSet::new();
    let timeout = shared.client.config().request_timeout;
    loop {
        let (outgoing, deadline, finished) = shared.plan(Instant::now());
        for request in outgoing {
            // Streams are opened here, one after another, in the order the requests were
            // planned: the broker appends a connection's produce requests in stream order,
            // so pipelined requests of one partition land in sequence order. The exchanges
            // then run concurrently.
            let partition = PartitionId::new(request.partition);
            let (leader, opened) = open_at_leader(&shared, partition, timeout).await;
            requests.spawn(produce(
                leader,
                opened,
                shared.stream.clone(),
                request,
                timeout,
            ));
        }
        if finished && requests.is_empty() {
            break;
        }
        tokio::select! {
            () = shared.wake.notified() => {}
            Some(joined) = requests.join_next(), if !requests.is_empty() => match joined {
                Ok(answer) => shared.answer(answer),
                Err(e) => tracing::error!(error = %e, "a produce request task failed"),
            },
            () = sleep_until(deadline) => {}
        }
    }
}

/// Opens a request at the leader of `partition` (looking it up if needed), waiting at most
/// [`ROUTED_OPEN_WAIT`] so that a dead leader holds up the other partitions only briefly.
async fn open_at_leader(
    shared: &Shared,
    partition: PartitionId,
    timeout: Duration,
) -> (Option<Client>, Result<OpenRequest, Error>) {
    let leader = match shared.client.for_partition(&shared.stream, partition).await {
        Ok(leader) => leader,
        Err(e) => return (None, Err(e)),
    };
    let opened = match tokio::time::timeout(ROUTED_OPEN_WAIT, leader.open_request(timeout)).await {
        Ok(opened) => opened,
        Err(_) => Err(Error::Timeout {
            operation: "connecting to the partition's leader",
            after: ROUTED_OPEN_WAIT,
        }),
    };
    (Some(leader), opened)
}

async fn produce(
    leader: Option<Client>,
    opened: Result<OpenRequest, Error>,
    stream: StreamName,
    request: Outgoing,
    timeout: Duration,
) -> Answer {
    let partition = PartitionId::new(request.partition);
    let message = Message::Produce(Produce {
        stream: stream.clone(),
        partition,
        batches: request.batches,
    });
    let answer = match (opened, &leader) {
        (Ok(opened), Some(leader)) => {
            let exchange = opened.exchange(&message, timeout);
            leader
                .watch_leader(&stream, partition, exchange, STALL)
                .await
        }
        (Ok(opened), None) => opened.exchange(&message, timeout).await,
        (Err(e), _) => Err(e),
    };
    if let Some(leader) = &leader {
        let refused = match &answer {
            Ok(Message::ProduceAck(ack)) => ack.results.contains(&Err(ErrorCode::NotLeader)),
            Ok(_) => false,
            Err(e) => points_elsewhere(e),
        };
        if refused {
            leader.forget_leader(&stream, partition);
        }
    }
    let outcome = match answer {
        Ok(Message::ProduceAck(ack)) => Ok(ack.results),
        Ok(_) => Err(ProtocolViolation::UnexpectedResponse {
            request: "Produce",
            found: "another message",
        }
        .into()),
        Err(e) => Err(e),
    };
    Answer {
        partition: request.partition,
        sequences: request.sequences,
        outcome,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A record's headers, borrowed (no allocation for a record without any).
#[inline]
fn header_refs(record: &ProducerRecord) -> Vec<(&str, &[u8])> {
    if record.headers.is_empty() {
        return Vec::new(); // most records: no iterator to drive, nothing to allocate
    }
    record
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_ref()))
        .collect()
}

/// A record's fields as a batch stores them, checked and measured; `now` gives the
/// timestamp of one without.
fn record_fields<'a>(
    record: &'a ProducerRecord,
    headers: &'a [(&'a str, &'a [u8])],
    now: impl FnOnce() -> i64,
) -> Result<RecordFields<'a>, Error> {
    RecordFields::new(
        record.timestamp.unwrap_or_else(now),
        record.key.as_deref(),
        &record.value,
        headers,
    )
    .map_err(Error::InvalidRecord)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

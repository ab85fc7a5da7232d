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

use super::accumulator::{Accumulator, Run};
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
        Shared {
            client,
            stream,
            partition_count,
            producer_id,
            settings,
            state: Mutex::new(State::new(partition_count, &settings, producer_id as u32)),
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
        let fields = record_fields(&record, now_ms)?;
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
        let mut total: u64 = 0;
        for record in records {
            let len = fields_of(record, now).map_err(Error::InvalidRecord)?.len();
            total += u64::from(self.check(record, len)?);
        }
        let mut deliveries = Deliveries::with_capacity(records.len());
        let mut start = 0;
        while start < records.len() {
            // As many records as the buffer can hold at once, at least one: all of them
            // unless the call holds more than the whole buffer.
            let (end, reserved) = match u32::try_from(total) {
                Ok(total) if start == 0 && total <= self.settings.buffer_bytes => {
                    (records.len(), total)
                }
                _ => self.share(records, start, now),
            };
            self.reserve(reserved).await?;
            let mut state = self.lock();
            if state.closing {
                drop(state);
                self.memory.add_permits(reserved as usize);
                return Err(Error::Closed);
            }
            let placed = state.place(
                &records[start..end],
                now,
                self.settings.buffer_bytes,
                &mut deliveries,
            );
            drop(state);
            // Only when a record failed (checked above, so only a timestamp too far from its
            // batch's first): the records before it are buffered and will be sent.
            if placed.reserved < reserved {
                self.memory
                    .add_permits((reserved - placed.reserved) as usize);
            }
            if placed.wake {
                self.wake.notify_one();
            }
            if let Some(error) = placed.error {
                return Err(error);
            }
            start = end;
        }
        Ok(deliveries)
    }

    /// The records from `start` on that the buffer can hold at once (at least one): where
    /// they end, and the buffer bytes they take. For a call larger than the whole buffer.
    fn share(&self, records: &[ProducerRecord], start: usize, now: i64) -> (usize, u32) {
        let mut end = start;
        let mut reserved: u32 = 0;
        while let Some(record) = records.get(end) {
            // Checked by the caller: every record has fields.
            let len = record_fields(record, || now).map_or(0, |f| f.len());
            let size = reserved_for(len, self.settings.buffer_bytes);
            if end > start
                && u64::from(reserved) + u64::from(size) > u64::from(self.settings.buffer_bytes)
            {
                break;
            }
            reserved += size;
            end += 1;
        }
        (end, reserved)
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
        Ok(reserved_for(record_len, self.settings.buffer_bytes))
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

/// What [`State::place`] did.
#[derive(Debug)]
struct Placed {
    /// Buffer bytes the placed records hold.
    reserved: u32,
    /// The task must look: a batch opened (a linger timer starts) or filled.
    wake: bool,
    /// Why the records after the placed ones were not placed.
    error: Option<Error>,
}

impl State {
    /// Empty accumulators and send windows for `partition_count` partitions; `sticky_start`
    /// is where keyless records start.
    fn new(partition_count: u32, settings: &Settings, sticky_start: u32) -> State {
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
        State {
            partitions,
            partitioner: Partitioner::new(partition_count, sticky_start),
            closing: false,
        }
    }

    /// Places a record in its partition's accumulator. Returns its batch's outcome, its
    /// index in the batch, and whether the task must look (a batch opened, so a linger timer
    /// starts, or one is full).
    fn push(
        &mut self,
        record: &ProducerRecord,
        fields: RecordFields<'_, (String, Bytes)>,
        reserved: u32,
    ) -> Result<(&Arc<BatchOutcome>, u32, bool), Error> {
        let partition = self.partition_for(record, fields.len());
        let pushed = self.partition_mut(partition)?.accumulator.push(
            fields,
            Instant::now,
            BatchHandle::default,
        )?;
        pushed.attachment.reserved += reserved;
        Ok((
            &pushed.attachment.outcome,
            pushed.index,
            pushed.opened || pushed.ready,
        ))
    }

    /// Places `records`, checked by [`Shared::check`], in order, as [`State::push`] would
    /// one by one, and adds them to `deliveries`. Consecutive records bound for the same
    /// batch go in as one run: one partition choice and batch lookup, one delivery entry.
    /// Stops at the first record that fails, keeping the ones before it.
    fn place(
        &mut self,
        records: &[ProducerRecord],
        now_ms: i64,
        buffer_bytes: u32,
        deliveries: &mut Deliveries,
    ) -> Placed {
        let mut placed = Placed {
            reserved: 0,
            wake: false,
            error: None,
        };
        let mut next = 0;
        while let Some(record) = records.get(next) {
            let fields = match record_fields(record, || now_ms) {
                Ok(fields) => fields,
                Err(error) => {
                    placed.error = Some(error);
                    break;
                }
            };
            let partition = self.partition_for(record, fields.len());
            let State {
                partitions,
                partitioner,
                ..
            } = &mut *self;
            let run = partition_mut(partitions, partition).and_then(|state| {
                state
                    .accumulator
                    .push_run(fields, Instant::now, BatchHandle::default)
                    .map_err(Error::InvalidRecord)
            });
            let mut run = match run {
                Ok(run) => run,
                Err(error) => {
                    placed.error = Some(error);
                    break;
                }
            };
            next += 1;
            let (taken, reserved, error) = extend_run(
                &mut run,
                partitioner,
                partition,
                &records[next..],
                now_ms,
                buffer_bytes,
            );
            next += taken;
            let reserved = reserved + reserved_for(fields.len(), buffer_bytes);
            placed.error = error;
            let pushed = run.finish();
            pushed.attachment.reserved += reserved;
            deliveries.push(&pushed.attachment.outcome, pushed.index, pushed.count);
            placed.wake |= pushed.opened || pushed.ready;
            placed.reserved += reserved;
            if placed.error.is_some() {
                break;
            }
        }
        placed
    }

    /// The partition a record goes to: its own, its key's, or for a keyless one the sticky
    /// partition while that one's open batch has room for its `record_len` bytes.
    fn partition_for(&mut self, record: &ProducerRecord, record_len: usize) -> PartitionId {
        match (record.partition, &record.key) {
            (Some(partition), _) => partition,
            (None, Some(key)) => self.partitioner.choose(Some(key)),
            (None, None) => {
                let partitions = &self.partitions;
                self.partitioner.choose_keyless(|p| {
                    partitions
                        .get(p.get() as usize)
                        .is_some_and(|state| state.accumulator.fits(record_len))
                })
            }
        }
    }

    fn partition_mut(&mut self, partition: PartitionId) -> Result<&mut PartitionState, Error> {
        partition_mut(&mut self.partitions, partition)
    }
}

fn partition_mut(
    partitions: &mut [PartitionState],
    partition: PartitionId,
) -> Result<&mut PartitionState, Error> {
    let partition_count = partitions.len() as u32;
    partitions
        .get_mut(partition.get() as usize)
        .ok_or_else(|| Error::NoSuchPartition {
            stream: String::new(),
            partition: partition.get(),
            partition_count,
        })
}

/// The records at the start of `records` that follow the ones in `run` into its batch: they
/// go to the same partition and the batch has room for them. Returns how many joined, the
/// buffer bytes they hold, and the error that stopped the run, if any.
fn extend_run(
    run: &mut Run<'_, BatchHandle>,
    partitioner: &Partitioner,
    partition: PartitionId,
    records: &[ProducerRecord],
    now_ms: i64,
    buffer_bytes: u32,
) -> (usize, u32, Option<Error>) {
    let mut reserved = 0;
    for (taken, record) in records.iter().enumerate() {
        if !partitioner.goes_to(record.partition, record.key.as_deref(), partition) {
            return (taken, reserved, None);
        }
        let pushed = fields_of(record, now_ms)
            .and_then(|fields| Ok(run.push(&fields)?.then_some(fields.len())));
        match pushed {
            Ok(Some(len)) => reserved += reserved_for(len, buffer_bytes),
            Ok(None) => return (taken, reserved, None),
            Err(error) => return (taken, reserved, Some(Error::InvalidRecord(error))),
        }
    }
    (records.len(), reserved, None)
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

/// The buffer bytes a record of `record_len` bytes in a batch holds until it is done.
#[inline]
fn reserved_for(record_len: usize, buffer_bytes: u32) -> u32 {
    u32::try_from(record_len)
        .unwrap_or(u32::MAX)
        .min(buffer_bytes)
}

/// A record's fields as a batch stores them, checked and measured; `now` gives the
/// timestamp of one without.
#[inline]
fn record_fields(
    record: &ProducerRecord,
    now: impl FnOnce() -> i64,
) -> Result<RecordFields<'_, (String, Bytes)>, Error> {
    fields_of(record, record.timestamp.unwrap_or_else(now)).map_err(Error::InvalidRecord)
}

/// [`record_fields`], for a record known to have a timestamp or taking `now_ms`.
#[inline]
fn fields_of(
    record: &ProducerRecord,
    now_ms: i64,
) -> Result<RecordFields<'_, (String, Bytes)>, floe_wire::batch::BuildError> {
    RecordFields::new(
        record.timestamp.unwrap_or(now_ms),
        record.key.as_deref(),
        &record.value,
        &record.headers,
    )
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::super::config::TEST_LIMITS as LIMITS;
    use super::*;
    use crate::ProducerConfig;

    /// Every buffered batch of every partition, encoded, with the buffer bytes it holds.
    fn drain(state: &mut State) -> Vec<Vec<(Bytes, u32)>> {
        let now = Instant::now();
        state
            .partitions
            .iter_mut()
            .map(|partition| {
                partition.accumulator.seal_all();
                std::iter::from_fn(|| partition.accumulator.pop_ready(now))
                    .map(|batch| {
                        let (bytes, handle) = batch.finish(7, 0, 0);
                        (bytes.expect("a batch"), handle.reserved)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn records_placed_in_runs_make_the_batches_one_by_one_pushes_make() {
        let config = ProducerConfig {
            max_batch_bytes: 2_000,
            ..ProducerConfig::default()
        };
        let settings = Settings::resolve(&config, &LIMITS).expect("valid");
        // Keyless runs that fill batches and move on, keyed and explicit records between
        // them, one with headers and one with its own timestamp.
        let records: Vec<ProducerRecord> = (0..200u32)
            .map(|i| {
                let record = ProducerRecord::new(vec![i as u8; 90 + (i as usize % 7) * 20]);
                match i % 23 {
                    5 => record.with_key(format!("key-{i}")),
                    9 => record.with_partition(PartitionId::new(i % 3)),
                    13 => record.with_header("trace", "abc"),
                    17 => record.with_timestamp(1_700_000_000_123),
                    _ => record,
                }
            })
            .collect();
        let now_ms = 1_700_000_000_000;
        let mut one_by_one = State::new(3, &settings, 1);
        for record in &records {
            let fields = fields_of(record, now_ms).expect("valid");
            let reserved = reserved_for(fields.len(), settings.buffer_bytes);
            one_by_one.push(record, fields, reserved).expect("placed");
        }
        let mut in_runs = State::new(3, &settings, 1);
        let mut deliveries = Deliveries::with_capacity(records.len());
        let placed = in_runs.place(&records, now_ms, settings.buffer_bytes, &mut deliveries);
        assert!(placed.error.is_none());
        assert_eq!(deliveries.len(), records.len());
        let batches = drain(&mut in_runs);
        assert_eq!(batches, drain(&mut one_by_one));
        assert!(
            batches.iter().map(Vec::len).sum::<usize>() > 10,
            "the records filled several batches"
        );
        let total: u32 = batches.iter().flatten().map(|(_, reserved)| reserved).sum();
        assert_eq!(placed.reserved, total);
    }
}

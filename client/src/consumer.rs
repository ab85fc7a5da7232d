//! The consumer: reads one partition from a position, in order, with long-polling fetches,
//! and survives lost connections without a gap or a duplicate.

mod decode;

use std::collections::VecDeque;
use std::time::Duration;

use floe_wire::frame::{FetchPosition, FetchResponse, Message};
use floe_wire::{Backoff, Jitter, Offset, PartitionId, StreamName};

use crate::client::{Client, fetch_request};
use crate::error::{Error, ProtocolViolation};
use crate::record::ConsumedRecord;
use decode::{Skip, decode_fetched};

/// How late past its long-poll wait a fetch may be before the consumer asks whether the
/// partition's leader moved.
const STALL: Duration = Duration::from_secs(1);

/// How late past its long-poll wait a read replica's answer may be before the consumer
/// reads elsewhere.
const READ_REPLICA_GRACE: Duration = Duration::from_secs(3);

/// How a [`Consumer`] fetches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// How long the broker may hold a fetch at the tail of the log waiting for records.
    pub max_wait: Duration,
    /// Soft cap on the bytes of one fetch (the broker returns at least one whole batch).
    pub max_bytes: u32,
    /// Consecutive retryable failures of a fetch before [`Consumer::next`] fails.
    pub max_retries: u32,
    /// The longest wait before the first retry; it doubles per retry up to
    /// `retry_backoff_max`. Each wait is random below it ([`floe_wire::Backoff`]), and never
    /// shorter than a broker's `retry after`.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Read from the cluster's read replicas while any are live (the client must know the
    /// controlplane: [`ClientConfig::controlplane`](crate::ClientConfig::controlplane)), so
    /// that history readers do not load the brokers; otherwise, and when none is live, from
    /// the partition's leader. Positions carry over, so a move between them loses nothing.
    pub read_from_read_replicas: bool,
    /// After a fetch that came back at least half full (the consumer is behind the tail),
    /// send the next one at once, so that the broker reads and sends it while the
    /// application handles this one. At most one such fetch per consumer; an answer that is
    /// empty or failed is dropped and the fetch made again as usual.
    pub read_ahead: bool,
}

impl Default for ConsumerConfig {
    fn default() -> ConsumerConfig {
        ConsumerConfig {
            max_wait: Duration::from_secs(5),
            max_bytes: 4 * 1024 * 1024,
            max_retries: 10,
            retry_backoff: Duration::from_millis(50),
            retry_backoff_max: Duration::from_secs(2),
            read_from_read_replicas: true,
            read_ahead: true,
        }
    }
}

/// A fetch sent before it was needed ([`ConsumerConfig::read_ahead`]): where it starts, and
/// the task that makes it.
#[derive(Debug)]
struct Ahead {
    from: Offset,
    task: tokio::task::JoinHandle<Result<FetchResponse, Error>>,
}

/// Reads the records of one partition, in offset order.
///
/// It starts at a [`FetchPosition`]: an offset, the earliest or the latest offset, or the
/// first record at or after a time. Each fetch may wait at the broker (`max_wait`) for
/// records to arrive, so following the tail costs no busy polling. Every fetched batch is
/// validated before its records are handed out; records before the position inside the
/// first batch are skipped. The consumer remembers the offset after the last record it
/// received, so that after a lost connection or a retryable error it resumes exactly there:
/// no gap, no duplicate.
///
/// ```no_run
/// use floe_client::{Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition};
/// use floe_client::{PartitionId, StreamName};
///
/// # async fn demo() -> Result<(), floe_client::Error> {
/// let client = Client::connect(ClientConfig::from_default_profile()?).await?;
/// let stream = StreamName::new("orders").expect("a valid name");
/// let mut consumer = Consumer::new(
///     client,
///     stream,
///     PartitionId::new(0),
///     FetchPosition::Earliest,
///     ConsumerConfig::default(),
/// );
/// loop {
///     let record = consumer.next().await?;
///     println!("{}: {:?}", record.offset, record.value);
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Consumer {
    client: Client,
    stream: StreamName,
    partition: PartitionId,
    config: ConsumerConfig,
    /// Where reading starts, until the first fetch resolves it to an offset.
    start: FetchPosition,
    /// The offset after the last record fetched: where the next fetch starts.
    next_fetch: Option<Offset>,
    /// Fetched records not yet handed out.
    buffered: VecDeque<ConsumedRecord>,
    fetches: u64,
    ahead: Option<Ahead>,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            ahead.task.abort();
        }
    }
}

impl Consumer {
    /// A consumer of `partition` of `stream` from `position`. Nothing is sent until the
    /// first [`Consumer::next`] or [`Consumer::resolve_position`].
    pub fn new(
        client: Client,
        stream: StreamName,
        partition: PartitionId,
        position: FetchPosition,
        config: ConsumerConfig,
    ) -> Consumer {
        Consumer {
            client,
            stream,
            partition,
            config,
            start: position,
            next_fetch: match position {
                FetchPosition::Offset(offset) => Some(offset),
                FetchPosition::Earliest | FetchPosition::Latest | FetchPosition::Timestamp(_) => {
                    None
                }
            },
            buffered: VecDeque::new(),
            fetches: 0,
            ahead: None,
        }
    }

    /// The next record, waiting (long-polling) as long as it takes for one to arrive.
    /// Cancelling the call loses nothing.
    pub async fn next(&mut self) -> Result<ConsumedRecord, Error> {
        loop {
            if let Some(record) = self.buffered.pop_front() {
                return Ok(record);
            }
            self.fetch(self.config.max_wait).await?;
        }
    }

    /// Fetches once if nothing is buffered, waiting at most `max_wait` at the broker, and
    /// returns the next record if there is one by then.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Option<ConsumedRecord>, Error> {
        if self.buffered.is_empty() {
            self.fetch(max_wait).await?;
        }
        Ok(self.buffered.pop_front())
    }

    /// Resolves the start position to an offset (asking the broker, without waiting, if it
    /// is not an offset yet) and returns the offset of the next record this consumer will
    /// hand out. After it returns, records published later are sure to be read — what a
    /// consumer from [`FetchPosition::Latest`] needs before it lets others publish.
    pub async fn resolve_position(&mut self) -> Result<Offset, Error> {
        if self.next_fetch.is_none() {
            self.fetch(Duration::ZERO).await?;
        }
        match (self.buffered.front(), self.next_fetch) {
            (Some(record), _) => Ok(record.offset),
            (None, Some(offset)) => Ok(offset),
            (None, None) => {
                Err(ProtocolViolation::Read("the fetch resolved no position".into()).into())
            }
        }
    }

    /// The offset of the next record [`Consumer::next`] returns, once known.
    pub fn position(&self) -> Option<Offset> {
        self.buffered
            .front()
            .map(|record| record.offset)
            .or(self.next_fetch)
    }

    /// Moves to another position; buffered records are dropped.
    pub fn seek(&mut self, position: FetchPosition) {
        *self = Consumer::new(
            self.client.clone(),
            self.stream.clone(),
            self.partition,
            position,
            self.config.clone(),
        );
    }

    /// Fetches answered so far (for tests and metrics).
    pub fn fetch_count(&self) -> u64 {
        self.fetches
    }

    /// The partition read.
    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    /// One fetch from the current position, retried on retryable errors. Nothing changes
    /// unless it succeeds, so a cancelled or failed fetch loses nothing (a read-ahead taken
    /// for it is then simply made again).
    async fn fetch(&mut self, max_wait: Duration) -> Result<(), Error> {
        let position = self.next_fetch.map_or(self.start, FetchPosition::Offset);
        let ahead = match self.ahead.take() {
            Some(mut ahead) if Some(ahead.from) == self.next_fetch => {
                // Waits no longer than the caller's own fetch would have.
                let patience = max_wait + self.client.config().request_timeout;
                match tokio::time::timeout(patience, &mut ahead.task).await {
                    // An empty answer does not stand for the long poll the caller asked for.
                    Ok(Ok(Ok(response))) if !response.records.is_empty() => Some(response),
                    Ok(_) => None,
                    Err(_) => {
                        // Still waiting at the tail: keep it for the next call.
                        self.ahead = Some(ahead);
                        return Ok(());
                    }
                }
            }
            Some(stale) => {
                stale.task.abort();
                None
            }
            None => None,
        };
        let response = match ahead {
            Some(response) => response,
            None => {
                fetch_once(
                    &self.client,
                    &self.stream,
                    self.partition,
                    &self.config,
                    position,
                    max_wait,
                )
                .await?
            }
        };
        self.fetches += 1;
        // The next fetch leaves before this answer is checked and decoded, so the broker
        // reads and sends it meanwhile. It starts where the broker says this answer ends; it
        // is used only if that is where decoding leaves the position (it is dropped as stale
        // otherwise, and after a decoding error, which leaves the position unchanged).
        // Behind: the answer stopped short of what is committed (a tiered answer ends at
        // its chunk's end, whatever `max_bytes` allowed), or it was large.
        let behind = response.next_offset < response.high_watermark
            || response.records.len() as u64 >= u64::from(self.config.max_bytes) / 2;
        if self.config.read_ahead && behind {
            self.read_ahead(response.next_offset);
        }
        let skip = match (self.next_fetch, self.start) {
            (Some(offset), _) => Skip::Below(offset),
            (None, FetchPosition::Timestamp(ms)) => Skip::BeforeTime(ms),
            (None, _) => Skip::Nothing,
        };
        let after = decode_fetched(&response.records, self.partition, skip, &mut self.buffered)?;
        self.next_fetch = Some(match (after, self.next_fetch) {
            (Some(after), Some(current)) => after.max(current),
            (Some(after), None) => after,
            (None, Some(current)) => current,
            (None, None) => response.next_offset,
        });
        Ok(())
    }

    /// Sends the fetch from `from` now, to be taken by the next [`Consumer::fetch`] that
    /// starts there.
    fn read_ahead(&mut self, from: Offset) {
        if let Some(stale) = self.ahead.take() {
            stale.task.abort();
        }
        let (client, stream, partition, config) = (
            self.client.clone(),
            self.stream.clone(),
            self.partition,
            self.config.clone(),
        );
        // With the usual wait: a read replica answers a fetch that may not wait by relaying
        // it to the leader when its own follower has not caught up yet.
        let task = tokio::spawn(async move {
            let position = FetchPosition::Offset(from);
            let wait = config.max_wait;
            fetch_once(&client, &stream, partition, &config, position, wait).await
        });
        self.ahead = Some(Ahead { from, task });
    }
}

/// One fetch of `partition` from `position`, from a read replica or the leader, retried on
/// retryable errors.
async fn fetch_once(
    client: &Client,
    stream: &StreamName,
    partition: PartitionId,
    config: &ConsumerConfig,
    position: FetchPosition,
    max_wait: Duration,
) -> Result<FetchResponse, Error> {
    let request = fetch_request(stream, partition, position, config.max_bytes, max_wait);
    let timeout = max_wait + client.config().request_timeout;
    let backoff = Backoff {
        initial: config.retry_backoff,
        max: config.retry_backoff_max,
    };
    let mut jitter = Jitter::unpredictable();
    let mut retries = 0;
    loop {
        let read_replica = match config.read_from_read_replicas {
            true => client.read_replica_for(stream, partition).await,
            false => None,
        };
        let answer = match read_replica {
            // A read replica answers within the wait (it relays what it cannot serve).
            Some(read_replica) => {
                read_replica
                    .request_read_replica(&request, max_wait + READ_REPLICA_GRACE)
                    .await
            }
            None => {
                client
                    .request_partition(stream, partition, &request, timeout, max_wait + STALL)
                    .await
            }
        };
        match answer {
            Ok(Message::FetchResponse(response)) => return Ok(response),
            Ok(_) => {
                return Err(ProtocolViolation::UnexpectedResponse {
                    request: "Fetch",
                    found: "another message",
                }
                .into());
            }
            Err(e) if e.is_retryable() && retries < config.max_retries => {
                tracing::debug!(error = %e, retries, "fetch failed; retrying");
                let wait = backoff.delay(retries, jitter.draw());
                tokio::time::sleep(e.retry_after().map_or(wait, |hint| wait.max(hint))).await;
                retries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

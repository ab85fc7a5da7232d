//! The idempotent producer: batches records per partition, keeps several batches in flight,
//! retries what can be retried without losing order or duplicating, and tells each record
//! its offset.
//!
//! Layers: [`partitioner`] (which partition), [`accumulator`] (batching and linger),
//! [`window`] (sequences, in-flight bookkeeping, recovery) are pure; [`sender`] is the shell
//! that runs them with a background task.

mod accumulator;
mod config;
mod delivery;
mod partitioner;
mod sender;
mod window;

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use floe_wire::StreamName;
use tokio::task::JoinHandle;

pub use config::{DEFAULT_IN_FLIGHT_BATCHES, MAX_IN_FLIGHT_BATCHES, ProducerConfig};
pub use delivery::{Deliveries, Delivery, TimedDeliveries, TimedDelivery};
pub use partitioner::partition_for_key;

use crate::client::Client;
use crate::error::Error;
use crate::record::ProducerRecord;
use config::Settings;
use sender::Shared;

/// Publishes records to one stream.
///
/// - **Batching.** Records for a partition share a batch until it reaches `max_batch_bytes`
///   or has waited `linger`; batches are never larger than the broker accepts.
/// - **Ordering and idempotence.** The producer has a random id; each batch carries the
///   sequence number of its first record per partition. Up to `max_in_flight` batches per
///   partition are unacknowledged at once. When any of them fails with a retryable error
///   (a transient broker condition, a timeout, a lost connection), the producer stops
///   sending on that partition, waits for the others to come back, and resends the same
///   bytes from the first unacknowledged batch, in order: the broker drops the copies it
///   already has and answers with their original offsets. Records are stored once, in the
///   order they were sent.
/// - **Backpressure.** `send` waits while the records buffered (waiting, in flight or
///   awaiting a retry) exceed `buffer_bytes`.
/// - **Failure.** A batch that fails for good (a fatal broker error, or retries exhausted)
///   fails its records and every later unacknowledged batch of the partition; the producer
///   then carries on under a new producer epoch.
///
/// `send` returns once the record is buffered; the [`Delivery`] it returns resolves to the
/// record's offset when its batch is acknowledged. Clones share one producer. Dropping the
/// last handle sends what is buffered in the background; [`Producer::close`] waits for it.
///
/// ```no_run
/// use floe_client::{Client, ClientConfig, Producer, ProducerConfig, ProducerRecord, StreamName};
///
/// # async fn demo() -> Result<(), floe_client::Error> {
/// let client = Client::connect(ClientConfig::from_default_profile()?).await?;
/// let stream = StreamName::new("orders").expect("a valid name");
/// let producer = Producer::new(&client, stream, ProducerConfig::default()).await?;
///
/// let delivery = producer
///     .send(ProducerRecord::new("order #1").with_key("customer-7"))
///     .await?;
/// let offset = delivery.await?;
/// println!("stored at offset {offset}");
///
/// // Pipelined: send many, then learn their fate.
/// let mut deliveries = Vec::new();
/// for i in 0..1000 {
///     deliveries.push(producer.send(ProducerRecord::new(format!("event {i}"))).await?);
/// }
/// producer.flush().await?;
/// for delivery in deliveries {
///     delivery.await?;
/// }
/// producer.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Producer {
    shared: Arc<Shared>,
    lifetime: Arc<Lifetime>,
}

/// Closes the producer when the last handle goes.
#[derive(Debug)]
struct Lifetime {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl Producer {
    /// A producer for `stream`, which must exist. Reads the stream's partition count (waiting
    /// up to [`ProducerConfig::metadata_wait`] for a stream the brokers do not know yet) and
    /// the connection's limits, and starts the background task (call from within tokio).
    pub async fn new(
        client: &Client,
        stream: StreamName,
        config: ProducerConfig,
    ) -> Result<Producer, Error> {
        let info = client
            .stream_when_known(&stream, config.metadata_wait)
            .await?;
        let limits = client.limits().await?;
        let settings = Settings::resolve(&config, &limits)?;
        let shared = Arc::new(Shared::new(
            client.clone(),
            stream,
            info.partition_count,
            settings,
            random_producer_id(),
        ));
        let task = tokio::spawn(sender::run(shared.clone()));
        Ok(Producer {
            lifetime: Arc::new(Lifetime {
                shared: shared.clone(),
                task: Mutex::new(Some(task)),
            }),
            shared,
        })
    }

    /// Buffers a record for sending; waits while the buffer is full. Fails at once for a
    /// record that cannot fit a batch or names a partition the stream does not have.
    pub async fn send(&self, record: ProducerRecord) -> Result<Delivery, Error> {
        self.shared.send(record).await
    }

    /// Buffers many records in one call, in order, as many [`Producer::send`] calls would:
    /// for applications that already hold records together, it costs one clock read, one
    /// buffer reservation and one lock per share of them that fits the buffer, and its
    /// [`Deliveries`] hold one entry per batch rather than one per record. Values are copied
    /// into their batches, so `records` may be reused once the call returns. Every record is
    /// checked first: one that cannot be sent (too large, a partition the stream does not
    /// have) fails the call and nothing is buffered. Waits while the buffer is full.
    pub async fn send_all(&self, records: &[ProducerRecord]) -> Result<Deliveries, Error> {
        self.shared.send_all(records).await
    }

    /// Sends everything buffered now and waits until every record sent before the call is
    /// acknowledged or failed. Returns the first failure, if any.
    pub async fn flush(&self) -> Result<(), Error> {
        self.shared.flush().await
    }

    /// Flushes, then stops the producer; other handles' later sends fail with
    /// [`Error::Closed`].
    pub async fn close(self) -> Result<(), Error> {
        let flushed = self.shared.flush().await;
        self.shared.close();
        let task = self
            .lifetime
            .task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
        flushed
    }

    /// The producer id stamped in every batch (random, non-negative).
    pub fn producer_id(&self) -> i64 {
        self.shared.producer_id()
    }

    /// The stream's partition count.
    pub fn partition_count(&self) -> u32 {
        self.shared.partition_count()
    }

    /// The stream this producer publishes to.
    pub fn stream(&self) -> &StreamName {
        self.shared.stream()
    }
}

/// A random non-negative producer id. The standard library's hasher keys are seeded from
/// the operating system's randomness; mixing in the time and process id makes ids distinct
/// even between producers made in the same instant by different processes.
fn random_producer_id() -> i64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    (hasher.finish() >> 1) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_non_negative_and_distinct() {
        let ids: std::collections::HashSet<i64> = (0..1000).map(|_| random_producer_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| *id >= 0));
    }
}

//! The workload: idempotent producers publishing paced records over every partition while
//! the nemesis works, each record's fate written into the [`History`].
//!
//! Two producers per round: one that lives across the whole run (its producer state must
//! survive every leader change and restart), and one made for the round. Each sends a
//! record every [`PACE`], to the partitions in turn; the value names the producer and the
//! record's place in its send order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};
use tokio::task::JoinHandle;

use crate::history::{History, RecordId};

/// Time between two sends of one producer.
const PACE: Duration = Duration::from_millis(4);
/// Bytes of each record's value (its name, then filler): enough that segments fill and
/// seal and tiering keeps busy.
const VALUE_BYTES: usize = 120;

fn producer_config() -> ProducerConfig {
    ProducerConfig {
        linger: Duration::from_millis(2),
        // Retry through any fault a cycle holds (a few seconds) and the failover after it:
        // a delivery that fails is not acknowledged, which the checks allow, but then it
        // tests nothing.
        delivery_timeout: Duration::from_secs(30),
        max_retries: 10_000,
        retry_backoff_max: Duration::from_millis(500),
        ..ProducerConfig::default()
    }
}

/// The producers and what they sent.
pub struct Workload {
    client: Client,
    stream: StreamName,
    partitions: u32,
    history: Arc<Mutex<History>>,
    /// The producer that lives across rounds, with its number and next sequence.
    lasting: Option<(Producer, u32, u64)>,
    /// Producers made so far: each gets the next number.
    made: u32,
}

/// A round under way: the senders, and the tasks awaiting their deliveries.
pub struct Round {
    stop: Arc<AtomicBool>,
    senders: Vec<JoinHandle<Sender>>,
}

/// One producer's sending task's result.
struct Sender {
    producer: Producer,
    number: u32,
    next: u64,
    deliveries: Vec<JoinHandle<()>>,
}

/// What a round's producers saw.
#[derive(Debug, Default)]
pub struct RoundOutcome {
    pub acked: u64,
    pub failed: u64,
}

impl Workload {
    pub async fn new(client: Client, stream: &str, partitions: u32) -> Workload {
        Workload {
            client,
            stream: StreamName::new(stream).expect("name"),
            partitions,
            history: Arc::new(Mutex::new(History::default())),
            lasting: None,
            made: 0,
        }
    }

    /// What was sent, and what became of it.
    pub fn history(&self) -> &Mutex<History> {
        &self.history
    }

    /// Per partition, the offset after the last acknowledged record.
    pub fn acked_ends(&self) -> Vec<u64> {
        lock(&self.history).acked_ends(self.partitions)
    }

    /// A new producer. Making one asks a broker for the stream's metadata; one killed a
    /// moment ago may still hold the client's connection (until it times out), so a
    /// retryable failure is retried, as an application would.
    async fn producer(&mut self) -> (Producer, u32) {
        self.made += 1;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match Producer::new(&self.client, self.stream.clone(), producer_config()).await {
                Ok(producer) => return (producer, self.made),
                Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    eprintln!("making a producer: {e}; trying again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot make a producer: {e}"),
            }
        }
    }

    /// Starts the round's producers sending.
    pub async fn start_round(&mut self) -> Round {
        let lasting = match self.lasting.take() {
            Some(lasting) => lasting,
            None => {
                let (producer, number) = self.producer().await;
                (producer, number, 0)
            }
        };
        let (fresh, number) = self.producer().await;
        let stop = Arc::new(AtomicBool::new(false));
        let senders = [lasting, (fresh, number, 0)]
            .into_iter()
            .map(|(producer, number, next)| {
                let sender = Sender {
                    producer,
                    number,
                    next,
                    deliveries: Vec::new(),
                };
                let (history, stop) = (self.history.clone(), stop.clone());
                let partitions = self.partitions;
                tokio::spawn(sender.run(partitions, history, stop))
            })
            .collect();
        Round { stop, senders }
    }

    /// Stops sending, waits until every record sent is acknowledged or failed, and closes
    /// the round's own producer.
    pub async fn finish_round(&mut self, round: Round) -> RoundOutcome {
        round.stop.store(true, Ordering::Relaxed);
        let mut outcome = RoundOutcome::default();
        for (i, sender) in round.senders.into_iter().enumerate() {
            let sender = sender.await.expect("a sending task");
            // Failures show in each record's delivery.
            let _ = sender.producer.flush().await;
            for delivery in sender.deliveries {
                delivery.await.expect("a delivery task");
            }
            let (acked, failed) = lock(&self.history).producer_outcome(sender.number);
            outcome.acked += acked;
            outcome.failed += failed;
            if i == 0 {
                self.lasting = Some((sender.producer, sender.number, sender.next));
            } else {
                let _ = sender.producer.close().await;
            }
        }
        lock(&self.history).forget_outcomes();
        outcome
    }

    pub async fn close(mut self) {
        if let Some((producer, _, _)) = self.lasting.take() {
            let _ = producer.close().await;
        }
    }
}

impl Sender {
    /// Sends a record every [`PACE`] until `stop`.
    async fn run(
        mut self,
        partitions: u32,
        history: Arc<Mutex<History>>,
        stop: Arc<AtomicBool>,
    ) -> Sender {
        let mut tick = tokio::time::interval(PACE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let id = RecordId {
                producer: self.number,
                sequence: self.next,
            };
            self.next += 1;
            let partition = (id.sequence % u64::from(partitions)) as u32;
            let record = ProducerRecord::new(id.value(VALUE_BYTES))
                .with_partition(PartitionId::new(partition));
            lock(&history).sent(id, partition);
            match self.producer.send(record).await {
                Ok(delivery) => {
                    let history = history.clone();
                    self.deliveries.push(tokio::spawn(async move {
                        let result = delivery.await;
                        lock(&history)
                            .delivered(id, result.map(|o| o.get()).map_err(|e| e.to_string()));
                    }));
                }
                // Not buffered, so never stored: it must not show up.
                Err(e) => lock(&history).delivered(id, Err(format!("not sent: {e}"))),
            }
        }
        self
    }
}

fn lock(history: &Mutex<History>) -> MutexGuard<'_, History> {
    history.lock().unwrap_or_else(|e| e.into_inner())
}

//! Where each partition is led, and one connection per broker: a client of a cluster sends
//! each partition's publishes and fetches to its leader, learns leaders from the brokers'
//! metadata, and forgets one when the broker refuses as not the leader or cannot be reached.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_wire::frame::{ErrorCode, Message, MetadataRequest, StreamMetadata};
use floe_wire::{LeaderEpoch, PartitionId, StreamName};
use tokio::task::JoinSet;

use super::connect::Transport;
use super::read_replicas::ReadReplicas;
use super::{Client, Connection};
use crate::config::ClientConfig;
use crate::error::Error;

/// Longest wait for one broker's metadata while looking for a leader: a broker that is down
/// must not hold up the answer of those that are up.
const METADATA_WAIT: Duration = Duration::from_secs(2);

/// `host:port` entries of a comma-separated list, trimmed, empty ones dropped.
pub(crate) fn split_endpoints(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A partition's leader as a broker named it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leader {
    endpoint: String,
    epoch: LeaderEpoch,
}

#[derive(Debug)]
pub(crate) struct Routes {
    /// The configuration every connection starts from.
    config: ClientConfig,
    transport: Arc<Transport>,
    closed: Arc<AtomicBool>,
    /// One connection per broker endpoint, made on first use.
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// Brokers to ask for metadata: the configured ones, then every leader learnt.
    known: Mutex<Vec<String>>,
    leaders: Mutex<HashMap<(StreamName, PartitionId), Leader>>,
    /// Held while asking the brokers, so that concurrent lookups share one round.
    refreshing: tokio::sync::Mutex<()>,
    /// The read replicas, when the controlplane is known.
    pub read_replicas: Option<ReadReplicas>,
}

impl Routes {
    pub fn new(config: ClientConfig, transport: Arc<Transport>, endpoints: &[String]) -> Routes {
        Routes {
            config,
            transport,
            closed: Arc::new(AtomicBool::new(false)),
            connections: Mutex::new(HashMap::new()),
            known: Mutex::new(endpoints.to_vec()),
            leaders: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
            read_replicas: None,
        }
    }

    /// The connection to `endpoint`, made (not yet dialled) when there is none.
    pub fn connection(&self, endpoint: &str) -> Arc<Connection> {
        let mut connections = lock(&self.connections);
        connections
            .entry(endpoint.to_owned())
            .or_insert_with(|| {
                let mut config = self.config.clone();
                config.endpoint = endpoint.to_owned();
                Arc::new(Connection::new(
                    config,
                    self.transport.clone(),
                    self.closed.clone(),
                ))
            })
            .clone()
    }

    /// The endpoint of `partition`'s leader: known, or asked of the brokers now.
    pub async fn leader(
        &self,
        via: &Client,
        stream: &StreamName,
        partition: PartitionId,
    ) -> Result<String, Error> {
        let key = (stream.clone(), partition);
        if let Some(leader) = lock(&self.leaders).get(&key) {
            return Ok(leader.endpoint.clone());
        }
        {
            let _one_round = self.refreshing.lock().await;
            // Another lookup may have learnt it while this one waited.
            if let Some(leader) = lock(&self.leaders).get(&key) {
                return Ok(leader.endpoint.clone());
            }
            self.refresh(via, stream).await;
        }
        lock(&self.leaders)
            .get(&key)
            .map(|leader| leader.endpoint.clone())
            .ok_or_else(|| {
                Error::from_code(
                    ErrorCode::NotLeader,
                    format!("no broker names a leader of stream {stream} partition {partition}"),
                )
            })
    }

    /// The brokers this client knows of: the configured ones, then the leaders it learnt.
    pub fn known(&self) -> Vec<String> {
        lock(&self.known).clone()
    }

    /// Forgets `partition`'s leader if it is `endpoint`.
    pub fn forget(&self, stream: &StreamName, partition: PartitionId, endpoint: &str) {
        let mut leaders = lock(&self.leaders);
        let key = (stream.clone(), partition);
        if leaders.get(&key).is_some_and(|l| l.endpoint == endpoint) {
            leaders.remove(&key);
        }
    }

    /// Asks `via`'s broker and every known broker, all at once, for `stream`'s metadata,
    /// and keeps for each partition the leader named in the highest epoch.
    async fn refresh(&self, via: &Client, stream: &StreamName) {
        let mut endpoints = vec![via.config().endpoint.clone()];
        for endpoint in lock(&self.known).iter() {
            if !endpoints.contains(endpoint) {
                endpoints.push(endpoint.clone());
            }
        }
        let mut asks = JoinSet::new();
        for endpoint in endpoints {
            let client = via.on(&endpoint);
            let request = Message::MetadataRequest(MetadataRequest {
                streams: vec![stream.clone()],
            });
            asks.spawn(async move {
                let answer = tokio::time::timeout(
                    METADATA_WAIT,
                    client.request_within(&request, METADATA_WAIT),
                )
                .await;
                (endpoint, answer)
            });
        }
        let mut found: HashMap<PartitionId, Leader> = HashMap::new();
        while let Some(joined) = asks.join_next().await {
            let Ok((endpoint, answer)) = joined else {
                continue;
            };
            match answer {
                Ok(Ok(Message::MetadataResponse(response))) => {
                    merge(&mut found, stream, &response.streams);
                }
                Ok(Ok(_)) => tracing::debug!(%endpoint, "metadata answered with another message"),
                Ok(Err(e)) => tracing::debug!(%endpoint, error = %e, "metadata request failed"),
                Err(_) => tracing::debug!(%endpoint, "metadata request timed out"),
            }
        }
        let mut leaders = lock(&self.leaders);
        let mut known = lock(&self.known);
        for (partition, leader) in found {
            if !known.contains(&leader.endpoint) {
                known.push(leader.endpoint.clone());
            }
            leaders.insert((stream.clone(), partition), leader);
        }
    }

    /// Marks every connection closed and closes them.
    pub fn close_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for connection in lock(&self.connections).values() {
            connection.drop_session("client closed");
        }
    }
}

/// Adds the leaders `streams` name for `stream` to `found`, keeping the higher epoch where
/// two brokers disagree (one has not heard of the election yet).
fn merge(
    found: &mut HashMap<PartitionId, Leader>,
    stream: &StreamName,
    streams: &[StreamMetadata],
) {
    let Some(Ok(info)) = streams
        .iter()
        .find(|entry| &entry.name == stream)
        .map(|entry| &entry.result)
    else {
        return;
    };
    for partition in &info.partitions {
        let Some(endpoint) = &partition.leader else {
            continue;
        };
        let named = Leader {
            endpoint: endpoint.as_str().to_owned(),
            epoch: partition.leader_epoch,
        };
        match found.get(&partition.id) {
            Some(known) if known.epoch >= named.epoch => {}
            _ => {
                found.insert(partition.id, named);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use floe_wire::frame::{PartitionMetadata, StreamInfo, StreamSettings, UploadBacklog};
    use floe_wire::{AckMode, Endpoint, Offset};

    use super::*;

    fn partition(id: u32, leader: Option<&str>, epoch: u32) -> PartitionMetadata {
        PartitionMetadata {
            id: PartitionId::new(id),
            leader: leader.map(|l| Endpoint::new(l).expect("a valid endpoint")),
            leader_epoch: LeaderEpoch::new(epoch),
            log_start: Offset::ZERO,
            high_watermark: Offset::ZERO,
            local_start: Offset::ZERO,
            tier_end: Offset::ZERO,
            upload_backlog: UploadBacklog::default(),
            damaged: None,
        }
    }

    fn answer(stream: &StreamName, partitions: Vec<PartitionMetadata>) -> Vec<StreamMetadata> {
        vec![StreamMetadata {
            name: stream.clone(),
            result: Ok(StreamInfo {
                ack_mode: AckMode::Quorum,
                partition_count: partitions.len() as u32,
                settings: StreamSettings::default(),
                partitions,
            }),
        }]
    }

    #[test]
    fn the_leader_of_the_highest_epoch_wins() {
        let stream = StreamName::new("orders").expect("a valid name");
        let mut found = HashMap::new();
        // A broker that missed the election still names the old leader, in the old epoch.
        merge(
            &mut found,
            &stream,
            &answer(
                &stream,
                vec![partition(0, Some("old:1"), 3), partition(1, None, 0)],
            ),
        );
        merge(
            &mut found,
            &stream,
            &answer(
                &stream,
                vec![partition(0, Some("new:1"), 4), partition(1, Some("b:1"), 2)],
            ),
        );
        merge(
            &mut found,
            &stream,
            &answer(&stream, vec![partition(0, Some("old:1"), 3)]),
        );
        assert_eq!(found[&PartitionId::new(0)].endpoint, "new:1");
        assert_eq!(found[&PartitionId::new(1)].endpoint, "b:1");
    }

    #[test]
    fn other_streams_and_errors_name_nothing() {
        let stream = StreamName::new("orders").expect("a valid name");
        let other = StreamName::new("audit").expect("a valid name");
        let mut found = HashMap::new();
        merge(
            &mut found,
            &stream,
            &answer(&other, vec![partition(0, Some("a:1"), 1)]),
        );
        merge(
            &mut found,
            &stream,
            &[StreamMetadata {
                name: stream.clone(),
                result: Err(ErrorCode::UnknownStream),
            }],
        );
        assert!(found.is_empty());
    }

    #[test]
    fn endpoint_lists_split_on_commas() {
        assert_eq!(
            split_endpoints(" a:1, b:2 ,,c:3 "),
            vec!["a:1".to_owned(), "b:2".to_owned(), "c:3".to_owned()]
        );
        assert!(split_endpoints("").is_empty());
    }
}

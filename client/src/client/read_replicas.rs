//! Which read replica serves a partition's reads: the live read replicas come from the
//! controlplane (looked up again every few seconds), and each partition goes to the read
//! replica with the highest rendezvous score of (stream, partition, read replica id), so that
//! every read replica caches a distinct share of history and a read replica's departure
//! moves only its own share. A read replica that failed a request is passed over for a while.
//! ("Replica" alone means a partition's replica on a broker, never one of these.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use floe_wire::admin::ReadReplicaState;
use floe_wire::{PartitionId, StreamName};

use crate::rest::Controlplane;

/// How long a looked-up list of read replicas is used.
const LIST_TTL: Duration = Duration::from_secs(5);
/// How long a read replica that failed is passed over.
const SUSPECT_FOR: Duration = Duration::from_secs(10);

/// A live read replica: its id (the rendezvous key) and where clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadReplica {
    pub id: String,
    pub endpoint: String,
}

#[derive(Debug)]
pub(crate) struct ReadReplicas {
    rest: Controlplane,
    list: tokio::sync::Mutex<Option<(Instant, Vec<ReadReplica>)>>,
    suspects: Mutex<HashMap<String, Instant>>,
}

impl ReadReplicas {
    /// The controlplane this list comes from.
    pub(crate) fn rest(&self) -> &Controlplane {
        &self.rest
    }

    pub fn new(rest: Controlplane) -> ReadReplicas {
        ReadReplicas {
            rest,
            list: tokio::sync::Mutex::new(None),
            suspects: Mutex::new(HashMap::new()),
        }
    }

    /// The read replica that serves `partition` of `stream`, if any is live and not suspect.
    pub async fn choose(&self, stream: &StreamName, partition: PartitionId) -> Option<ReadReplica> {
        let live = self.live().await;
        let suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let candidates = live
            .into_iter()
            .filter(|r| suspects.get(&r.endpoint).is_none_or(|until| *until <= now));
        rendezvous(candidates, stream, partition)
    }

    /// Passes over the read replica at `endpoint` for a while.
    pub fn suspect(&self, endpoint: &str) {
        let mut suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        suspects.retain(|_, until| *until > now);
        suspects.insert(endpoint.to_owned(), now + SUSPECT_FOR);
    }

    /// The live read replicas, looked up when the last list is stale. When the controlplane
    /// cannot be asked the last list stays in use (or none: reads go to the leaders).
    async fn live(&self) -> Vec<ReadReplica> {
        let mut list = self.list.lock().await;
        if let Some((at, read_replicas)) = list.as_ref()
            && at.elapsed() < LIST_TTL
        {
            return read_replicas.clone();
        }
        match self.rest.read_replicas().await {
            Ok(answer) => {
                let live: Vec<ReadReplica> = answer
                    .replicas
                    .into_iter()
                    .filter(|r| r.state == ReadReplicaState::Live)
                    .map(|r| ReadReplica {
                        id: r.replica_id,
                        endpoint: r.endpoint.to_string(),
                    })
                    .collect();
                *list = Some((Instant::now(), live.clone()));
                live
            }
            Err(e) => {
                tracing::debug!(error = %e, "listing read replicas");
                let stale = list.as_ref().map(|(_, r)| r.clone()).unwrap_or_default();
                *list = Some((Instant::now(), stale.clone()));
                stale
            }
        }
    }
}

/// The candidate with the highest score for (stream, partition); ties go to the smaller id.
fn rendezvous(
    candidates: impl Iterator<Item = ReadReplica>,
    stream: &StreamName,
    partition: PartitionId,
) -> Option<ReadReplica> {
    candidates
        .map(|r| (score(stream, partition, &r.id), r))
        .max_by(|(a, ra), (b, rb)| a.cmp(b).then_with(|| rb.id.cmp(&ra.id)))
        .map(|(_, r)| r)
}

/// FNV-1a over the stream, the partition and the read replica's id, then a 64-bit
/// finaliser: the same in every client, whatever its build.
fn score(stream: &StreamName, partition: PartitionId, read_replica: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(stream.as_str().as_bytes());
    eat(&[0]);
    eat(&partition.get().to_be_bytes());
    eat(&[0]);
    eat(read_replica.as_bytes());
    // splitmix64's finaliser spreads FNV's weak low bits.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_replicas(ids: &[&str]) -> Vec<ReadReplica> {
        ids.iter()
            .map(|id| ReadReplica {
                id: (*id).to_owned(),
                endpoint: format!("{id}:7150"),
            })
            .collect()
    }

    fn owner(ids: &[&str], stream: &StreamName, partition: u32) -> String {
        rendezvous(
            read_replicas(ids).into_iter(),
            stream,
            PartitionId::new(partition),
        )
        .expect("a read replica")
        .id
    }

    #[test]
    fn partitions_spread_over_read_replicas_and_only_a_leaver_share_moves() {
        let stream = StreamName::new("orders").expect("name");
        let all = ["r-1", "r-2", "r-3", "r-4"];
        let mut counts: HashMap<String, usize> = HashMap::new();
        for p in 0..400 {
            *counts.entry(owner(&all, &stream, p)).or_default() += 1;
        }
        // Every read replica gets a fair share (400 / 4 = 100, give or take).
        for id in all {
            let n = counts.get(id).copied().unwrap_or(0);
            assert!((60..=140).contains(&n), "{id} owns {n} of 400");
        }
        // Removing r-3 moves only r-3's partitions.
        let left = ["r-1", "r-2", "r-4"];
        for p in 0..400 {
            let before = owner(&all, &stream, p);
            let after = owner(&left, &stream, p);
            if before != "r-3" {
                assert_eq!(
                    before, after,
                    "partition {p} moved though its read replica stayed"
                );
            }
        }
    }

    #[test]
    fn the_choice_is_the_same_in_any_order_and_none_without_read_replicas() {
        let stream = StreamName::new("orders").expect("name");
        for p in 0..50 {
            assert_eq!(
                owner(&["a", "b", "c"], &stream, p),
                owner(&["c", "a", "b"], &stream, p)
            );
        }
        assert!(rendezvous(std::iter::empty(), &stream, PartitionId::new(0)).is_none());
    }

    #[test]
    fn scores_are_stable_across_builds() {
        // Clients of different builds must agree on the owner: the score is pinned.
        let stream = StreamName::new("orders").expect("name");
        assert_eq!(
            score(&stream, PartitionId::new(7), "r-1"),
            0x8ab0_473d_6fbb_8b67
        );
    }
}

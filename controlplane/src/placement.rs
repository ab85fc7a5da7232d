//! Placement: which live brokers hold each partition's replicas, and which of them leads.
//!
//! Pure and deterministic: the same brokers (with their loads) and the same partitions give
//! the same answer, with no clock, randomness or I/O, so the controlplane's loops are a thin
//! shell around it. The rules, in order of priority:
//!
//! 1. a replica set never holds a broker twice, and holds `replication_factor` brokers when
//!    that many are live (fewer otherwise: the partition is under-replicated until more
//!    brokers arrive);
//! 2. a repair keeps every replica that is still on a live broker, and keeps the leader when
//!    it is one of them, so that healthy replicas never move;
//! 3. a new replica goes to a broker whose zone the set does not use yet, when there is one
//!    (brokers without a zone label count as a zone of their own);
//! 4. then to the broker with the fewest replicas, then the lowest id;
//! 5. a new leader is the member with the fewest leaderships, then the earliest in the set.
//!
//! Callers feed [`Placer`] only live brokers with their current counts, then call
//! [`Placer::place`] per partition (or [`place_new`] / [`repair`]); the counts it keeps are
//! updated as it goes, so a batch of partitions spreads evenly.

use std::collections::HashMap;

use floe_wire::BrokerId;
use floe_wire::admin::BrokerState;

use crate::store::{MisplacedPartition, Reassignment};

/// A live broker that may receive replicas, with its current load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: BrokerId,
    pub zone: Option<String>,
    /// Partitions it holds a replica of.
    pub replicas: u32,
    /// Partitions it leads.
    pub leaders: u32,
}

/// One partition's replica set, leader first, and its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub replicas: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
}

/// The candidates and their running loads; see the module documentation.
#[derive(Debug, Clone)]
pub struct Placer {
    /// Ordered by id, so that ties break towards the lowest id.
    candidates: Vec<Slot>,
    index: HashMap<BrokerId, usize>,
}

#[derive(Debug, Clone)]
struct Slot {
    id: BrokerId,
    /// A small number per distinct zone label; unlabelled brokers get one each.
    zone: u32,
    replicas: u32,
    leaders: u32,
}

impl Placer {
    /// A placer over `candidates` (live brokers only). Duplicate ids keep the first.
    pub fn new(candidates: impl IntoIterator<Item = Candidate>) -> Placer {
        let mut candidates: Vec<Candidate> = candidates.into_iter().collect();
        candidates.sort_by_key(|c| c.id);
        candidates.dedup_by_key(|c| c.id);
        let mut zones: HashMap<String, u32> = HashMap::new();
        let mut next_zone = 0u32;
        let slots: Vec<Slot> = candidates
            .into_iter()
            .map(|candidate| {
                let zone = match candidate.zone {
                    Some(label) => *zones.entry(label).or_insert_with(|| {
                        next_zone += 1;
                        next_zone - 1
                    }),
                    None => {
                        next_zone += 1;
                        next_zone - 1
                    }
                };
                Slot {
                    id: candidate.id,
                    zone,
                    replicas: candidate.replicas,
                    leaders: candidate.leaders,
                }
            })
            .collect();
        let index = slots.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        Placer {
            candidates: slots,
            index,
        }
    }

    /// Whether `id` is a candidate (a live broker).
    pub fn contains(&self, id: BrokerId) -> bool {
        self.index.contains_key(&id)
    }

    /// The replicas `id` holds, those placed so far included; `None` when it is not a
    /// candidate.
    pub fn replicas_of(&self, id: BrokerId) -> Option<u32> {
        self.index
            .get(&id)
            .map(|&slot| self.candidates[slot].replicas)
    }

    /// Completes the replica set `keep` (live members to keep, in order) up to
    /// `replication_factor` and picks its leader, keeping `leader` when it is in `keep`.
    #[must_use]
    pub fn place(
        &mut self,
        keep: &[BrokerId],
        leader: Option<BrokerId>,
        replication_factor: u32,
    ) -> Placement {
        self.place_excluding(keep, leader, replication_factor, &[])
    }

    /// [`Placer::place`], never adding a broker of `excluded` (members being replaced).
    #[must_use]
    pub fn place_excluding(
        &mut self,
        keep: &[BrokerId],
        leader: Option<BrokerId>,
        replication_factor: u32,
        excluded: &[BrokerId],
    ) -> Placement {
        let excluded: Vec<usize> = excluded
            .iter()
            .filter_map(|id| self.index.get(id).copied())
            .collect();
        let mut chosen: Vec<usize> = Vec::with_capacity(replication_factor as usize);
        for id in keep {
            if let Some(&slot) = self.index.get(id)
                && !chosen.contains(&slot)
            {
                chosen.push(slot);
            }
        }
        while chosen.len() < replication_factor as usize {
            let Some(slot) = self.best_addition(&chosen, &excluded) else {
                break;
            };
            self.candidates[slot].replicas += 1;
            chosen.push(slot);
        }
        let kept_leader = leader
            .and_then(|id| self.index.get(&id).copied())
            .filter(|slot| chosen.contains(slot));
        let leader_slot = kept_leader.or_else(|| {
            let slot = chosen
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|&(position, slot)| (self.candidates[slot].leaders, position))
                .map(|(_, slot)| slot)?;
            self.candidates[slot].leaders += 1;
            Some(slot)
        });
        if let Some(leader) = leader_slot {
            chosen.retain(|slot| *slot != leader);
            chosen.insert(0, leader);
        }
        Placement {
            replicas: chosen
                .iter()
                .map(|slot| self.candidates[*slot].id)
                .collect(),
            leader: leader_slot.map(|slot| self.candidates[slot].id),
        }
    }

    /// The best broker to add to `chosen`: an unused zone first, then the fewest replicas,
    /// then the lowest id.
    fn best_addition(&self, chosen: &[usize], excluded: &[usize]) -> Option<usize> {
        self.candidates
            .iter()
            .enumerate()
            .filter(|(slot, _)| !chosen.contains(slot) && !excluded.contains(slot))
            .min_by_key(|(_, candidate)| {
                let zone_used = chosen
                    .iter()
                    .any(|slot| self.candidates[*slot].zone == candidate.zone);
                (zone_used, candidate.replicas)
            })
            .map(|(slot, _)| slot)
    }
}

/// Replica sets for `partitions` new partitions.
#[must_use]
pub fn place_new(placer: &mut Placer, partitions: u32, replication_factor: u32) -> Vec<Placement> {
    (0..partitions)
        .map(|_| placer.place(&[], None, replication_factor))
        .collect()
}

/// The reassignments that repair `misplaced` partitions: replicas on brokers that are not
/// live are replaced, missing replicas added, a leader that is gone replaced. A partition
/// that no live broker can take keeps its last assignment (its brokers may come back).
#[must_use]
pub fn repair(placer: &mut Placer, misplaced: &[MisplacedPartition]) -> Vec<Reassignment> {
    let mut changes = Vec::new();
    for partition in misplaced {
        let keep: Vec<BrokerId> = partition
            .replicas
            .iter()
            .filter(|(id, state)| *state == BrokerState::Live && placer.contains(*id))
            .map(|(id, _)| *id)
            .collect();
        let placement = placer.place(&keep, partition.leader, partition.replication_factor);
        if placement.replicas.is_empty() {
            continue;
        }
        let current: Vec<BrokerId> = partition.replicas.iter().map(|(id, _)| *id).collect();
        if placement.replicas == current && placement.leader == partition.leader {
            continue;
        }
        changes.push(Reassignment {
            stream: partition.stream.clone(),
            partition: partition.partition,
            expected_epoch: partition.epoch,
            replicas: placement.replicas,
            leader: placement.leader,
            previous: Vec::new(),
        });
    }
    changes
}

#[cfg(test)]
mod tests;

//! The replica sets whose majorities a leader counts before a record commits: the current
//! set, and during a change of the set also the one being left. Pure arithmetic over ends.

use crate::message::ReplicaId;

/// The replica sets whose majorities a leader counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Voters {
    pub(super) replicas: Vec<ReplicaId>,
    /// The set being left, during a change of the replica set; empty otherwise.
    pub(super) previous: Vec<ReplicaId>,
}

impl Voters {
    pub(super) fn new(replicas: &[ReplicaId], previous: &[ReplicaId]) -> Voters {
        let dedup = |ids: &[ReplicaId]| {
            let mut ids = ids.to_vec();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let replicas = dedup(replicas);
        let previous = dedup(previous);
        // A change to the same set is no change.
        let previous = if previous == replicas {
            Vec::new()
        } else {
            previous
        };
        Voters { replicas, previous }
    }

    /// Everyone a leader ships to (itself excluded by the caller).
    pub(super) fn all(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.replicas
            .iter()
            .chain(
                self.previous
                    .iter()
                    .filter(|id| !self.replicas.contains(id)),
            )
            .copied()
    }

    /// The largest offset durable on a majority of `set`, given each member's durable end.
    pub(super) fn majority_end(set: &[ReplicaId], end_of: impl Fn(ReplicaId) -> u64) -> u64 {
        if set.is_empty() {
            return u64::MAX;
        }
        let mut ends: Vec<u64> = set.iter().map(|&id| end_of(id)).collect();
        ends.sort_unstable_by(|a, b| b.cmp(a));
        ends[set.len() / 2]
    }

    /// The largest offset durable on a majority of every set, given each member's durable
    /// end (also used over the times members were last heard from).
    pub(super) fn committed_end(&self, end_of: impl Fn(ReplicaId) -> u64) -> u64 {
        Voters::majority_end(&self.replicas, &end_of)
            .min(Voters::majority_end(&self.previous, &end_of))
    }
}

//! Partition elections: the rules by which the controlplane starts an election of a
//! replicated partition's leader, and picks the winner from its replicas' reports.
//!
//! Pure: no I/O and no clock (times are passed in). The shells are the reconciler, which
//! feeds [`plan`] the partitions without a live leader on every pass, and the report handler,
//! which feeds one report to [`judge`], records it in [`Ballots`] and asks [`pick_leader`]
//! for a winner. What must hold (see `docs/replication.md`, "Why no acknowledged record is
//! lost"): the leader of epoch E is the most up-to-date of a majority of the replica set,
//! all of whom promised E; so the replica set of an electing partition must not change, and
//! a report counts only for the epoch it was made in.

use std::collections::{BTreeMap, HashMap};

use floe_wire::admin::{BrokerState, ElectionOutcome, ElectionReport};
use floe_wire::{BrokerId, LeaderEpoch, PartitionId, StreamName};

use crate::store::{ElectionStart, PartitionLeadership};

/// A replica's durable log as it reported it; newer means a larger last epoch, then a larger
/// end (the derived order compares the fields in that order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Position {
    pub(crate) last_epoch: LeaderEpoch,
    pub(crate) end: u64,
}

/// The smallest strict majority of a replica set of `members` brokers.
pub(crate) fn majority(members: usize) -> usize {
    members / 2 + 1
}

fn live(replicas: &[(BrokerId, BrokerState)]) -> impl Iterator<Item = BrokerId> + '_ {
    replicas
        .iter()
        .filter(|(_, state)| *state == BrokerState::Live)
        .map(|(id, _)| *id)
}

/// Whether `reporters` hold a majority of `replicas` and, while the set changes, of
/// `previous` too.
fn quorum(replicas: usize, previous: &[BrokerId], reporters: &[BrokerId]) -> bool {
    let of_previous = reporters.iter().filter(|id| previous.contains(id)).count();
    reporters.len() >= majority(replicas)
        && (previous.is_empty() || of_previous >= majority(previous.len()))
}

/// The winner of an election, once reports from live members reach a majority of
/// `replicas` and, while the set changes, a majority of `previous` (whose members outside
/// `replicas` no longer report: the live members common to both sets must make it). The
/// winner is the largest position, ties to the earliest in the replica list. Reports from
/// brokers that are not members or not live do not count (a broker that died cannot lead,
/// and its report alone must not make a majority).
#[must_use]
pub(crate) fn pick_leader(
    replicas: &[(BrokerId, BrokerState)],
    previous: &[BrokerId],
    reports: &BTreeMap<BrokerId, Position>,
) -> Option<BrokerId> {
    let counted: Vec<(BrokerId, Position)> = live(replicas)
        .filter_map(|id| reports.get(&id).map(|position| (id, *position)))
        .collect();
    let reporters: Vec<BrokerId> = counted.iter().map(|(id, _)| *id).collect();
    if !quorum(replicas.len(), previous, &reporters) {
        return None;
    }
    // `max_by_key` keeps the last of equal maxima; reversing keeps the earliest member.
    counted
        .iter()
        .rev()
        .max_by_key(|(_, position)| *position)
        .map(|(id, _)| *id)
}

/// What to do with one election report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Verdict {
    /// Not for the running election (an older or unknown epoch, no election, an
    /// unreplicated partition): answer success and change nothing.
    Ignore,
    /// A report for the running election: record it, then see whether it decides.
    Record(Position),
    /// The replica cannot report for or lead the current epoch: elect again at `epoch`.
    Restart { epoch: LeaderEpoch },
}

/// A report from a broker outside the partition's replica set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("broker {reporter} is not a replica of this partition")]
pub(crate) struct NotReplica {
    pub(crate) reporter: BrokerId,
}

/// Judges `report` from `reporter` against the partition's current leadership.
pub(crate) fn judge(
    partition: &PartitionLeadership,
    reporter: BrokerId,
    report: &ElectionReport,
) -> Result<Verdict, NotReplica> {
    if !partition.replicas.iter().any(|(id, _)| *id == reporter) {
        return Err(NotReplica { reporter });
    }
    if partition.replication_factor <= 1 || report.epoch != partition.epoch {
        return Ok(Verdict::Ignore);
    }
    Ok(match report.outcome {
        ElectionOutcome::Reported { last_epoch, end } if partition.electing => {
            Verdict::Record(Position { last_epoch, end })
        }
        ElectionOutcome::Reported { .. } => Verdict::Ignore,
        // During the election any member's refusal restarts it: the replica may have promised
        // a newer epoch, which the next election must exceed. After it, only the winner's
        // refusal to lead matters; a follower's is not a reason to unseat a working leader.
        // An epoch never wraps: at the last one there is no election to restart.
        ElectionOutcome::Refused { promised }
            if partition.electing || partition.leader == Some(reporter) =>
        {
            match partition.epoch.max(promised).next() {
                Some(epoch) => Verdict::Restart { epoch },
                None => Verdict::Ignore,
            }
        }
        ElectionOutcome::Refused { .. } => Verdict::Ignore,
    })
}

/// The election that replaces a leader cut off from its replicas, if `reporter` — which
/// says it has not heard from a majority of the set for a lease while still reaching the
/// controlplane — leads `partition` in `epoch`, and the live members other than it can
/// elect a successor by themselves (otherwise deposing it only makes things worse: the
/// partition would have no leader at all until contact returns).
///
/// Safe for the same reason as any election: the winner is the most up-to-date of a
/// majority, and every committed record is on a majority; leaving the deposed leader out
/// only shrinks the choice. Its records that no majority holds were never committed, and
/// it truncates them when it follows the new leader.
pub(crate) fn depose(
    partition: &PartitionLeadership,
    reporter: BrokerId,
    epoch: LeaderEpoch,
) -> Option<ElectionStart> {
    if partition.replication_factor <= 1
        || partition.electing
        || partition.epoch != epoch
        || partition.leader != Some(reporter)
    {
        return None;
    }
    let others: Vec<BrokerId> = live(&partition.replicas)
        .filter(|id| *id != reporter)
        .collect();
    if !quorum(partition.replicas.len(), &partition.previous, &others) {
        return None;
    }
    Some(ElectionStart {
        stream: partition.stream.clone(),
        partition: partition.partition,
        expected_epoch: partition.epoch,
        epoch: partition.epoch.next()?,
    })
}

/// A partition, as the key of its running election.
pub(crate) type PartitionKey = (StreamName, PartitionId);

/// The running elections this controlplane knows of: when each was opened and the reports
/// received for it. Held in memory only; a controlplane that takes over starts every running
/// election again at a newer epoch instead ([`plan`] with `fresh`).
///
/// Bounded: one ballot per electing partition (ballots of partitions no longer electing are
/// dropped on every reconciler pass), and at most one report per replica-set member, since
/// [`judge`] refuses the others.
#[derive(Debug, Default)]
pub(crate) struct Ballots {
    open: HashMap<PartitionKey, Ballot>,
}

#[derive(Debug)]
struct Ballot {
    epoch: LeaderEpoch,
    opened_at_ms: u64,
    reports: BTreeMap<BrokerId, Position>,
    /// A leader deposed for losing contact with its replicas: its report does not count in
    /// this election (see [`depose`]).
    excluded: Option<BrokerId>,
}

impl Ballots {
    /// The ballot of `key` at `epoch`, opened at `now_ms` unless one is open for that epoch.
    fn ballot(&mut self, key: &PartitionKey, epoch: LeaderEpoch, now_ms: u64) -> &mut Ballot {
        let ballot = self.open.entry(key.clone()).or_insert(Ballot {
            epoch,
            opened_at_ms: now_ms,
            reports: BTreeMap::new(),
            excluded: None,
        });
        if ballot.epoch != epoch {
            *ballot = Ballot {
                epoch,
                opened_at_ms: now_ms,
                reports: BTreeMap::new(),
                excluded: None,
            };
        }
        ballot
    }

    /// Opens a new ballot for the election of `key` at `epoch`, started at `now_ms`.
    pub(crate) fn open(&mut self, key: &PartitionKey, epoch: LeaderEpoch, now_ms: u64) {
        self.ballot(key, epoch, now_ms);
    }

    /// Opens the ballot of `epoch` without a say for `excluded` (a deposed leader).
    pub(crate) fn open_excluding(
        &mut self,
        key: &PartitionKey,
        epoch: LeaderEpoch,
        now_ms: u64,
        excluded: BrokerId,
    ) {
        self.ballot(key, epoch, now_ms).excluded = Some(excluded);
    }

    /// Records a report for the election of `key` at `epoch` (a repeated report replaces the
    /// earlier one; a report from the ballot's excluded broker is ignored) and returns every
    /// report that counts.
    pub(crate) fn record(
        &mut self,
        key: &PartitionKey,
        epoch: LeaderEpoch,
        reporter: BrokerId,
        position: Position,
        now_ms: u64,
    ) -> &BTreeMap<BrokerId, Position> {
        let ballot = self.ballot(key, epoch, now_ms);
        if ballot.excluded != Some(reporter) {
            ballot.reports.insert(reporter, position);
        }
        &ballot.reports
    }

    /// Forgets the election of `key` (it was decided).
    pub(crate) fn close(&mut self, key: &PartitionKey) {
        self.open.remove(key);
    }

    /// Whether any election this controlplane knows of has run `timeout_ms` by `now_ms`.
    pub(crate) fn any_timed_out(&self, now_ms: u64, timeout_ms: u64) -> bool {
        self.open
            .values()
            .any(|ballot| now_ms.saturating_sub(ballot.opened_at_ms) >= timeout_ms)
    }

    /// Forgets every election (a new leadership term of this controlplane).
    pub(crate) fn clear(&mut self) {
        self.open.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

/// The elections the reconciler starts, given every replicated partition without a live
/// leader (see `MetadataStore::leaderless_partitions`):
///
/// - a partition that is not electing (its leader is not live, or it never had one) gets an
///   election at the next epoch, with the same replica set;
/// - an electing partition gets one too when `fresh` (this controlplane just took over and
///   lost the reports), or when its election has run `timeout_ms` while a majority of its
///   replicas is live (a replica may have missed it); without a live majority it waits.
///
/// Opens ballots for the elections it starts and those it sees for the first time; drops
/// those of partitions that are no longer electing.
#[must_use]
pub(crate) fn plan(
    partitions: &[PartitionLeadership],
    ballots: &mut Ballots,
    fresh: bool,
    now_ms: u64,
    timeout_ms: u64,
) -> Vec<ElectionStart> {
    let electing: std::collections::HashSet<PartitionKey> = partitions
        .iter()
        .filter(|p| p.electing)
        .map(|p| (p.stream.clone(), p.partition))
        .collect();
    ballots.open.retain(|key, _| electing.contains(key));
    let mut starts = Vec::new();
    for partition in partitions {
        if partition.replication_factor <= 1 || partition.replicas.is_empty() {
            continue;
        }
        let key = (partition.stream.clone(), partition.partition);
        let due = if partition.electing {
            let opened = ballots.ballot(&key, partition.epoch, now_ms).opened_at_ms;
            let timed_out = now_ms.saturating_sub(opened) >= timeout_ms;
            let live_members: Vec<BrokerId> = live(&partition.replicas).collect();
            let quorum_live = quorum(partition.replicas.len(), &partition.previous, &live_members);
            fresh || (timed_out && quorum_live)
        } else {
            // The store lists only partitions whose leader is absent or not live; checked
            // again so that a live leader is never unseated by a stale read.
            !partition
                .leader
                .is_some_and(|leader| live(&partition.replicas).any(|id| id == leader))
        };
        if !due {
            continue;
        }
        let Some(epoch) = partition.epoch.next() else {
            tracing::error!(stream = %partition.stream, partition = partition.partition.get(), "the partition has used every leader epoch: it can elect no new leader");
            continue;
        };
        ballots.open(&key, epoch, now_ms);
        starts.push(ElectionStart {
            stream: partition.stream.clone(),
            partition: partition.partition,
            expected_epoch: partition.epoch,
            epoch,
        });
    }
    starts
}

#[cfg(test)]
mod tests;

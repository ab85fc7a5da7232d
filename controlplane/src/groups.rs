//! Consumer groups' membership and assignment, kept by the leading controlplane.
//!
//! A member joins, heartbeats and leaves; the coordinator assigns each partition of the
//! streams members read to one of them ([`assign`]: sticky and balanced) and hands a
//! partition to its new member only once the old one has given it up (its heartbeat no
//! longer lists it, after committing). So a rebalance moves only the partitions that change
//! hands, and nobody else stops reading.
//!
//! Membership is in memory: it lives as long as heartbeats do, and a new leader starts
//! with none; members then find themselves unknown, join again and start from the committed
//! offsets, which are in the store. Member ids are random, so no member of an earlier
//! leader's can pass for a member of this one.
//!
//! The generation grows with every change of the assignment. A member's commits must name
//! at least the generation in which its own assignment last changed, and only partitions it
//! reads now: a member that missed a rebalance — paused, cut off, its session lapsed —
//! cannot commit over its successor.

mod assign;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use floe_wire::StreamName;
use floe_wire::admin::{GroupMember, GroupPartition, GroupState, Membership};
use tokio::sync::watch;

use assign::{MemberId, Target};

/// The session timeout of a member that names none.
pub(crate) const DEFAULT_SESSION_TIMEOUT_MS: u64 = 10_000;
/// The bounds of a session timeout a member may ask for.
pub(crate) const SESSION_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 500..=300_000;

/// Why a member's call is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GroupError {
    #[error("group `{group}` has no member `{member}`: its session lapsed or it left; join again")]
    UnknownMember { group: String, member: String },
    #[error(
        "generation {generation} is stale: the assignment of member `{member}` changed in \
         generation {current}; heartbeat, then commit what it still reads"
    )]
    StaleGeneration {
        member: String,
        generation: u64,
        current: u64,
    },
    #[error(
        "member `{member}` does not read {stream}/{partition}: the partition moved to another \
         member"
    )]
    NotAssigned {
        member: String,
        stream: String,
        partition: u32,
    },
    #[error(
        "group `{group}` has {members} live member(s); stop them first, or pass --force \
         (`force`) where the call allows it"
    )]
    NotEmpty { group: String, members: usize },
    #[error(
        "group `{group}` has {limit} live members, the most the controlplane's \
         --max-group-members allows; wait for one to leave, or raise the limit"
    )]
    TooManyMembers { group: String, limit: usize },
}

/// A group's live state.
#[derive(Debug)]
struct Group {
    generation: u64,
    members: BTreeMap<MemberId, Member>,
    /// Partition counts of the streams the members read.
    partitions: BTreeMap<StreamName, u32>,
    /// Where each partition should be.
    target: Target,
    /// Who reads each partition now: handed to that member, not yet given up.
    owners: BTreeMap<GroupPartition, MemberId>,
    /// Bumped on every change a waiting heartbeat may care about.
    changes: watch::Sender<u64>,
}

#[derive(Debug)]
struct Member {
    client_id: Option<String>,
    streams: BTreeSet<StreamName>,
    session_timeout_ms: u64,
    last_seen_ms: u64,
    /// The generation in which this member's target last changed.
    assigned_generation: u64,
    /// Since when it holds a partition it was asked to give up.
    revoking_since_ms: Option<u64>,
}

impl Group {
    fn new() -> Group {
        Group {
            generation: 0,
            members: BTreeMap::new(),
            partitions: BTreeMap::new(),
            target: Target::new(),
            owners: BTreeMap::new(),
            changes: watch::Sender::new(0),
        }
    }

    fn notify(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Assigns anew after a change of members or streams; a new generation if anything moved.
    fn rebalance(&mut self) {
        let readers: BTreeMap<MemberId, BTreeSet<StreamName>> = self
            .members
            .iter()
            .map(|(id, member)| (id.clone(), member.streams.clone()))
            .collect();
        let target = assign::assign(&readers, &self.partitions, &self.target);
        if target == self.target {
            return;
        }
        self.generation += 1;
        for (id, member) in &mut self.members {
            let before = self.target.iter().filter(|(_, m)| *m == id);
            let after = target.iter().filter(|(_, m)| *m == id);
            if !before.map(|(slot, _)| slot).eq(after.map(|(slot, _)| slot)) {
                member.assigned_generation = self.generation;
            }
        }
        self.target = target;
        self.notify();
    }

    /// Hands `member` the partitions meant for it that nobody reads.
    fn hand_over(&mut self, member: &str) {
        for (slot, meant) in &self.target {
            if meant == member && !self.owners.contains_key(slot) {
                self.owners.insert(slot.clone(), member.to_owned());
            }
        }
    }

    fn view(&self, group: &str, member: &str) -> Membership {
        let mut assignment = Vec::new();
        let mut pending = Vec::new();
        for (slot, meant) in &self.target {
            if meant != member {
                continue;
            }
            match self.owners.get(slot) {
                Some(owner) if owner == member => assignment.push(slot.clone()),
                _ => pending.push(slot.clone()),
            }
        }
        let session_timeout_ms = self.members[member].session_timeout_ms;
        Membership {
            group: group.to_owned(),
            member_id: member.to_owned(),
            generation: self.generation,
            session_timeout_ms,
            heartbeat_interval_ms: heartbeat_interval_ms(session_timeout_ms),
            assignment,
            pending,
        }
    }

    /// Removes `member`, frees what it read, and assigns anew.
    fn remove(&mut self, member: &str) {
        self.members.remove(member);
        self.owners.retain(|_, owner| owner != member);
        self.rebalance();
        self.notify();
    }

    fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self
            .target
            .iter()
            .all(|(slot, meant)| self.owners.get(slot) == Some(meant))
        {
            GroupState::Stable
        } else {
            GroupState::Rebalancing
        }
    }
}

/// How often a member with this session timeout heartbeats: three times per session.
pub(crate) fn heartbeat_interval_ms(session_timeout_ms: u64) -> u64 {
    (session_timeout_ms / 3).max(1)
}

/// Every group with live members.
#[derive(Debug, Default)]
pub(crate) struct Coordinator {
    groups: Mutex<HashMap<String, Group>>,
}

/// What a joining member reads and how long its session lasts.
pub(crate) struct Joining<'a> {
    pub(crate) streams: &'a BTreeMap<StreamName, u32>,
    pub(crate) client_id: Option<String>,
    pub(crate) session_timeout_ms: u64,
    /// The most live members the group may have, this one included.
    pub(crate) max_members: usize,
}

/// A group as `floe group describe` shows it, before offsets are added.
pub(crate) struct LiveGroup {
    pub(crate) state: GroupState,
    pub(crate) generation: u64,
    pub(crate) members: Vec<GroupMember>,
    /// Every partition of the members' streams, with the member reading it now.
    pub(crate) partitions: BTreeMap<GroupPartition, Option<MemberId>>,
}

impl Coordinator {
    fn groups(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        // Every change leaves a group consistent before the next line can panic.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets every group: this controlplane stopped or started leading.
    pub(crate) fn clear(&self) {
        let mut groups = self.groups();
        for group in groups.values() {
            group.notify();
        }
        groups.clear();
    }

    /// Adds a member to `group` and assigns anew; returns what it reads now. Refused when
    /// the group has as many members as it may.
    pub(crate) fn join(
        &self,
        group: &str,
        joining: Joining<'_>,
        now_ms: u64,
    ) -> Result<Membership, GroupError> {
        let member_id = new_member_id();
        let mut groups = self.groups();
        if groups
            .get(group)
            .is_some_and(|state| state.members.len() >= joining.max_members)
        {
            return Err(GroupError::TooManyMembers {
                group: group.to_owned(),
                limit: joining.max_members,
            });
        }
        let state = groups.entry(group.to_owned()).or_insert_with(Group::new);
        for (stream, &count) in joining.streams {
            state.partitions.insert(stream.clone(), count);
        }
        state.members.insert(
            member_id.clone(),
            Member {
                client_id: joining.client_id,
                streams: joining.streams.keys().cloned().collect(),
                session_timeout_ms: joining.session_timeout_ms,
                last_seen_ms: now_ms,
                assigned_generation: state.generation,
                revoking_since_ms: None,
            },
        );
        state.rebalance();
        state.hand_over(&member_id);
        Ok(state.view(group, &member_id))
    }

    /// A member's heartbeat: it is alive and reads `owned`. What it no longer lists is free
    /// for the member meant to have it. Returns what it reads now, and a receiver that
    /// changes when that may change.
    pub(crate) fn heartbeat(
        &self,
        group: &str,
        member: &str,
        owned: &BTreeSet<GroupPartition>,
        now_ms: u64,
    ) -> Result<(Membership, watch::Receiver<u64>), GroupError> {
        let mut groups = self.groups();
        let unknown = || GroupError::UnknownMember {
            group: group.to_owned(),
            member: member.to_owned(),
        };
        let state = groups.get_mut(group).ok_or_else(unknown)?;
        let Some(entry) = state.members.get_mut(member) else {
            return Err(unknown());
        };
        entry.last_seen_ms = now_ms;
        let released: Vec<GroupPartition> = state
            .owners
            .iter()
            .filter(|(slot, owner)| *owner == member && !owned.contains(*slot))
            .map(|(slot, _)| slot.clone())
            .collect();
        for slot in &released {
            state.owners.remove(slot);
        }
        state.hand_over(member);
        if !released.is_empty() {
            // Someone may be waiting for these; hand them over at once.
            let waiting: BTreeSet<MemberId> = released
                .iter()
                .filter_map(|slot| state.target.get(slot).cloned())
                .collect();
            for other in waiting {
                state.hand_over(&other);
            }
            state.notify();
        }
        let revoking = state
            .owners
            .iter()
            .any(|(slot, owner)| owner == member && state.target.get(slot) != Some(owner));
        let entry = state.members.get_mut(member).ok_or_else(unknown)?;
        entry.revoking_since_ms = match (revoking, entry.revoking_since_ms) {
            (false, _) => None,
            (true, Some(since)) => Some(since),
            (true, None) => Some(now_ms),
        };
        Ok((state.view(group, member), state.changes.subscribe()))
    }

    /// The streams `member` reads; `None` for an unknown member.
    pub(crate) fn member_streams(&self, group: &str, member: &str) -> Option<Vec<StreamName>> {
        let groups = self.groups();
        let entry = groups.get(group)?.members.get(member)?;
        Some(entry.streams.iter().cloned().collect())
    }

    /// Removes `member`; its partitions go to the others. Unknown members are not an error:
    /// leaving twice, or after the session lapsed, leaves the same group.
    pub(crate) fn leave(&self, group: &str, member: &str) -> bool {
        let mut groups = self.groups();
        let Some(state) = groups.get_mut(group) else {
            return false;
        };
        if !state.members.contains_key(member) {
            return false;
        }
        state.remove(member);
        if state.members.is_empty() {
            groups.remove(group);
        }
        true
    }

    /// Removes members whose session lapsed, or that held on to a partition they were asked
    /// to give up for a whole session. Returns `(group, member)` of each removed.
    pub(crate) fn expire(&self, now_ms: u64) -> Vec<(String, MemberId)> {
        let mut groups = self.groups();
        let mut removed = Vec::new();
        for (name, state) in groups.iter_mut() {
            let lapsed: Vec<MemberId> = state
                .members
                .iter()
                .filter(|(_, m)| {
                    let since = m.revoking_since_ms.unwrap_or(m.last_seen_ms);
                    now_ms > m.last_seen_ms.saturating_add(m.session_timeout_ms)
                        || now_ms > since.saturating_add(m.session_timeout_ms)
                })
                .map(|(id, _)| id.clone())
                .collect();
            for member in lapsed {
                state.remove(&member);
                removed.push((name.clone(), member));
            }
        }
        groups.retain(|_, state| !state.members.is_empty());
        removed
    }

    /// Refuses a commit of `slots` by `member` at `generation` unless the member is live, its
    /// assignment has not changed since and it reads every one of them. A commit without a
    /// member is refused while the group has live members.
    pub(crate) fn check_commit(
        &self,
        group: &str,
        member: Option<(&str, u64)>,
        slots: &[GroupPartition],
    ) -> Result<(), GroupError> {
        let groups = self.groups();
        let state = groups.get(group);
        let Some((member, generation)) = member else {
            return match state {
                Some(state) if !state.members.is_empty() => Err(GroupError::NotEmpty {
                    group: group.to_owned(),
                    members: state.members.len(),
                }),
                _ => Ok(()),
            };
        };
        let unknown = || GroupError::UnknownMember {
            group: group.to_owned(),
            member: member.to_owned(),
        };
        let state = state.ok_or_else(unknown)?;
        let entry = state.members.get(member).ok_or_else(unknown)?;
        if generation < entry.assigned_generation || generation > state.generation {
            return Err(GroupError::StaleGeneration {
                member: member.to_owned(),
                generation,
                current: entry.assigned_generation,
            });
        }
        for slot in slots {
            if state.owners.get(slot).map(String::as_str) != Some(member) {
                return Err(GroupError::NotAssigned {
                    member: member.to_owned(),
                    stream: slot.stream.to_string(),
                    partition: slot.partition.get(),
                });
            }
        }
        Ok(())
    }

    /// Refuses when `group` has live members.
    pub(crate) fn check_empty(&self, group: &str) -> Result<(), GroupError> {
        match self.groups().get(group) {
            Some(state) if !state.members.is_empty() => Err(GroupError::NotEmpty {
                group: group.to_owned(),
                members: state.members.len(),
            }),
            _ => Ok(()),
        }
    }

    /// Live members per group.
    pub(crate) fn member_counts(&self) -> BTreeMap<String, usize> {
        self.groups()
            .iter()
            .map(|(name, state)| (name.clone(), state.members.len()))
            .collect()
    }

    /// `group`'s members and who reads what; `None` without live members.
    pub(crate) fn describe(&self, group: &str, now_ms: u64) -> Option<LiveGroup> {
        let groups = self.groups();
        let state = groups.get(group)?;
        let members = state
            .members
            .iter()
            .map(|(id, member)| GroupMember {
                member_id: id.clone(),
                client_id: member.client_id.clone(),
                streams: member.streams.iter().cloned().collect(),
                partitions: state
                    .owners
                    .iter()
                    .filter(|(_, owner)| *owner == id)
                    .map(|(slot, _)| slot.clone())
                    .collect(),
                session_timeout_ms: member.session_timeout_ms,
                last_heartbeat_ms: now_ms.saturating_sub(member.last_seen_ms),
            })
            .collect();
        let partitions = state
            .partitions
            .iter()
            .flat_map(|(stream, &count)| {
                (0..count).map(move |p| GroupPartition {
                    stream: stream.clone(),
                    partition: floe_wire::PartitionId::new(p),
                })
            })
            .map(|slot| {
                let owner = state.owners.get(&slot).cloned();
                (slot, owner)
            })
            .collect();
        Some(LiveGroup {
            state: state.state(),
            generation: state.generation,
            members,
            partitions,
        })
    }
}

/// A member id: 16 random bytes in hex, so ids of any leader, past or future, never meet.
fn new_member_id() -> MemberId {
    let mut random = [0u8; 16];
    if getrandom::fill(&mut random).is_err() {
        // No randomness from the system: the time's nanoseconds still keep ids apart here.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        random = nanos.to_le_bytes();
    }
    random.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_wire::PartitionId;

    fn stream() -> StreamName {
        StreamName::new("s").expect("a valid name")
    }

    /// A member of `g` reading `partitions` partitions of `s`.
    fn join_with(
        coordinator: &Coordinator,
        partitions: u32,
        session_timeout_ms: u64,
        max_members: usize,
        now_ms: u64,
    ) -> Result<Membership, GroupError> {
        let streams = BTreeMap::from([(stream(), partitions)]);
        let joining = Joining {
            streams: &streams,
            client_id: None,
            session_timeout_ms,
            max_members,
        };
        coordinator.join("g", joining, now_ms)
    }

    fn join(coordinator: &Coordinator, now_ms: u64) -> Membership {
        join_with(coordinator, 4, 3_000, 10, now_ms).expect("room in the group")
    }

    fn owned(membership: &Membership) -> BTreeSet<GroupPartition> {
        membership.assignment.iter().cloned().collect()
    }

    fn beat(
        coordinator: &Coordinator,
        member: &Membership,
        owned: &BTreeSet<GroupPartition>,
        now_ms: u64,
    ) -> Membership {
        coordinator
            .heartbeat("g", &member.member_id, owned, now_ms)
            .expect("a live member")
            .0
    }

    #[test]
    fn a_partition_changes_hands_only_once_its_owner_gives_it_up() {
        let coordinator = Coordinator::default();
        let a = join(&coordinator, 0);
        assert_eq!(a.assignment.len(), 4);
        let b = join(&coordinator, 10);
        assert!(b.assignment.is_empty(), "a still reads them all");
        assert_eq!(b.pending.len(), 2);
        // a hears of the rebalance: two of its partitions are no longer its own.
        let a2 = beat(&coordinator, &a, &owned(&a), 20);
        assert_eq!(a2.assignment.len(), 2);
        assert!(a2.generation > a.generation);
        // a commits the two it gives up, then leaves them out.
        let given_up: Vec<GroupPartition> = owned(&a).difference(&owned(&a2)).cloned().collect();
        coordinator
            .check_commit("g", Some((&a.member_id, a2.generation)), &given_up)
            .expect("the owner may commit what it is giving up");
        let _ = beat(&coordinator, &a2, &owned(&a2), 30);
        let b2 = beat(&coordinator, &b, &BTreeSet::new(), 40);
        assert_eq!(b2.assignment.len(), 2);
        assert_eq!(
            coordinator.check_commit("g", Some((&a.member_id, a2.generation)), &given_up),
            Err(GroupError::NotAssigned {
                member: a.member_id.clone(),
                stream: "s".into(),
                partition: given_up[0].partition.get(),
            })
        );
        assert_eq!(
            coordinator.describe("g", 50).map(|g| g.state),
            Some(GroupState::Stable)
        );
    }

    #[test]
    fn a_member_that_missed_a_rebalance_cannot_commit() {
        let coordinator = Coordinator::default();
        let a = join(&coordinator, 0);
        let b = join(&coordinator, 0);
        let _ = beat(&coordinator, &a, &owned(&a), 1);
        // a's assignment changed in b's generation: a commit naming the one before is stale.
        assert!(matches!(
            coordinator.check_commit("g", Some((&a.member_id, a.generation)), &[]),
            Err(GroupError::StaleGeneration { .. })
        ));
        // b heartbeats on; a falls silent past its session and is removed.
        let b_owned = owned(&beat(&coordinator, &b, &BTreeSet::new(), 2_000));
        let _ = beat(&coordinator, &b, &b_owned, 3_500);
        let removed = coordinator.expire(3_500);
        assert_eq!(removed, vec![("g".to_owned(), a.member_id.clone())]);
        let slot = GroupPartition {
            stream: stream(),
            partition: PartitionId::new(0),
        };
        assert!(matches!(
            coordinator.check_commit("g", Some((&a.member_id, 99)), &[slot]),
            Err(GroupError::UnknownMember { .. })
        ));
        let b3 = beat(&coordinator, &b, &b_owned, 3_600);
        assert_eq!(b3.assignment.len(), 4, "b took over a's partitions");
    }

    #[test]
    fn a_member_that_holds_on_to_what_it_must_give_up_is_removed() {
        let coordinator = Coordinator::default();
        let a = join(&coordinator, 0);
        let b = join(&coordinator, 0);
        // a heartbeats but keeps reading all four.
        for now in [1_000, 2_000, 3_000, 4_000] {
            let _ = beat(&coordinator, &a, &owned(&a), now);
            let _ = beat(&coordinator, &b, &BTreeSet::new(), now);
        }
        assert_eq!(
            coordinator.expire(4_500),
            vec![("g".to_owned(), a.member_id)]
        );
    }

    #[test]
    fn commits_without_a_member_wait_for_an_empty_group() {
        let coordinator = Coordinator::default();
        assert_eq!(coordinator.check_commit("g", None, &[]), Ok(()));
        let a = join(&coordinator, 0);
        assert!(matches!(
            coordinator.check_commit("g", None, &[]),
            Err(GroupError::NotEmpty { members: 1, .. })
        ));
        assert!(coordinator.leave("g", &a.member_id));
        assert!(
            !coordinator.leave("g", &a.member_id),
            "leaving twice is no error"
        );
        assert_eq!(coordinator.check_empty("g"), Ok(()));
    }

    #[test]
    fn every_waiting_member_hears_of_a_leave() {
        let coordinator = Coordinator::default();
        let join = || join_with(&coordinator, 10, 30_000, 5, 0);
        let members: Vec<Membership> = (0..5).map(|_| join().expect("room in the group")).collect();
        let mut receivers = Vec::new();
        for m in &members {
            let owned: BTreeSet<GroupPartition> = m.assignment.iter().cloned().collect();
            let (_, rx) = coordinator
                .heartbeat("g", &m.member_id, &owned, 1)
                .expect("live");
            receivers.push(rx);
        }
        assert!(matches!(
            join(),
            Err(GroupError::TooManyMembers { limit: 5, .. })
        ));
        assert!(coordinator.leave("g", &members[4].member_id));
        for rx in &receivers {
            assert!(rx.has_changed().expect("open"));
        }
    }
}

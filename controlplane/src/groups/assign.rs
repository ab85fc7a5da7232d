//! Sticky, balanced assignment of a group's partitions to its members.
//!
//! Every partition of every stream some member reads goes to one member that reads that
//! stream. A stream's partitions are spread as evenly as they can be over its readers: each
//! gets `n / readers` or one more. Within that, nothing moves that need not: a partition
//! stays with its member while the member lives and is not over its share, and a member
//! over its share gives up its highest-numbered partitions first. So a member that joins
//! takes only what it is given from the others, and one that leaves frees only its own.

use std::collections::{BTreeMap, BTreeSet};

use floe_wire::admin::GroupPartition;
use floe_wire::{PartitionId, StreamName};

/// Member ids, ordered: the tiebreak that makes an assignment the same wherever it is made.
pub(crate) type MemberId = String;

/// Partitions each member should read.
pub(crate) type Target = BTreeMap<GroupPartition, MemberId>;

/// The assignment for `readers` (each member's streams) of `partitions` (each stream's
/// partition count), moving as little of `current` as balance allows.
pub(crate) fn assign(
    readers: &BTreeMap<MemberId, BTreeSet<StreamName>>,
    partitions: &BTreeMap<StreamName, u32>,
    current: &Target,
) -> Target {
    let mut target = Target::new();
    // Each member's partitions across the streams assigned so far: the tiebreak that keeps
    // the whole group even when several streams each leave a remainder.
    let mut load: BTreeMap<&MemberId, usize> = readers.keys().map(|m| (m, 0)).collect();
    for (stream, &count) in partitions {
        let subscribers: Vec<&MemberId> = readers
            .iter()
            .filter(|(_, streams)| streams.contains(stream))
            .map(|(member, _)| member)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let slots: Vec<GroupPartition> = (0..count)
            .map(|p| GroupPartition {
                stream: stream.clone(),
                partition: PartitionId::new(p),
            })
            .collect();
        // What each subscriber keeps of what it has.
        let mut kept: BTreeMap<&MemberId, Vec<GroupPartition>> =
            subscribers.iter().map(|m| (*m, Vec::new())).collect();
        for slot in &slots {
            if let Some(owner) = current.get(slot)
                && let Some(list) = kept.get_mut(owner)
            {
                list.push(slot.clone());
            }
        }
        // Shares: `base` each, one more for `extra` of them, preferring those that hold
        // more now (fewer moves), then those with less elsewhere, then by id.
        let base = slots.len() / subscribers.len();
        let extra = slots.len() % subscribers.len();
        let mut order = subscribers.clone();
        order.sort_by(|a, b| {
            kept[b]
                .len()
                .cmp(&kept[a].len())
                .then(load[a].cmp(&load[b]))
                .then(a.cmp(b))
        });
        let share: BTreeMap<&MemberId, usize> = order
            .iter()
            .enumerate()
            .map(|(i, m)| (*m, base + usize::from(i < extra)))
            .collect();
        let mut free: Vec<GroupPartition> = slots
            .iter()
            .filter(|slot| !kept.values().any(|list| list.contains(slot)))
            .cloned()
            .collect();
        for (member, list) in &mut kept {
            // Highest-numbered first: `list` is in partition order.
            while list.len() > share[member] {
                if let Some(slot) = list.pop() {
                    free.push(slot);
                }
            }
        }
        free.sort();
        let mut free = free.into_iter();
        for member in &order {
            let list = kept.get_mut(member).expect("every subscriber has a list");
            while list.len() < share[member] {
                match free.next() {
                    Some(slot) => list.push(slot),
                    None => break,
                }
            }
        }
        for (member, list) in kept {
            *load.get_mut(member).expect("every reader has a load") += list.len();
            for slot in list {
                target.insert(slot, member.clone());
            }
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(name: &str) -> StreamName {
        StreamName::new(name).expect("a valid name")
    }

    fn readers(members: &[&str], streams: &[&str]) -> BTreeMap<MemberId, BTreeSet<StreamName>> {
        members
            .iter()
            .map(|m| (m.to_string(), streams.iter().map(|s| stream(s)).collect()))
            .collect()
    }

    fn counts(target: &Target) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for member in target.values() {
            *counts.entry(member.clone()).or_insert(0) += 1;
        }
        counts
    }

    fn moved(before: &Target, after: &Target) -> usize {
        before
            .iter()
            .filter(|(slot, member)| after.get(*slot).is_some_and(|m| m != *member))
            .count()
    }

    #[test]
    fn two_members_split_four_partitions_evenly() {
        let partitions = BTreeMap::from([(stream("s"), 4)]);
        let target = assign(&readers(&["a", "b"], &["s"]), &partitions, &Target::new());
        assert_eq!(target.len(), 4);
        assert_eq!(
            counts(&target).values().copied().collect::<Vec<_>>(),
            [2, 2]
        );
    }

    #[test]
    fn a_joining_member_takes_only_what_it_is_given() {
        let partitions = BTreeMap::from([(stream("s"), 4)]);
        let two = assign(&readers(&["a", "b"], &["s"]), &partitions, &Target::new());
        let three = assign(&readers(&["a", "b", "c"], &["s"]), &partitions, &two);
        assert_eq!(counts(&three).get("c"), Some(&1), "{three:?}");
        // Only the partition c took moved.
        assert_eq!(moved(&two, &three), 1);
        for (slot, member) in &three {
            if member != "c" {
                assert_eq!(two.get(slot), Some(member), "{slot:?} stayed put");
            }
        }
    }

    #[test]
    fn a_leaving_member_frees_only_its_own() {
        let partitions = BTreeMap::from([(stream("s"), 6)]);
        let three = assign(
            &readers(&["a", "b", "c"], &["s"]),
            &partitions,
            &Target::new(),
        );
        let two = assign(&readers(&["a", "c"], &["s"]), &partitions, &three);
        assert_eq!(two.len(), 6);
        assert_eq!(moved(&three, &two), 2, "only b's two partitions moved");
        assert_eq!(counts(&two).values().copied().collect::<Vec<_>>(), [3, 3]);
    }

    #[test]
    fn members_read_only_their_streams_and_each_stream_is_spread_evenly() {
        let mut members = readers(&["a", "b"], &["s", "t"]);
        members.insert("c".into(), BTreeSet::from([stream("t")]));
        let partitions = BTreeMap::from([(stream("s"), 3), (stream("t"), 3)]);
        let target = assign(&members, &partitions, &Target::new());
        assert_eq!(target.len(), 6);
        for (slot, member) in &target {
            assert!(members[member].contains(&slot.stream));
        }
        // s over a and b: two and one; t over all three: one each. The remainder of s goes
        // to the member with less elsewhere, which on the first stream is by id.
        let on = |name: &str, member: &str| {
            target
                .iter()
                .filter(|(slot, m)| slot.stream.as_str() == name && m.as_str() == member)
                .count()
        };
        assert_eq!((on("s", "a"), on("s", "b"), on("s", "c")), (2, 1, 0));
        assert_eq!((on("t", "a"), on("t", "b"), on("t", "c")), (1, 1, 1));
    }

    #[test]
    fn a_thousand_partitions_over_a_hundred_members_are_even_and_stable() {
        let names: Vec<String> = (0..100).map(|i| format!("m{i:03}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let partitions = BTreeMap::from([(stream("s"), 1000)]);
        let first = assign(&readers(&refs, &["s"]), &partitions, &Target::new());
        assert!(counts(&first).values().all(|&n| n == 10));
        let again = assign(&readers(&refs, &["s"]), &partitions, &first);
        assert_eq!(first, again, "nothing moves when nothing changed");
        let fewer = assign(&readers(&refs[1..], &["s"]), &partitions, &first);
        assert_eq!(
            moved(&first, &fewer),
            10,
            "only the leaver's partitions moved"
        );
    }

    #[test]
    fn no_readers_no_assignment() {
        let partitions = BTreeMap::from([(stream("s"), 2)]);
        let target = assign(&BTreeMap::new(), &partitions, &Target::new());
        assert!(target.is_empty());
    }
}

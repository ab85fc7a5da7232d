//! Placement rules, one scenario each.

use std::collections::{HashMap, HashSet};

use floe_wire::admin::BrokerState;
use floe_wire::{BrokerId, PartitionId, StreamName};

use super::*;

fn broker(id: u32, zone: Option<&str>) -> Candidate {
    Candidate {
        id: BrokerId::new(id),
        zone: zone.map(str::to_owned),
        replicas: 0,
        leaders: 0,
    }
}

fn ids(values: &[u32]) -> Vec<BrokerId> {
    values.iter().copied().map(BrokerId::new).collect()
}

fn counts(placements: &[Placement]) -> (HashMap<BrokerId, u32>, HashMap<BrokerId, u32>) {
    let mut replicas = HashMap::new();
    let mut leaders = HashMap::new();
    for placement in placements {
        for id in &placement.replicas {
            *replicas.entry(*id).or_insert(0) += 1;
        }
        if let Some(leader) = placement.leader {
            *leaders.entry(leader).or_insert(0) += 1;
        }
    }
    (replicas, leaders)
}

#[test]
fn new_partitions_spread_replicas_and_leaders_evenly() {
    let mut placer = Placer::new((1..=3).map(|id| broker(id, None)));
    let placements = place_new(&mut placer, 6, 3);
    let (replicas, leaders) = counts(&placements);
    assert_eq!(
        replicas.values().copied().collect::<HashSet<_>>(),
        [6].into()
    );
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    for placement in &placements {
        assert_eq!(placement.replicas.len(), 3);
        assert_eq!(placement.replicas.first().copied(), placement.leader);
        let distinct: HashSet<_> = placement.replicas.iter().collect();
        assert_eq!(distinct.len(), 3, "a broker appears twice in {placement:?}");
    }
}

#[test]
fn replicas_go_to_distinct_zones_when_there_are_enough() {
    let mut placer = Placer::new([
        broker(1, Some("a")),
        broker(2, Some("a")),
        broker(3, Some("b")),
        broker(4, Some("c")),
    ]);
    let zone = |id: BrokerId| match id.get() {
        1 | 2 => "a",
        3 => "b",
        _ => "c",
    };
    for placement in place_new(&mut placer, 12, 3) {
        let zones: HashSet<_> = placement.replicas.iter().map(|id| zone(*id)).collect();
        assert_eq!(zones.len(), 3, "{placement:?} shares a zone");
    }
}

#[test]
fn a_replication_factor_above_the_live_brokers_places_on_all_of_them() {
    let mut placer = Placer::new([broker(7, None), broker(9, None)]);
    let placement = placer.place(&[], None, 3);
    assert_eq!(placement.replicas, ids(&[7, 9]));
    assert_eq!(placement.leader, Some(BrokerId::new(7)));
    let mut empty = Placer::new([]);
    assert_eq!(
        empty.place(&[], None, 3),
        Placement {
            replicas: vec![],
            leader: None
        }
    );
}

#[test]
fn the_same_input_gives_the_same_placement() {
    let brokers: Vec<Candidate> = (1..=10)
        .map(|id| Candidate {
            replicas: id * 7 % 5,
            leaders: id % 3,
            ..broker(id, Some(["x", "y", "z"][(id % 3) as usize]))
        })
        .collect();
    let first = place_new(&mut Placer::new(brokers.clone()), 50, 3);
    let reversed: Vec<Candidate> = brokers.into_iter().rev().collect();
    assert_eq!(first, place_new(&mut Placer::new(reversed), 50, 3));
}

#[test]
fn loaded_brokers_receive_new_replicas_last() {
    let mut placer = Placer::new([
        Candidate {
            replicas: 10,
            ..broker(1, None)
        },
        broker(2, None),
        broker(3, None),
    ]);
    let placement = placer.place(&[], None, 2);
    assert_eq!(placement.replicas, ids(&[2, 3]));
}

fn misplaced(replicas: &[(u32, BrokerState)], leader: Option<u32>) -> MisplacedPartition {
    MisplacedPartition {
        stream: StreamName::new("orders").expect("valid name"),
        partition: PartitionId::new(4),
        replication_factor: 3,
        epoch: floe_wire::LeaderEpoch::new(7),
        leader: leader.map(BrokerId::new),
        replicas: replicas
            .iter()
            .map(|(id, state)| (BrokerId::new(*id), *state))
            .collect(),
        previous: Vec::new(),
    }
}

#[test]
fn repair_replaces_a_dead_leader_and_keeps_the_survivors() {
    let mut placer = Placer::new((2..=4).map(|id| broker(id, None)));
    let dead_leader = misplaced(
        &[
            (1, BrokerState::Dead),
            (2, BrokerState::Live),
            (3, BrokerState::Live),
        ],
        Some(1),
    );
    let changes = repair(&mut placer, &[dead_leader]);
    assert_eq!(changes.len(), 1);
    let change = &changes[0];
    assert_eq!(change.expected_epoch, floe_wire::LeaderEpoch::new(7));
    assert_eq!(change.leader, Some(BrokerId::new(2)));
    assert_eq!(change.replicas, ids(&[2, 3, 4]));
}

#[test]
fn repair_moves_replicas_off_a_draining_broker_but_keeps_a_live_leader() {
    let mut placer = Placer::new([broker(1, None), broker(3, None), broker(4, None)]);
    let draining = misplaced(
        &[
            (1, BrokerState::Live),
            (2, BrokerState::Draining),
            (3, BrokerState::Live),
        ],
        Some(1),
    );
    let changes = repair(&mut placer, &[draining]);
    assert_eq!(changes[0].leader, Some(BrokerId::new(1)));
    assert_eq!(changes[0].replicas, ids(&[1, 3, 4]));
}

#[test]
fn repair_without_live_brokers_keeps_the_last_assignment() {
    let mut placer = Placer::new([]);
    let orphan = misplaced(&[(1, BrokerState::Dead)], Some(1));
    assert_eq!(repair(&mut placer, &[orphan]), vec![]);
}

#[test]
fn repair_of_an_under_replicated_partition_with_nowhere_to_go_changes_nothing() {
    let mut placer = Placer::new([broker(1, None)]);
    let lonely = misplaced(&[(1, BrokerState::Live)], Some(1));
    assert_eq!(repair(&mut placer, &[lonely]), vec![]);
}

#[test]
fn a_hundred_thousand_partitions_over_a_hundred_brokers_differ_by_at_most_one() {
    let mut placer = Placer::new((1..=100).map(|id| broker(id, None)));
    let placements = place_new(&mut placer, 100_000, 3);
    let (replicas, leaders) = counts(&placements);
    let spread = |map: &HashMap<BrokerId, u32>| {
        map.values().max().copied().unwrap_or(0) - map.values().min().copied().unwrap_or(0)
    };
    assert_eq!(replicas.len(), 100);
    assert!(
        spread(&replicas) <= 1,
        "replicas spread {}",
        spread(&replicas)
    );
    assert!(spread(&leaders) <= 1, "leaders spread {}", spread(&leaders));
}

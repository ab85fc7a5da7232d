//! The election rules on plain values: majorities, ties, dead reporters, refusals, timeouts.

use std::collections::BTreeMap;

use floe_wire::admin::{BrokerState, ElectionOutcome, ElectionReport};
use floe_wire::{BrokerId, LeaderEpoch, PartitionId, StreamName};

use super::*;
use crate::store::PartitionLeadership;

const LIVE: BrokerState = BrokerState::Live;
const DEAD: BrokerState = BrokerState::Dead;

fn id(value: u32) -> BrokerId {
    BrokerId::new(value)
}

fn members(states: &[(u32, BrokerState)]) -> Vec<(BrokerId, BrokerState)> {
    states.iter().map(|(i, state)| (id(*i), *state)).collect()
}

fn e(value: u32) -> LeaderEpoch {
    LeaderEpoch::new(value)
}

fn at(last_epoch: u32, end: u64) -> Position {
    Position {
        last_epoch: e(last_epoch),
        end,
    }
}

fn reports(entries: &[(u32, Position)]) -> BTreeMap<BrokerId, Position> {
    entries.iter().map(|(i, p)| (id(*i), *p)).collect()
}

fn partition(epoch: u32, electing: bool, leader: Option<u32>) -> PartitionLeadership {
    PartitionLeadership {
        stream: StreamName::new("orders").expect("name"),
        partition: PartitionId::new(0),
        replication_factor: 3,
        epoch: e(epoch),
        leader: leader.map(id),
        electing,
        replicas: members(&[(1, LIVE), (2, LIVE), (3, LIVE)]),
        previous: Vec::new(),
    }
}

fn report(epoch: u32, outcome: ElectionOutcome) -> ElectionReport {
    ElectionReport {
        stream: StreamName::new("orders").expect("name"),
        partition: PartitionId::new(0),
        epoch: e(epoch),
        outcome,
    }
}

fn reported(last_epoch: u32, end: u64) -> ElectionOutcome {
    ElectionOutcome::Reported {
        last_epoch: e(last_epoch),
        end,
    }
}

#[test]
fn majorities_are_strict() {
    assert_eq!(
        [1, 2, 3, 4, 5].map(majority),
        [1, 2, 2, 3, 3],
        "a majority of n members"
    );
}

#[test]
fn no_winner_before_a_majority_has_reported() {
    let set = members(&[(1, LIVE), (2, LIVE), (3, LIVE)]);
    assert_eq!(pick_leader(&set, &[], &reports(&[(2, at(4, 100))])), None);
    assert_eq!(
        pick_leader(&set, &[], &reports(&[(2, at(4, 100)), (3, at(4, 90))])),
        Some(id(2))
    );
}

#[test]
fn the_last_epoch_outranks_the_end() {
    let set = members(&[(1, LIVE), (2, LIVE), (3, LIVE)]);
    let picked = pick_leader(&set, &[], &reports(&[(1, at(3, 500)), (3, at(4, 10))]));
    assert_eq!(
        picked,
        Some(id(3)),
        "an entry of epoch 4 beats a longer epoch-3 log"
    );
}

#[test]
fn ties_go_to_the_earliest_replica() {
    let set = members(&[(3, LIVE), (1, LIVE), (2, LIVE)]);
    let all_equal = reports(&[(1, at(2, 7)), (2, at(2, 7)), (3, at(2, 7))]);
    assert_eq!(
        pick_leader(&set, &[], &all_equal),
        Some(id(3)),
        "position order, not id order"
    );
    let two_equal = reports(&[(1, at(2, 7)), (2, at(2, 7))]);
    assert_eq!(pick_leader(&set, &[], &two_equal), Some(id(1)));
}

#[test]
fn a_dead_reporter_neither_wins_nor_counts() {
    let set = members(&[(1, DEAD), (2, LIVE), (3, LIVE)]);
    let with_dead = reports(&[(1, at(9, 900)), (2, at(4, 100))]);
    assert_eq!(
        pick_leader(&set, &[], &with_dead),
        None,
        "one live report of three"
    );
    let majority_live = reports(&[(1, at(9, 900)), (2, at(4, 100)), (3, at(4, 90))]);
    assert_eq!(pick_leader(&set, &[], &majority_live), Some(id(2)));
}

#[test]
fn a_changing_set_elects_only_with_a_majority_of_both() {
    // Broker 3 died and is replaced by 4: {1, 2, 3} → {1, 2, 4}.
    let set = members(&[(1, LIVE), (2, LIVE), (4, LIVE)]);
    let previous = [id(1), id(2), id(3)];
    let one_old = reports(&[(1, at(4, 100)), (4, at(0, 0))]);
    assert_eq!(
        pick_leader(&set, &previous, &one_old),
        None,
        "a majority of the new set, one of the old: 2 may hold what 1 lacks"
    );
    let both_old = reports(&[(1, at(4, 100)), (2, at(4, 120))]);
    assert_eq!(pick_leader(&set, &previous, &both_old), Some(id(2)));
}

#[test]
fn reports_from_outside_the_set_do_not_count() {
    let set = members(&[(1, LIVE), (2, LIVE), (3, LIVE)]);
    let outsiders = reports(&[(1, at(1, 1)), (7, at(9, 9)), (8, at(9, 9))]);
    assert_eq!(pick_leader(&set, &[], &outsiders), None);
}

#[test]
fn a_report_for_the_running_election_is_recorded_and_others_ignored() {
    let electing = partition(5, true, None);
    assert_eq!(
        judge(&electing, id(2), &report(5, reported(4, 80))),
        Ok(Verdict::Record(at(4, 80)))
    );
    assert_eq!(
        judge(&electing, id(2), &report(4, reported(3, 80))),
        Ok(Verdict::Ignore),
        "a stale epoch"
    );
    assert_eq!(
        judge(&electing, id(2), &report(6, reported(3, 80))),
        Ok(Verdict::Ignore),
        "an epoch not started yet"
    );
    let decided = partition(5, false, Some(1));
    assert_eq!(
        judge(&decided, id(2), &report(5, reported(4, 80))),
        Ok(Verdict::Ignore),
        "after the pick"
    );
    let mut unreplicated = partition(5, false, Some(1));
    unreplicated.replication_factor = 1;
    unreplicated.replicas.truncate(1);
    assert_eq!(
        judge(
            &unreplicated,
            id(1),
            &report(5, ElectionOutcome::Refused { promised: e(9) })
        ),
        Ok(Verdict::Ignore)
    );
}

#[test]
fn a_report_from_a_non_member_is_refused() {
    let electing = partition(5, true, None);
    assert_eq!(
        judge(&electing, id(7), &report(5, reported(4, 80))),
        Err(NotReplica { reporter: id(7) })
    );
}

#[test]
fn a_refusal_restarts_the_election_above_both_epochs() {
    let electing = partition(5, true, None);
    let refused = |promised| {
        report(
            5,
            ElectionOutcome::Refused {
                promised: e(promised),
            },
        )
    };
    assert_eq!(
        judge(&electing, id(3), &refused(8)),
        Ok(Verdict::Restart { epoch: e(9) })
    );
    assert_eq!(
        judge(&electing, id(3), &refused(5)),
        Ok(Verdict::Restart { epoch: e(6) })
    );
    let decided = partition(5, false, Some(2));
    assert_eq!(
        judge(&decided, id(2), &refused(5)),
        Ok(Verdict::Restart { epoch: e(6) }),
        "the winner refuses to lead"
    );
    assert_eq!(
        judge(&decided, id(3), &refused(5)),
        Ok(Verdict::Ignore),
        "a follower's refusal does not unseat a leader"
    );
    assert_eq!(
        judge(
            &electing,
            id(3),
            &report(4, ElectionOutcome::Refused { promised: e(9) })
        ),
        Ok(Verdict::Ignore),
        "a refusal of an older epoch"
    );
}

fn key() -> PartitionKey {
    (
        StreamName::new("orders").expect("name"),
        PartitionId::new(0),
    )
}

#[test]
fn ballots_keep_one_report_per_member_and_reset_on_a_new_epoch() {
    let mut ballots = Ballots::default();
    ballots.record(&key(), LeaderEpoch::new(5), id(1), at(4, 10), 0);
    let reports = ballots
        .record(&key(), LeaderEpoch::new(5), id(1), at(4, 12), 1)
        .clone();
    assert_eq!(reports, self::reports(&[(1, at(4, 12))]));
    let newer = ballots
        .record(&key(), LeaderEpoch::new(6), id(2), at(4, 12), 2)
        .clone();
    assert_eq!(
        newer,
        self::reports(&[(2, at(4, 12))]),
        "epoch 5's reports are gone"
    );
    ballots.close(&key());
    assert_eq!(ballots.len(), 0);
}

#[test]
fn a_partition_whose_leader_is_gone_gets_an_election_at_the_next_epoch() {
    let mut orphaned = partition(4, false, Some(1));
    orphaned.replicas = members(&[(1, DEAD), (2, LIVE), (3, LIVE)]);
    let healthy = partition(4, false, Some(2));
    let mut ballots = Ballots::default();
    let starts = plan(&[orphaned, healthy], &mut ballots, false, 1_000, 3_000);
    assert_eq!(starts.len(), 1, "a live leader is left alone");
    assert_eq!((starts[0].expected_epoch, starts[0].epoch), (e(4), e(5)));
    assert_eq!(ballots.len(), 1, "the new election's ballot is open");
}

#[test]
fn an_election_is_started_again_after_the_timeout_only_with_a_live_majority() {
    let electing = partition(5, true, None);
    let mut ballots = Ballots::default();
    assert!(
        plan(
            std::slice::from_ref(&electing),
            &mut ballots,
            false,
            1_000,
            3_000
        )
        .is_empty()
    );
    assert!(
        plan(
            std::slice::from_ref(&electing),
            &mut ballots,
            false,
            3_999,
            3_000
        )
        .is_empty()
    );
    let mut minority = electing.clone();
    minority.replicas = members(&[(1, DEAD), (2, DEAD), (3, LIVE)]);
    assert!(
        plan(&[minority], &mut ballots, false, 4_000, 3_000).is_empty(),
        "no point electing again without a majority"
    );
    let again = plan(&[electing], &mut ballots, false, 4_000, 3_000);
    assert_eq!((again[0].expected_epoch, again[0].epoch), (e(5), e(6)));
}

#[test]
fn a_new_controlplane_leader_restarts_every_running_election() {
    let electing = partition(5, true, None);
    let mut ballots = Ballots::default();
    let starts = plan(&[electing], &mut ballots, true, 0, 3_000);
    assert_eq!((starts[0].expected_epoch, starts[0].epoch), (e(5), e(6)));
}

#[test]
fn ballots_of_decided_partitions_are_dropped() {
    let mut ballots = Ballots::default();
    ballots.record(&key(), LeaderEpoch::new(5), id(1), at(4, 10), 0);
    assert!(plan(&[], &mut ballots, false, 10, 3_000).is_empty());
    assert_eq!(ballots.len(), 0);
}

#[test]
fn a_ballot_times_out_after_the_election_timeout() {
    let mut ballots = Ballots::default();
    assert!(!ballots.any_timed_out(10_000, 3_000), "no elections");
    ballots.open(&key(), LeaderEpoch::new(5), 1_000);
    assert!(!ballots.any_timed_out(3_999, 3_000));
    assert!(ballots.any_timed_out(4_000, 3_000));
}

#[test]
fn a_leader_cut_off_from_its_replicas_is_deposed_only_if_the_others_can_elect() {
    let leading = partition(4, false, Some(1));
    let start = depose(&leading, id(1), LeaderEpoch::new(4)).expect("deposed");
    assert_eq!((start.expected_epoch, start.epoch), (e(4), e(5)));
    // Only the leader of the reported epoch, and not during an election.
    assert_eq!(depose(&leading, id(2), LeaderEpoch::new(4)), None);
    assert_eq!(depose(&leading, id(1), LeaderEpoch::new(3)), None);
    assert_eq!(
        depose(&partition(4, true, None), id(1), LeaderEpoch::new(4)),
        None
    );
    // The two others must be live: one alone is no majority, so the isolated leader stays.
    let mut one_dead = partition(4, false, Some(1));
    one_dead.replicas = members(&[(1, LIVE), (2, LIVE), (3, DEAD)]);
    assert_eq!(depose(&one_dead, id(1), LeaderEpoch::new(4)), None);
    // While the set changes, the others must also hold a majority of the previous set.
    let mut changing = partition(4, false, Some(1));
    changing.replicas = members(&[(1, LIVE), (2, LIVE), (4, LIVE)]);
    changing.previous = vec![id(1), id(2), id(3)];
    assert_eq!(depose(&changing, id(1), LeaderEpoch::new(4)), None);
}

#[test]
fn a_deposed_leader_has_no_say_in_the_election_that_replaces_it() {
    let key = (
        StreamName::new("orders").expect("name"),
        PartitionId::new(0),
    );
    let electing = partition(5, true, None);
    let mut ballots = Ballots::default();
    ballots.open_excluding(&key, LeaderEpoch::new(5), 0, id(1));
    // The deposed leader holds the longest log (records no majority acknowledged).
    let counted = ballots
        .record(&key, LeaderEpoch::new(5), id(1), at(4, 900), 1)
        .clone();
    assert!(counted.is_empty());
    assert_eq!(
        pick_leader(&electing.replicas, &electing.previous, &counted),
        None
    );
    ballots.record(&key, LeaderEpoch::new(5), id(2), at(4, 700), 2);
    let counted = ballots
        .record(&key, LeaderEpoch::new(5), id(3), at(4, 650), 3)
        .clone();
    assert_eq!(
        pick_leader(&electing.replicas, &electing.previous, &counted),
        Some(id(2))
    );
    // The reconciler looking at the running election keeps the exclusion.
    let _ = plan(
        std::slice::from_ref(&electing),
        &mut ballots,
        false,
        4,
        10_000,
    );
    assert!(
        ballots
            .record(&key, LeaderEpoch::new(5), id(1), at(4, 900), 5)
            .get(&id(1))
            .is_none()
    );
    // A later election (the first timed out) counts everyone again.
    assert!(
        ballots
            .record(&key, LeaderEpoch::new(6), id(1), at(4, 900), 6)
            .contains_key(&id(1))
    );
}

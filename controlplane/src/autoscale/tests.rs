//! Scenario tests of the autoscaler: a simulated cluster whose replicas register as soon as
//! they are started and share the load evenly; time is a number.

use super::*;

const SECOND: u64 = 1_000;

fn policy() -> ScalingPolicy {
    ScalingPolicy {
        min_replicas: 0,
        max_replicas: 10,
        target_bytes_per_second: 1_000,
        target_consumers: 0,
        hysteresis_percent: 20,
        scale_up_cooldown_ms: 10 * SECOND,
        scale_down_cooldown_ms: 30 * SECOND,
    }
}

/// A cluster as the autoscaler sees it, carrying out every decision at once.
struct Sim {
    policy: ScalingPolicy,
    autoscaler: Autoscaler,
    replicas: Vec<ReplicaLoad>,
    /// Started but not registered yet (only when `register_at_once` is false).
    starting: u32,
    register_at_once: bool,
    history_read_bytes_per_second: u64,
    now_ms: u64,
    next_id: u32,
    /// Every replica stopped so far, in order.
    stopped: Vec<String>,
}

impl Sim {
    fn new(policy: ScalingPolicy) -> Sim {
        Sim {
            policy,
            autoscaler: Autoscaler::new(),
            replicas: Vec::new(),
            starting: 0,
            register_at_once: true,
            history_read_bytes_per_second: 0,
            now_ms: 1_000_000,
            next_id: 1,
            stopped: Vec::new(),
        }
    }

    /// Moves time on by `ms` and decides once; carries the decision out.
    fn tick(&mut self, ms: u64) -> Decision {
        self.now_ms += ms;
        let decision = self.autoscaler.decide(&Observation {
            policy: self.policy,
            replicas: &self.replicas,
            starting: self.starting,
            history_read_bytes_per_second: self.history_read_bytes_per_second,
            now_ms: self.now_ms,
            drain_timeout_ms: 60 * SECOND,
        });
        for id in &decision.drain {
            let replica = self.replicas.iter_mut().find(|r| &r.id == id);
            replica.expect("drained replica exists").state = ReadReplicaState::Draining;
        }
        self.replicas.retain(|r| !decision.stop.contains(&r.id));
        self.stopped.extend(decision.stop.iter().cloned());
        if self.register_at_once {
            for _ in 0..decision.start {
                self.add_live(0, 0);
            }
        } else {
            self.starting += decision.start;
        }
        decision
    }

    fn add_live(&mut self, bytes: u64, consumers: u32) -> String {
        let id = format!("r-{}", self.next_id);
        self.next_id += 1;
        self.replicas.push(ReplicaLoad {
            id: id.clone(),
            state: ReadReplicaState::Live,
            bytes_served_per_second: bytes,
            consumers,
        });
        id
    }

    /// Spreads a total load evenly over the live replicas (consumers follow the bytes); a
    /// draining replica keeps what it has.
    fn load(&mut self, total_bytes: u64) {
        let live = self
            .replicas
            .iter()
            .filter(|r| r.state == ReadReplicaState::Live)
            .count() as u64;
        for replica in &mut self.replicas {
            if replica.state == ReadReplicaState::Live {
                replica.bytes_served_per_second = total_bytes / live.max(1);
                replica.consumers = u32::from(replica.bytes_served_per_second > 0);
            }
        }
    }

    fn live(&self) -> usize {
        self.replicas
            .iter()
            .filter(|r| r.state == ReadReplicaState::Live)
            .count()
    }

    fn draining(&self) -> Vec<&str> {
        self.replicas
            .iter()
            .filter(|r| r.state == ReadReplicaState::Draining)
            .map(|r| r.id.as_str())
            .collect()
    }
}

#[test]
fn rising_load_adds_replicas_as_the_target_needs_after_each_cooldown() {
    let mut sim = Sim::new(ScalingPolicy {
        min_replicas: 1,
        ..policy()
    });
    let first = sim.tick(SECOND);
    assert_eq!((first.desired, first.start), (1, 1), "up to the minimum");
    // 1 150 B/s on one replica: above the target, inside the band (≤ 1 200).
    sim.load(1_150);
    assert!(sim.tick(20 * SECOND).is_idle());
    sim.load(2_500);
    let up = sim.tick(SECOND);
    assert_eq!(up.change.map(|c| c.0), Some(Direction::Up));
    assert_eq!((up.desired, up.start), (3, 2), "ceil(2 500 / 1 000)");
    assert_eq!(sim.live(), 3);
    // Still rising, but within the up cooldown (10 s): nothing.
    sim.load(9_000);
    assert!(sim.tick(5 * SECOND).is_idle());
    let again = sim.tick(5 * SECOND);
    assert_eq!((again.desired, again.start), (9, 6));
}

#[test]
fn falling_load_drains_the_least_loaded_and_stops_them_once_idle() {
    let mut sim = Sim::new(policy());
    for bytes in [900, 100, 800, 850] {
        sim.add_live(bytes, 1);
    }
    assert!(sim.tick(SECOND).is_idle(), "adopts the 4 it finds");
    assert_eq!(sim.autoscaler.desired(), Some(4));
    // 1 300 B/s in all fits in 2 below 800 each (2 × 800 = 1 600 > 1 300); 1 would not.
    for (replica, bytes) in sim.replicas.iter_mut().zip([700, 100, 300, 200]) {
        replica.bytes_served_per_second = bytes;
    }
    let down = sim.tick(SECOND);
    assert_eq!(down.change.map(|c| c.0), Some(Direction::Down));
    assert_eq!(down.desired, 2);
    assert_eq!(
        down.drain,
        ["r-2", "r-4"],
        "the least loaded: 100 and 200 B/s"
    );
    assert!(
        down.stop.is_empty(),
        "drained ones still have their consumers"
    );
    // Their consumers leave; they are stopped on the next decision, once each.
    for replica in &mut sim.replicas {
        if replica.state == ReadReplicaState::Draining {
            replica.consumers = 0;
        }
    }
    let stop = sim.tick(SECOND);
    assert_eq!(stop.stop, ["r-2", "r-4"]);
    assert_eq!(stop.start, 0, "draining replicas are not replaced");
    assert!(sim.tick(SECOND).is_idle());
    assert_eq!(sim.live(), 2);
}

#[test]
fn a_draining_replica_that_keeps_its_consumers_is_stopped_after_the_drain_timeout() {
    let mut sim = Sim::new(policy());
    sim.add_live(900, 3);
    sim.add_live(0, 2);
    assert!(sim.tick(SECOND).is_idle());
    // 900 B/s fit in one replica below 800? No: wait for it to fall to 500.
    sim.replicas[0].bytes_served_per_second = 500;
    let down = sim.tick(SECOND);
    assert_eq!(down.drain, ["r-2"]);
    assert!(
        sim.tick(30 * SECOND).stop.is_empty(),
        "2 consumers still read"
    );
    assert_eq!(sim.draining(), ["r-2"]);
    let late = sim.tick(30 * SECOND);
    assert_eq!(late.stop, ["r-2"], "60 s after it was first seen draining");
}

#[test]
fn a_load_wobbling_around_the_target_does_not_flap_the_count() {
    let mut sim = Sim::new(policy());
    for _ in 0..4 {
        sim.add_live(0, 0);
    }
    let mut changes = 0;
    // 4 replicas, 3 300 to 4 700 B/s: per replica 825 to 1 175, inside 800 .. 1 200, and
    // never fitting in 3 below 800 (2 400).
    for step in 0..200u64 {
        let wobble = if step % 2 == 0 { 3_300 } else { 4_700 };
        sim.load(wobble + (step * 37) % 100);
        let decision = sim.tick(7 * SECOND);
        changes += usize::from(decision.change.is_some());
    }
    assert_eq!(changes, 0);
    assert_eq!(sim.live(), 4);
}

#[test]
fn a_load_that_swings_wide_changes_the_count_at_most_once_per_cooldown() {
    let mut sim = Sim::new(policy());
    sim.add_live(0, 0);
    let mut changes = Vec::new();
    for step in 0..60u64 {
        sim.load(if step % 2 == 0 { 5_000 } else { 200 });
        if let Some((direction, _)) = sim.tick(2 * SECOND).change {
            changes.push((sim.now_ms, direction));
        }
    }
    for pair in changes.windows(2) {
        let ((at, direction), (next, _)) = (pair[0], pair[1]);
        let cooldown = match direction {
            Direction::Up => 10 * SECOND,
            Direction::Down => 30 * SECOND,
        };
        assert!(next - at >= cooldown, "{changes:?}");
    }
    assert!(changes.len() <= 60 * 2 / 10, "{changes:?}");
}

#[test]
fn a_replica_whose_lease_lapsed_is_replaced_at_once() {
    let mut sim = Sim::new(policy());
    sim.add_live(0, 0);
    sim.load(2_500);
    let up = sim.tick(SECOND);
    assert_eq!(up.desired, 3);
    sim.load(2_500);
    // r-2 dies: the shell no longer passes dead replicas in.
    sim.replicas.retain(|r| r.id != "r-2");
    let replaced = sim.tick(SECOND);
    assert_eq!(replaced.change, None, "a replacement, not a change");
    assert_eq!((replaced.desired, replaced.start), (3, 1));
    assert_eq!(sim.live(), 3);
}

#[test]
fn replicas_still_starting_are_not_started_twice() {
    let mut sim = Sim::new(policy());
    sim.register_at_once = false;
    sim.history_read_bytes_per_second = 3_000;
    let first = sim.tick(SECOND);
    assert_eq!((first.desired, first.start), (3, 3));
    let waiting = sim.tick(SECOND);
    assert_eq!(waiting.start, 0, "3 are starting");
}

#[test]
fn an_idle_cluster_scales_to_zero_when_the_minimum_is_zero() {
    let mut sim = Sim::new(policy());
    sim.add_live(0, 0);
    sim.add_live(0, 0);
    let down = sim.tick(SECOND);
    assert_eq!((down.desired, down.drain.len()), (0, 2));
    let stop = sim.tick(SECOND);
    assert_eq!(stop.stop.len(), 2);
    assert!(sim.replicas.is_empty());
    assert!(sim.tick(SECOND).is_idle(), "zero stays zero while idle");

    let mut kept = Sim::new(ScalingPolicy {
        min_replicas: 1,
        ..policy()
    });
    kept.add_live(0, 0);
    assert!(kept.tick(SECOND).is_idle(), "the minimum is kept");
}

#[test]
fn history_reads_on_the_brokers_start_the_first_replica_despite_the_cooldown() {
    let mut sim = Sim::new(policy());
    sim.add_live(0, 0);
    let down = sim.tick(SECOND);
    assert_eq!(down.desired, 0);
    assert_eq!(sim.tick(SECOND).stop, ["r-1"]);
    assert!(sim.replicas.is_empty());
    // Two seconds after scaling down (cooldown 30 s), a reader of history arrives.
    sim.history_read_bytes_per_second = 300;
    let up = sim.tick(SECOND);
    assert_eq!(up.change, Some((Direction::Up, "demand with no replica")));
    assert_eq!((up.desired, up.start), (1, 1));

    let mut heavy = Sim::new(policy());
    heavy.history_read_bytes_per_second = 4_200;
    assert_eq!(heavy.tick(SECOND).start, 5, "ceil(4 200 / 1 000)");
}

#[test]
fn the_count_stays_within_the_policy_bounds() {
    let mut sim = Sim::new(ScalingPolicy {
        max_replicas: 3,
        ..policy()
    });
    sim.history_read_bytes_per_second = 50_000;
    let up = sim.tick(SECOND);
    assert_eq!((up.desired, up.start), (3, 3));
    sim.load(50_000);
    assert!(sim.tick(60 * SECOND).is_idle(), "at the maximum");

    // The operator lowers the maximum: the count follows at once, cooldown or not.
    sim.policy.max_replicas = 1;
    let capped = sim.tick(SECOND);
    assert_eq!(
        capped.change,
        Some((Direction::Down, "clamped to the policy's bounds"))
    );
    assert_eq!(capped.drain.len(), 2);
    sim.policy.min_replicas = 2;
    sim.policy.max_replicas = 2;
    let raised = sim.tick(SECOND);
    assert_eq!((raised.desired, raised.start), (2, 1));
}

#[test]
fn consumers_are_a_signal_of_their_own() {
    let mut sim = Sim::new(ScalingPolicy {
        target_bytes_per_second: 0,
        target_consumers: 100,
        ..policy()
    });
    sim.add_live(1 << 40, 250);
    let up = sim.tick(SECOND);
    assert_eq!(
        (up.desired, up.start),
        (3, 2),
        "ceil(250 / 100), bytes ignored"
    );
}

//! The autoscaler's decisions: how many read replicas to run, and which to start, drain and
//! stop. A pure state machine: the shell ([`crate::autoscale_loop`]) reads the policy, the
//! replicas and the brokers' demand, passes them in with the time, and carries out the
//! [`Decision`] through a driver. No I/O and no clock here.
//!
//! **The rule.** Let `L` be the total load, per signal: bytes per second served by every
//! live and draining replica plus the history reads the brokers served themselves, and the
//! consumers of every live and draining replica. Let `n` be the desired count so far, `T`
//! the per-replica target of a signal (a target of 0 leaves that signal out) and `h` the
//! hysteresis as a fraction.
//!
//! - **Up** when, for some signal, `L / n > T · (1 + h)`: to `max over signals of
//!   ceil(L / T)`, so that each replica is at or under its target again.
//! - **Down** when, for every signal, the load fits in `n − 1` replicas below the lower
//!   band, `L / (n − 1) < T · (1 − h)` (an idle signal, `L = 0`, always fits): to the
//!   smallest `m` with `L / m < T · (1 − h)` for every signal (0 when idle).
//! - Between the two bands nothing changes, so a load that wobbles around the target does
//!   not flap the count. After a change, no other change for the cooldown of its
//!   direction (`scale_up_cooldown_ms` or `scale_down_cooldown_ms`).
//! - **From zero**: with no replica desired, any load at all (typically brokers serving
//!   history themselves) asks for `max(1, ceil(L / T))`, cooldown or not: nobody else can
//!   take it.
//! - The count is always clamped to `[min_replicas, max_replicas]`; the clamp ignores the
//!   cooldowns.
//!
//! **Convergence.** Replicas that are live or starting count toward the desired count.
//! Fewer (one died: its lease lapsed) → start the difference at once; this is a replacement,
//! not a change, so no cooldown applies. More → drain the least loaded live ones (fewest
//! consumers, then fewest bytes, then id). A draining replica is stopped once it reports no
//! consumers, or `drain_timeout_ms` after it was first seen draining.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use floe_wire::admin::{ReadReplicaState, ScalingPolicy};

/// One replica as the autoscaler sees it. Dead replicas are left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLoad {
    pub id: String,
    /// `Live` or `Draining`.
    pub state: ReadReplicaState,
    pub bytes_served_per_second: u64,
    pub consumers: u32,
}

/// Everything one decision looks at.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub policy: ScalingPolicy,
    /// Live and draining replicas.
    pub replicas: &'a [ReplicaLoad],
    /// Replicas the driver started that have not registered yet.
    pub starting: u32,
    /// History bytes per second the live brokers served to consumers themselves.
    pub history_read_bytes_per_second: u64,
    /// Milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// A draining replica is stopped this long after it was first seen draining, consumers
    /// or not.
    pub drain_timeout_ms: u64,
}

/// Which way the desired count moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Up,
    Down,
}

impl Direction {
    /// The metric label and log word.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// What to do now. Carry it out in order: drain (mark `draining` in the store), stop, start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Decision {
    /// The desired count of live replicas after this decision.
    pub desired: u32,
    /// Set when `desired` changed: the direction, and why.
    pub change: Option<(Direction, &'static str)>,
    /// Replicas to start.
    pub start: u32,
    /// Live replicas to mark draining: clients stop sending them new readers.
    pub drain: Vec<String>,
    /// Draining replicas to stop now. Each is named once; it is named again only if it is
    /// still there `drain_timeout_ms` later.
    pub stop: Vec<String>,
    /// The total load it decided on: bytes per second and consumers.
    pub load_bytes_per_second: u64,
    pub load_consumers: u64,
}

impl Decision {
    /// Whether there is anything to do or log.
    pub fn is_idle(&self) -> bool {
        self.change.is_none() && self.start == 0 && self.drain.is_empty() && self.stop.is_empty()
    }
}

/// The autoscaler's memory between decisions: the desired count, the last change, when each
/// draining replica was first seen draining, and the stops already asked for.
///
/// Inputs: [`Autoscaler::decide`], once per interval, with a fresh [`Observation`]. Output:
/// the [`Decision`]. A new controlplane leader starts a new one, which adopts the count of
/// replicas it finds as its desired count.
#[derive(Debug, Default)]
pub struct Autoscaler {
    desired: Option<u32>,
    last_change: Option<(Direction, u64)>,
    draining_since: HashMap<String, u64>,
    stopping: HashMap<String, u64>,
}

/// One load signal: its total and its per-replica target (0: not a signal).
#[derive(Debug, Clone, Copy)]
struct Signal {
    load: u128,
    target: u128,
}

impl Autoscaler {
    pub fn new() -> Autoscaler {
        Autoscaler::default()
    }

    /// The desired count, once a decision was made.
    pub fn desired(&self) -> Option<u32> {
        self.desired
    }

    /// Decides from `observation`; see the module's documentation for the rule.
    pub fn decide(&mut self, observation: &Observation<'_>) -> Decision {
        let policy = &observation.policy;
        let now = observation.now_ms;
        let live: Vec<&ReplicaLoad> = observation
            .replicas
            .iter()
            .filter(|r| r.state == ReadReplicaState::Live)
            .collect();
        let active = u32::try_from(live.len())
            .unwrap_or(u32::MAX)
            .saturating_add(observation.starting);
        let load_bytes = observation
            .replicas
            .iter()
            .map(|r| r.bytes_served_per_second)
            .fold(
                observation.history_read_bytes_per_second,
                u64::saturating_add,
            );
        let load_consumers: u64 = observation
            .replicas
            .iter()
            .map(|r| u64::from(r.consumers))
            .sum();
        let signals = [
            Signal {
                load: u128::from(load_bytes),
                target: u128::from(policy.target_bytes_per_second),
            },
            Signal {
                load: u128::from(load_consumers),
                target: u128::from(policy.target_consumers),
            },
        ];
        let current = self.desired.unwrap_or(active);
        let (by_load, reason) = self.by_load(policy, &signals, current, now);
        let upper = policy.max_replicas.max(policy.min_replicas);
        let desired = by_load.clamp(policy.min_replicas, upper);
        let change = (desired != current).then(|| {
            let direction = if desired > current {
                Direction::Up
            } else {
                Direction::Down
            };
            let why = match reason {
                Some((_, why)) if desired == by_load => why,
                _ => "clamped to the policy's bounds",
            };
            (direction, why)
        });
        if let Some((direction, _)) = change {
            self.last_change = Some((direction, now));
        }
        self.desired = Some(desired);
        let stop = self.stops(observation);
        let drain = least_loaded(&live, active.saturating_sub(desired));
        for id in &drain {
            // The drain timeout counts from now, not from when the store shows it.
            self.draining_since.insert(id.clone(), now);
        }
        Decision {
            desired,
            change,
            start: desired.saturating_sub(active),
            drain,
            stop,
            load_bytes_per_second: load_bytes,
            load_consumers,
        }
    }

    /// The desired count from the load alone, and why it moved.
    fn by_load(
        &self,
        policy: &ScalingPolicy,
        signals: &[Signal],
        current: u32,
        now: u64,
    ) -> (u32, Option<(Direction, &'static str)>) {
        let loaded = signals.iter().any(|s| s.load > 0);
        if current == 0 {
            if !loaded {
                return (0, None);
            }
            let wanted = signals
                .iter()
                .filter(|s| s.target > 0)
                .map(|s| saturating_u32(s.load.div_ceil(s.target)))
                .fold(1, u32::max);
            return (wanted, Some((Direction::Up, "demand with no replica")));
        }
        if !self.cooled_down(policy, now) {
            return (current, None);
        }
        let h = u128::from(policy.hysteresis_percent.min(100));
        let n = u128::from(current);
        let over = signals
            .iter()
            .any(|s| s.target > 0 && s.load * 100 > s.target * (100 + h) * n);
        if over {
            let wanted = signals
                .iter()
                .filter(|s| s.target > 0)
                .map(|s| saturating_u32(s.load.div_ceil(s.target)))
                .fold(current.saturating_add(1), u32::max);
            return (wanted, Some((Direction::Up, "load above the upper band")));
        }
        let enabled: Vec<&Signal> = signals.iter().filter(|s| s.target > 0).collect();
        if enabled.is_empty() {
            return (current, None);
        }
        // The smallest count with every signal below the lower band.
        let fitting = enabled
            .iter()
            .map(|s| {
                let band = s.target * (100 - h);
                match (s.load, band) {
                    (0, _) => Some(0),
                    (_, 0) => None,
                    (load, band) => Some(saturating_u32(load * 100 / band + 1)),
                }
            })
            .try_fold(0, |most, m| m.map(|m| most.max(m)));
        match fitting {
            Some(m) if m < current => (m, Some((Direction::Down, "load below the lower band"))),
            _ => (current, None),
        }
    }

    fn cooled_down(&self, policy: &ScalingPolicy, now: u64) -> bool {
        match self.last_change {
            None => true,
            Some((direction, at)) => {
                let cooldown = match direction {
                    Direction::Up => policy.scale_up_cooldown_ms,
                    Direction::Down => policy.scale_down_cooldown_ms,
                };
                now.saturating_sub(at) >= cooldown
            }
        }
    }

    /// Draining replicas that are idle or past the drain timeout, not already being stopped.
    fn stops(&mut self, observation: &Observation<'_>) -> Vec<String> {
        let now = observation.now_ms;
        let draining: HashSet<&str> = observation
            .replicas
            .iter()
            .filter(|r| r.state == ReadReplicaState::Draining)
            .map(|r| r.id.as_str())
            .collect();
        // Entries of replicas no longer draining are dropped (those the previous decision
        // drained are draining by now).
        self.draining_since
            .retain(|id, _| draining.contains(id.as_str()));
        self.stopping.retain(|id, at| {
            draining.contains(id.as_str()) && now.saturating_sub(*at) < observation.drain_timeout_ms
        });
        let mut stop = Vec::new();
        for replica in observation.replicas {
            if replica.state != ReadReplicaState::Draining
                || self.stopping.contains_key(&replica.id)
            {
                continue;
            }
            let since = *self.draining_since.entry(replica.id.clone()).or_insert(now);
            let timed_out = now.saturating_sub(since) >= observation.drain_timeout_ms;
            if replica.consumers == 0 || timed_out {
                self.stopping.insert(replica.id.clone(), now);
                stop.push(replica.id.clone());
            }
        }
        stop
    }
}

/// The ids of the `count` least loaded replicas: fewest consumers, then fewest bytes, then
/// the lowest id.
fn least_loaded(live: &[&ReplicaLoad], count: u32) -> Vec<String> {
    let mut order: Vec<&&ReplicaLoad> = live.iter().collect();
    order.sort_by(|a, b| {
        (a.consumers, a.bytes_served_per_second, &a.id).cmp(&(
            b.consumers,
            b.bytes_served_per_second,
            &b.id,
        ))
    });
    order
        .into_iter()
        .take(usize::try_from(count).unwrap_or(usize::MAX))
        .map(|r| r.id.clone())
        .collect()
}

fn saturating_u32(value: u128) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

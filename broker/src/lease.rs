//! The lease a managed broker holds from its controlplane, as the broker's own monotonic
//! clock measures it, and the epochs its assignments give the partitions it leads: together
//! they say whether, and in which epoch, it may write a partition without replicas.
//!
//! The controlplane counts a broker's lease from when a heartbeat *arrives*; the broker counts
//! it from when it *sent* the heartbeat the controlplane answered, which is earlier, and gives
//! up a margin at its end. So, as long as the two clocks run at about the same rate (both are
//! monotonic: no jumps, only drift, which is parts per million), the broker stops writing
//! before the controlplane can consider its lease lapsed and move its partitions. See
//! `docs/controlplane.md`, "Fencing partitions without replicas".
//!
//! No I/O and no clock of its own: the time comes in as an argument.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use floe_wire::LeaderEpoch;

/// The share of the lease the broker gives up at its end: a tenth...
const MARGIN_SHARE: u32 = 10;
/// ...but at least this much.
const MARGIN_MIN: Duration = Duration::from_millis(100);

/// How long before the end of a lease of `lease` the broker stops writing: a tenth of it, at
/// least 100 ms, and never more than half the lease.
pub(crate) fn margin(lease: Duration) -> Duration {
    (lease / MARGIN_SHARE).max(MARGIN_MIN).min(lease / 2)
}

/// A managed broker's lease and the epochs of the partitions it leads. Inputs:
/// [`Lease::registered`] and [`Lease::renewed`] (answers the controlplane gave, with the
/// instant the call was sent), [`Lease::lost`] (the controlplane says the lease lapsed),
/// [`Lease::assigned`] (a version of the assignments, before it is applied). Output:
/// [`Lease::write_epoch`], asked just before appending and again just before acknowledging.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Partitions without replicas are written, and writes acknowledged, only before this
    /// instant; `None`: no lease (never taken, or lost).
    valid_until: Option<Instant>,
    /// Registering again means the lease may have lapsed and the controlplane moved
    /// partitions away meanwhile: writing resumes only once assignments of this version
    /// (the one the first heartbeat after the registration names) or a later one are known.
    /// `None`: not known yet; nothing is written.
    must_know: Option<u64>,
    /// The version of `epochs`.
    known: Option<u64>,
    /// The epoch of every partition this broker leads, from the assignments of `known`.
    epochs: HashMap<(String, u32), LeaderEpoch>,
}

impl Lease {
    /// A registration sent at `sent` was answered: a new lease of `lease`. Nothing is
    /// written until the next heartbeat's answer names the assignment version to wait for
    /// ([`Lease::renewed`]).
    pub(crate) fn registered(&self, sent: Instant, lease: Duration) {
        let mut state = self.lock();
        state.valid_until = Some(until(sent, lease));
        state.must_know = None;
    }

    /// A heartbeat sent at `sent` was answered with the lease renewed for `lease`, while
    /// the assignments were at `version`. Only a lease taken by registering is renewed: once
    /// lost, it is taken again by registering.
    pub(crate) fn renewed(&self, sent: Instant, lease: Duration, version: u64) {
        let mut state = self.lock();
        let Some(known) = state.valid_until else {
            return;
        };
        // Heartbeats go one at a time, but a late answer must never shorten the lease.
        state.valid_until = Some(known.max(until(sent, lease)));
        state.must_know.get_or_insert(version);
    }

    /// The controlplane says the lease lapsed (or forgot this broker): stop at once.
    pub(crate) fn lost(&self) {
        let mut state = self.lock();
        state.valid_until = None;
        state.must_know = None;
    }

    /// The assignments of `version` give this broker the partitions in `epochs` to lead.
    pub(crate) fn assigned(&self, version: u64, epochs: HashMap<(String, u32), LeaderEpoch>) {
        let mut state = self.lock();
        state.known = Some(version);
        state.epochs = epochs;
    }

    /// The epoch the latest assignments give `partition` of `stream`, if this broker leads it,
    /// lease or not.
    pub(crate) fn epoch(&self, stream: &str, partition: u32) -> Option<LeaderEpoch> {
        self.lock()
            .epochs
            .get(&(stream.to_string(), partition))
            .copied()
    }

    /// The epoch this broker may write `partition` of `stream` in at `now`: the one its
    /// assignments give it, while its lease holds and its assignments are current.
    pub(crate) fn write_epoch(
        &self,
        stream: &str,
        partition: u32,
        now: Instant,
    ) -> Option<LeaderEpoch> {
        let state = self.lock();
        let holds = state.valid_until.is_some_and(|until| now < until);
        let current =
            matches!((state.must_know, state.known), (Some(must), Some(known)) if known >= must);
        if !(holds && current) {
            return None;
        }
        state.epochs.get(&(stream.to_string(), partition)).copied()
    }

    /// Until when the lease holds, as this broker counts it.
    #[cfg(test)]
    fn valid_until(&self) -> Option<Instant> {
        self.lock().valid_until
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The end of a lease of `lease` renewed by a call sent at `sent`, less the margin.
fn until(sent: Instant, lease: Duration) -> Instant {
    sent + lease.saturating_sub(margin(lease))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(10);

    fn epochs(pairs: &[(&str, u32, u32)]) -> HashMap<(String, u32), LeaderEpoch> {
        pairs
            .iter()
            .map(|&(s, p, e)| ((s.to_string(), p), LeaderEpoch::new(e)))
            .collect()
    }

    /// A lease taken at `t0` through registration and a first heartbeat, with assignments
    /// of version 5 giving `s`/0 at epoch 3.
    fn leased(t0: Instant) -> Lease {
        let lease = Lease::default();
        lease.registered(t0, LEASE);
        lease.assigned(5, epochs(&[("s", 0, 3)]));
        lease.renewed(t0, LEASE, 5);
        lease
    }

    #[test]
    fn nothing_is_written_before_a_lease_is_taken() {
        let lease = Lease::default();
        let now = Instant::now();
        lease.assigned(1, epochs(&[("s", 0, 3)]));
        assert_eq!(lease.write_epoch("s", 0, now), None);
        assert_eq!(lease.epoch("s", 0), Some(LeaderEpoch::new(3)));
    }

    #[test]
    fn writing_stops_a_margin_before_the_lease_counted_from_the_send_ends() {
        let t0 = Instant::now();
        let lease = leased(t0);
        let end = t0 + LEASE - margin(LEASE);
        assert_eq!(margin(LEASE), Duration::from_secs(1));
        assert_eq!(
            lease.write_epoch("s", 0, end - Duration::from_millis(1)),
            Some(LeaderEpoch::new(3))
        );
        assert_eq!(lease.write_epoch("s", 0, end), None);
        assert_eq!(lease.write_epoch("s", 1, t0), None, "not led here");
    }

    #[test]
    fn a_renewal_extends_the_lease_and_a_late_answer_never_shortens_it() {
        let t0 = Instant::now();
        let lease = leased(t0);
        let later = t0 + Duration::from_secs(3);
        lease.renewed(later, LEASE, 5);
        let end = later + LEASE - margin(LEASE);
        assert!(
            lease
                .write_epoch("s", 0, end - Duration::from_millis(1))
                .is_some()
        );
        lease.renewed(t0, LEASE, 5);
        assert_eq!(lease.valid_until(), Some(end));
    }

    #[test]
    fn a_lost_lease_stops_writes_at_once() {
        let t0 = Instant::now();
        let lease = leased(t0);
        lease.lost();
        assert_eq!(lease.write_epoch("s", 0, t0), None);
        // A heartbeat answered after the loss does not bring it back: registering does.
        lease.renewed(t0, LEASE, 5);
        assert_eq!(lease.write_epoch("s", 0, t0), None);
    }

    #[test]
    fn after_registering_again_writes_wait_for_assignments_as_new_as_the_heartbeat_says() {
        let t0 = Instant::now();
        let lease = leased(t0);
        lease.lost();
        let t1 = t0 + Duration::from_secs(20);
        lease.registered(t1, LEASE);
        assert_eq!(lease.write_epoch("s", 0, t1), None, "version not known yet");
        // While it was dead, the partition moved away and the version went to 7.
        lease.renewed(t1, LEASE, 7);
        assert_eq!(
            lease.write_epoch("s", 0, t1),
            None,
            "assignments of 5 are stale"
        );
        lease.assigned(7, epochs(&[("t", 0, 4)]));
        assert_eq!(lease.write_epoch("s", 0, t1), None, "moved away");
        assert_eq!(lease.write_epoch("t", 0, t1), Some(LeaderEpoch::new(4)));
    }

    #[test]
    fn the_margin_is_a_tenth_of_the_lease_within_bounds() {
        assert_eq!(margin(Duration::from_secs(2)), Duration::from_millis(200));
        assert_eq!(
            margin(Duration::from_millis(500)),
            Duration::from_millis(100)
        );
        assert_eq!(
            margin(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
    }
}

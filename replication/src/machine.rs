//! The replication state machine of one partition replica. Sans-IO: it is told what happened
//! (an append, a peer's message, a sync, the time, the controlplane's decisions) and answers
//! with [`Output`]s for its driver, under the contract written on [`Output`].
//!
//! Safety rests on four rules, each enforced here:
//!
//! 1. **Promises.** A replica persists the newest epoch it has heard of and ignores anything
//!    from older epochs. Reporting for an election promises the new epoch, so the old leader
//!    can no longer gather acks from a replica that told the controlplane how far its log goes.
//! 2. **Durable acks.** A follower acks only offsets that are synced *and* verified to agree
//!    with the current leader's log; the leader counts its own synced end the same way.
//! 3. **Commit in the current epoch.** The high watermark moves to the offset held by a
//!    majority only once that offset lies past the start of the leader's own epoch. A new
//!    leader whose log runs past its high watermark asks for an entry of its own epoch at
//!    once ([`Output::MarkEpochStart`]), so the tail it inherited commits without a producer.
//! 4. **Truncate only the uncommitted.** A follower truncates only where its log disagrees with
//!    the leader's; the leader holds every committed entry (the controlplane picks the most
//!    up-to-date of a majority of reports), so disagreement lies above the commit point.
//!
//! 5. **Change sets through both.** While the replica set changes, a record commits only on
//!    a majority of the old set *and* of the new one (the controlplane elects over both
//!    too), and the old set is dropped only once a majority of the new set holds everything
//!    committed ([`Replica::new_set_holds_committed`]).
//!
//! A leader never survives a restart: after [`Replica::recover`] it leads nothing until a new
//! election in which it reported, so one epoch never has two different logs.

use std::collections::BTreeMap;

use floe_wire::LeaderEpoch;

mod follower;
mod leader;
mod voters;

use crate::history::LogView;
use crate::message::{Batch, Message, Output, ReadLog, ReplicaId};
use voters::Voters;

/// Tuning of one replica.
#[derive(Debug, Clone)]
pub struct Config {
    /// Appends in flight to one follower before waiting for its ack.
    pub window: u32,
    /// Bytes per append message (at least one batch).
    pub max_message_bytes: usize,
    /// A follower that has not acked for this long is sent from its last ack again.
    pub retry_ms: u64,
    /// An idle leader sends an empty append this often, carrying its high watermark.
    pub heartbeat_ms: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            window: 8,
            max_message_bytes: 1 << 20,
            retry_ms: 200,
            heartbeat_ms: 50,
        }
    }
}

/// What the leader knows of one follower.
#[derive(Debug, Clone)]
struct Progress {
    /// Acked: durable on the follower and agreeing with this epoch's log.
    matched: u64,
    /// Where the next append starts.
    next: u64,
    /// The next append tells the follower to reset its log to `next`.
    reset: bool,
    /// Where the follower's log joins this one is not known yet (a new epoch, or after a
    /// mismatch): one append at a time until an ack, instead of a window's worth.
    probing: bool,
    in_flight: u32,
    last_sent_ms: u64,
    last_heard_ms: u64,
    /// When `matched` last grew (or the follower was last found behind).
    last_progress_ms: u64,
    /// When the follower was last heard from at all (any answer in this epoch); unlike
    /// `last_heard_ms`, never moved by a retry.
    last_contact_ms: u64,
}

#[derive(Debug, Clone)]
enum Role {
    /// Knows no leader for its promised epoch (after a restart, or between its election
    /// report and the announcement).
    Idle,
    Follower {
        leader: ReplicaId,
        /// End of the prefix verified to agree with the leader.
        verified: u64,
        acked: u64,
    },
    Leader {
        /// The first offset of this epoch in the log.
        epoch_start: u64,
        /// Who must hold a record before it commits: a majority of `replicas`, and while the
        /// replica set changes, also a majority of `previous` (see [`Replica::reconfigure`]).
        voters: Voters,
        followers: BTreeMap<ReplicaId, Progress>,
    },
}

/// One partition replica.
#[derive(Debug, Clone)]
pub struct Replica {
    id: ReplicaId,
    config: Config,
    /// The newest epoch heard of (persisted).
    promised: LeaderEpoch,
    /// The election this incarnation reported for, the only epoch it may lead.
    reported: Option<LeaderEpoch>,
    role: Role,
    log: LogView,
    high_watermark: u64,
    now_ms: u64,
}

impl Replica {
    /// A replica after (re)start: `promised` is the persisted epoch promise, `log` the
    /// recovered log — which the driver must have synced, so that it is all durable — and
    /// `high_watermark` the last checkpoint.
    pub fn recover(
        id: ReplicaId,
        config: Config,
        promised: LeaderEpoch,
        mut log: LogView,
        high_watermark: u64,
        now_ms: u64,
    ) -> Replica {
        log.synced = log.end;
        let high_watermark = high_watermark.min(log.end).max(log.start);
        Replica {
            id,
            config,
            promised: promised.max(log.last_epoch()),
            reported: None,
            role: Role::Idle,
            log,
            high_watermark,
            now_ms,
        }
    }

    pub fn id(&self) -> ReplicaId {
        self.id
    }

    pub fn promised_epoch(&self) -> LeaderEpoch {
        self.promised
    }

    pub fn high_watermark(&self) -> u64 {
        self.high_watermark
    }

    /// The high watermark the driver may checkpoint: never above the synced end, because a
    /// checkpoint describes the *durable* log. (A follower's high watermark can run ahead of
    /// its fsync; after a truncation, the disk may still hold the old entries until the next
    /// sync, and a checkpoint above them would make a crash recover them as committed.)
    pub fn checkpoint_high_watermark(&self) -> u64 {
        self.high_watermark.min(self.log.synced)
    }

    pub fn log(&self) -> &LogView {
        &self.log
    }

    /// The epoch to stamp on a producer's batch, when this replica leads.
    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        matches!(self.role, Role::Leader { .. }).then_some(self.promised)
    }

    /// The leader this replica follows, if any.
    pub fn leader(&self) -> Option<ReplicaId> {
        match self.role {
            Role::Follower { leader, .. } => Some(leader),
            Role::Leader { .. } => Some(self.id),
            Role::Idle => None,
        }
    }

    /// How far each follower has acked, for a leader (lag reporting).
    pub fn follower_progress(&self) -> Vec<(ReplicaId, u64)> {
        match &self.role {
            Role::Leader { followers, .. } => {
                followers.iter().map(|(id, p)| (*id, p.matched)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// The controlplane prepares the election of `epoch`: promise it and report the durable
    /// log. Asking again for the same epoch repeats the report.
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn prepare<B: Batch>(&mut self, epoch: LeaderEpoch) -> Vec<Output<B>> {
        let mut out = Vec::new();
        if epoch < self.promised || (epoch == self.promised && self.reported != Some(epoch)) {
            // Older than a promise, or an epoch already in use without this incarnation's
            // report (it restarted since): the controlplane must pick a newer one.
            out.push(Output::Refused { epoch });
            return out;
        }
        if epoch > self.promised {
            self.adopt_epoch(epoch, &mut out);
            self.role = Role::Idle;
        }
        self.reported = Some(epoch);
        out.push(Output::Report {
            epoch,
            last_epoch: self.log.synced_epoch(),
            end: self.log.synced,
        });
        out
    }

    /// The controlplane names this replica leader of `epoch` over `replicas` (itself
    /// included); `previous` is the replica set being left when the set is changing (empty
    /// otherwise), and the leader then commits only what a majority of each set holds.
    /// Naming it again in the same epoch with other sets is [`Replica::reconfigure`].
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn become_leader<B: Batch>(
        &mut self,
        epoch: LeaderEpoch,
        replicas: &[ReplicaId],
        previous: &[ReplicaId],
        log: &impl ReadLog<B>,
    ) -> Vec<Output<B>> {
        if self.leader_epoch() == Some(epoch) {
            return self.reconfigure(replicas, previous, log);
        }
        let mut out = Vec::new();
        if epoch != self.promised || self.reported != Some(epoch) {
            out.push(Output::Refused { epoch });
            return out;
        }
        let voters = Voters::new(replicas, previous);
        let followers = voters
            .all()
            .filter(|&r| r != self.id)
            .map(|r| (r, self.new_progress()))
            .collect();
        self.role = Role::Leader {
            epoch_start: self.log.end,
            voters,
            followers,
        };
        if self.log.end > self.high_watermark {
            out.push(Output::MarkEpochStart { epoch });
        }
        self.advance_high_watermark(&mut out);
        for id in self.follower_ids() {
            self.ship(id, true, log, &mut out);
        }
        out
    }

    /// The controlplane changed the replica set of the epoch this replica leads: `replicas`
    /// is the new set and `previous` the set being left (empty once the change is complete).
    /// New members are probed and caught up like any follower (an empty one is reset to this
    /// log's start); members of neither set are no longer shipped to. The high watermark
    /// may move, never back. Ignored unless leading.
    ///
    /// Safe in the same epoch because the controlplane changes sets in two steps: first to
    /// both (`previous` = the old set), under which nothing commits without a majority of
    /// each; then, once [`Replica::new_set_holds_committed`] names the new set, to the new
    /// set alone. A leader slow to hear of the first step counts the old set only, which
    /// every election during the change also counts.
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn reconfigure<B: Batch>(
        &mut self,
        replicas: &[ReplicaId],
        previous: &[ReplicaId],
        log: &impl ReadLog<B>,
    ) -> Vec<Output<B>> {
        let mut out = Vec::new();
        let new_voters = Voters::new(replicas, previous);
        let me = self.id;
        let fresh = self.new_progress();
        let Role::Leader {
            voters, followers, ..
        } = &mut self.role
        else {
            return out;
        };
        if *voters == new_voters {
            return out;
        }
        followers.retain(|id, _| new_voters.all().any(|member| member == *id));
        let added: Vec<ReplicaId> = new_voters
            .all()
            .filter(|&id| id != me && !followers.contains_key(&id))
            .collect();
        for &id in &added {
            followers.insert(id, fresh.clone());
        }
        *voters = new_voters;
        self.advance_high_watermark(&mut out);
        for id in added {
            self.ship(id, true, log, &mut out);
        }
        out
    }

    /// For a leader in the middle of a change of its replica set: the new set, once a
    /// majority of it holds — durably, and in agreement with this epoch — every record
    /// committed so far. From then on the previous set may be dropped: every committed
    /// record survives on any majority of the new set, and everything committed later
    /// commits under both sets until the leader hears the change is complete.
    pub fn new_set_holds_committed(&self) -> Option<Vec<ReplicaId>> {
        let Role::Leader {
            epoch_start,
            voters,
            followers,
        } = &self.role
        else {
            return None;
        };
        if voters.previous.is_empty() {
            return None;
        }
        // Records committed by earlier leaders may lie above this leader's high watermark
        // (it moves only over entries of this epoch), but never above the epoch's start.
        let committed = self.high_watermark.max(*epoch_start);
        let held = Voters::majority_end(&voters.replicas, |id| self.durable_end_of(id, followers));
        (held >= committed).then(|| voters.replicas.clone())
    }

    /// For a leader: how long ago (in ticked time) it last heard from enough followers to
    /// make, with itself, a majority of every voter set; `None` unless leading. A leader cut
    /// off from a majority cannot commit, whatever its producers send: its broker reports it
    /// once this exceeds the lease, and the controlplane elects a leader among the others
    /// (see `docs/replication.md`, "A leader cut off from its replicas").
    pub fn quorum_contact_age_ms(&self) -> Option<u64> {
        let Role::Leader {
            voters, followers, ..
        } = &self.role
        else {
            return None;
        };
        // The commit rule over contact times instead of durable ends: the latest time by
        // which a majority of every set had been heard from (this replica: now).
        let heard = voters.committed_end(|id| {
            if id == self.id {
                self.now_ms
            } else {
                followers.get(&id).map_or(0, |p| p.last_contact_ms)
            }
        });
        Some(self.now_ms.saturating_sub(heard))
    }

    /// The controlplane names `leader` for `epoch`; this replica follows it.
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn become_follower<B: Batch>(
        &mut self,
        epoch: LeaderEpoch,
        leader: ReplicaId,
    ) -> Vec<Output<B>> {
        let mut out = Vec::new();
        if epoch < self.promised || leader == self.id {
            return out;
        }
        if epoch == self.promised
            && matches!(self.role, Role::Follower { .. } | Role::Leader { .. })
        {
            return out;
        }
        if epoch > self.promised {
            self.adopt_epoch(epoch, &mut out);
        }
        self.follow(leader);
        out
    }

    /// The leader appended producer batches, in [`Replica::leader_epoch`], up to `end`.
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn on_appended<B: Batch>(&mut self, end: u64, log: &impl ReadLog<B>) -> Vec<Output<B>> {
        let mut out = Vec::new();
        let Some(epoch) = self.leader_epoch() else {
            return out;
        };
        self.log.append(epoch, end);
        for id in self.follower_ids() {
            self.ship(id, false, log, &mut out);
        }
        out
    }

    /// The log's start moved up to `start` (local retention removed segments that object
    /// storage holds). Only over committed, synced data.
    pub fn on_log_start(&mut self, start: u64) {
        debug_assert!(start <= self.high_watermark.max(self.log.start));
        self.log.advance_start(start);
    }

    /// The local log is durable below `end` (see the contract on [`Output`]).
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn on_synced<B: Batch>(&mut self, end: u64) -> Vec<Output<B>> {
        let mut out = Vec::new();
        self.log.synced = self.log.synced.max(end.min(self.log.end));
        match self.role {
            Role::Leader { .. } => self.advance_high_watermark(&mut out),
            Role::Follower { .. } => self.ack(&mut out, false),
            Role::Idle => {}
        }
        out
    }

    /// Time passes: heartbeats and retries.
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn tick<B: Batch>(&mut self, now_ms: u64, log: &impl ReadLog<B>) -> Vec<Output<B>> {
        self.now_ms = self.now_ms.max(now_ms);
        let mut out = Vec::new();
        let now = self.now_ms;
        let retry = self.config.retry_ms;
        let heartbeat = self.config.heartbeat_ms;
        let Role::Leader { followers, .. } = &mut self.role else {
            return out;
        };
        let mut due = Vec::new();
        for (&id, p) in followers.iter_mut() {
            let stalled =
                p.matched < self.log.end && now.saturating_sub(p.last_progress_ms) >= retry;
            if stalled || now.saturating_sub(p.last_heard_ms) >= retry {
                if stalled {
                    // Appends lost, or a restarted follower: go back to what it acked.
                    p.next = p.next.min(p.matched.max(self.log.start));
                    p.last_progress_ms = now;
                }
                p.in_flight = 0;
                p.last_heard_ms = now;
                due.push((id, true));
            } else if now.saturating_sub(p.last_sent_ms) >= heartbeat {
                due.push((id, true));
            }
        }
        for (id, force) in due {
            self.ship(id, force, log, &mut out);
        }
        out
    }

    /// A message from peer `from`. Fencing comes first: a [`Message::Stale`] naming a newer
    /// epoch makes this replica promise it and stop leading or following; anything else from
    /// an epoch older than the promise is answered with `Stale` and otherwise ignored.
    #[must_use = "carry out the outputs, in order, under the contract on `Output`"]
    pub fn on_message<B: Batch>(
        &mut self,
        from: ReplicaId,
        message: Message<B>,
        log: &impl ReadLog<B>,
    ) -> Vec<Output<B>> {
        let mut out = Vec::new();
        let epoch = message.epoch();
        if let Message::Stale { epoch } = message {
            if epoch > self.promised {
                self.adopt_epoch(epoch, &mut out);
                self.role = Role::Idle;
            }
            return out;
        }
        if epoch < self.promised {
            out.push(Output::Send {
                to: from,
                message: Message::Stale {
                    epoch: self.promised,
                },
            });
            return out;
        }
        match message {
            Message::Append {
                prev_offset,
                prev_epoch,
                reset,
                batches,
                high_watermark,
                ..
            } => {
                if !self.accept_leader(from, epoch, &mut out) {
                    return out;
                }
                self.on_append(
                    from,
                    epoch,
                    prev_offset,
                    prev_epoch,
                    reset,
                    batches,
                    high_watermark,
                    &mut out,
                );
            }
            Message::Ack { end, .. } if epoch == self.promised => {
                self.on_ack(from, end, log, &mut out);
            }
            Message::Mismatch {
                start, end, epochs, ..
            } if epoch == self.promised => {
                self.on_mismatch(from, start, end, &epochs, log, &mut out);
            }
            _ => {}
        }
        out
    }

    fn adopt_epoch<B: Batch>(&mut self, epoch: LeaderEpoch, out: &mut Vec<Output<B>>) {
        if let Role::Leader { .. } = self.role {
            out.push(Output::Deposed {
                epoch: self.promised,
            });
        }
        self.promised = epoch;
        out.push(Output::PersistEpoch(epoch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::LogView;

    fn epoch(value: u32) -> LeaderEpoch {
        LeaderEpoch::new(value)
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct B(u64, u64, LeaderEpoch);

    impl Batch for B {
        fn base(&self) -> u64 {
            self.0
        }
        fn end(&self) -> u64 {
            self.1
        }
        fn epoch(&self) -> LeaderEpoch {
            self.2
        }
        fn size(&self) -> usize {
            1
        }
    }

    struct Empty;

    impl ReadLog<B> for Empty {
        fn read(&self, _: u64, _: usize) -> Vec<B> {
            Vec::new()
        }
    }

    fn append(value: u32, prev: u64, batches: Vec<B>) -> Message<B> {
        Message::Append {
            epoch: epoch(value),
            prev_offset: prev,
            prev_epoch: if prev == 0 {
                LeaderEpoch::ZERO
            } else {
                epoch(value)
            },
            reset: false,
            batches,
            high_watermark: 0,
        }
    }

    #[test]
    fn a_report_fences_the_old_leader() {
        let mut r = Replica::recover(2, Config::default(), epoch(1), LogView::empty(0), 0, 0);
        let out = r.become_follower::<B>(epoch(1), 0);
        assert!(out.is_empty());
        let out = r.on_message(0, append(1, 0, vec![B(0, 3, epoch(1))]), &Empty);
        assert_eq!(out[0], Output::Write(vec![B(0, 3, epoch(1))]));
        // Not synced yet: the ack covers nothing.
        assert!(matches!(
            out[1],
            Output::Send {
                message: Message::Ack { end: 0, .. },
                ..
            }
        ));
        let out = r.prepare::<B>(epoch(2));
        assert_eq!(
            out,
            vec![
                Output::PersistEpoch(epoch(2)),
                Output::Report {
                    epoch: epoch(2),
                    last_epoch: LeaderEpoch::ZERO,
                    end: 0
                }
            ]
        );
        // The old leader's next append is refused, and syncing acks nothing to it.
        let out = r.on_message(0, append(1, 3, vec![B(3, 4, epoch(1))]), &Empty);
        assert_eq!(
            out,
            vec![Output::Send {
                to: 0,
                message: Message::Stale { epoch: epoch(2) }
            }]
        );
        assert!(r.on_synced::<B>(3).is_empty());
    }

    #[test]
    fn a_restarted_replica_does_not_lead_an_epoch_it_reported_for_before() {
        let mut r = Replica::recover(1, Config::default(), epoch(0), LogView::empty(0), 0, 0);
        assert_eq!(r.prepare::<B>(epoch(1)).len(), 2);
        let mut r = Replica::recover(1, Config::default(), epoch(1), LogView::empty(0), 0, 0);
        assert_eq!(
            r.become_leader(epoch(1), &[0, 1, 2], &[], &Empty),
            vec![Output::Refused { epoch: epoch(1) }]
        );
        assert_eq!(
            r.prepare::<B>(epoch(1)),
            vec![Output::Refused { epoch: epoch(1) }]
        );
        assert_eq!(r.prepare::<B>(epoch(2)).len(), 2);
        assert!(
            r.become_leader::<B>(epoch(2), &[0, 1, 2], &[], &Empty)
                .iter()
                .all(|o| matches!(o, Output::Send { .. }))
        );
        assert_eq!(r.leader_epoch(), Some(epoch(2)));
    }

    /// Drops outputs that a test may leave undone: sends, which the network loses here
    /// (followers that never answer). Anything else fails the test.
    fn lose_sends(out: Vec<Output<B>>) {
        assert!(
            out.iter().all(|o| matches!(o, Output::Send { .. })),
            "only sends may be left undone: {out:?}"
        );
    }

    #[test]
    fn a_leader_measures_how_long_it_has_lacked_a_majority() {
        let ack = |end| Message::Ack {
            epoch: epoch(1),
            end,
        };
        let mut r = Replica::recover(0, Config::default(), epoch(0), LogView::empty(0), 0, 1_000);
        assert_eq!(r.quorum_contact_age_ms(), None);
        // No disk and no controlplane here: the promise and the report go nowhere.
        assert_eq!(
            r.prepare::<B>(epoch(1)),
            vec![
                Output::PersistEpoch(epoch(1)),
                Output::Report {
                    epoch: epoch(1),
                    last_epoch: LeaderEpoch::ZERO,
                    end: 0
                }
            ]
        );
        lose_sends(r.become_leader::<B>(epoch(1), &[0, 1, 2], &[], &Empty));
        assert_eq!(r.quorum_contact_age_ms(), Some(0));
        // Retries and heartbeats go out; no answer comes back.
        for now in (1_050..=3_000).step_by(50) {
            lose_sends(r.tick::<B>(now, &Empty));
        }
        assert_eq!(r.quorum_contact_age_ms(), Some(2_000));
        // One follower answers: with the leader, a majority of three. The log is empty, so
        // an ack commits nothing and leaves nothing to ship.
        assert!(r.on_message::<B>(2, ack(0), &Empty).is_empty());
        assert_eq!(r.quorum_contact_age_ms(), Some(0));
        lose_sends(r.tick::<B>(3_500, &Empty));
        assert_eq!(r.quorum_contact_age_ms(), Some(500));
        // While the set changes, a majority of the previous set counts too: there it rests
        // on 2, last heard 1,000 ms ago, and the new member 3 answering does not count.
        lose_sends(r.reconfigure::<B>(&[0, 2, 3], &[0, 1, 2], &Empty));
        lose_sends(r.tick::<B>(4_000, &Empty));
        assert!(r.on_message::<B>(3, ack(0), &Empty).is_empty());
        assert_eq!(r.quorum_contact_age_ms(), Some(1_000));
        assert!(r.on_message::<B>(2, ack(0), &Empty).is_empty());
        assert_eq!(r.quorum_contact_age_ms(), Some(0));
    }
}

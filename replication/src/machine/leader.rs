//! A leader's side of replication: shipping each follower what it lacks within its window,
//! taking its acks and mismatches, and moving the high watermark to what a majority of each
//! voting set holds durably.

use std::collections::BTreeMap;

use floe_wire::LeaderEpoch;

use super::{Progress, Replica, Role};
use crate::history::EpochStart;
use crate::message::{Batch, Message, Output, ReadLog, ReplicaId};

impl Replica {
    /// Sends `to` what it lacks, within its window; with `force`, at least a heartbeat.
    pub(super) fn ship<B: Batch>(
        &mut self,
        to: ReplicaId,
        force: bool,
        log: &impl ReadLog<B>,
        out: &mut Vec<Output<B>>,
    ) {
        let epoch = self.promised;
        let now = self.now_ms;
        let window = self.config.window;
        let max_bytes = self.config.max_message_bytes;
        let high_watermark = self.high_watermark;
        let Role::Leader { followers, .. } = &mut self.role else {
            return;
        };
        let Some(p) = followers.get_mut(&to) else {
            return;
        };
        let mut sent = false;
        loop {
            // Data within the window; a forced heartbeat (it carries the high watermark and
            // draws a mismatch or an ack) even beyond it.
            let limit = if p.probing { 1 } else { window };
            let has_data = p.next < self.log.end && p.in_flight < limit;
            let heartbeat = force && !sent;
            if !has_data && !heartbeat {
                break;
            }
            let batches = if has_data {
                log.read(p.next, max_bytes)
            } else {
                Vec::new()
            };
            // A heartbeat while replicating joins at the acked end, which is known to agree,
            // so that it does not overtake appends still in flight.
            let prev_offset = if has_data || p.probing || p.reset {
                p.next
            } else {
                p.matched.max(self.log.start)
            };
            let prev_epoch = self
                .log
                .epoch_before(prev_offset)
                .unwrap_or(LeaderEpoch::ZERO);
            let message = Message::Append {
                epoch,
                prev_offset,
                prev_epoch,
                reset: p.reset,
                batches,
                high_watermark,
            };
            if let Message::Append { batches, .. } = &message
                && let Some(last) = batches.last()
            {
                p.next = last.end();
            }
            p.reset = false;
            p.in_flight += 1;
            p.last_sent_ms = now;
            out.push(Output::Send { to, message });
            sent = true;
            if !has_data {
                break;
            }
        }
    }

    /// Follower `from` acked `end` in this epoch: count it, commit what a majority now
    /// holds, and ship it more.
    pub(super) fn on_ack<B: Batch>(
        &mut self,
        from: ReplicaId,
        end: u64,
        log: &impl ReadLog<B>,
        out: &mut Vec<Output<B>>,
    ) {
        let now = self.now_ms;
        if let Role::Leader { followers, .. } = &mut self.role
            && let Some(p) = followers.get_mut(&from)
        {
            p.last_heard_ms = now;
            p.last_contact_ms = now;
            p.in_flight = p.in_flight.saturating_sub(1);
            if end <= self.log.end {
                p.probing = false;
                if end > p.matched {
                    p.matched = end;
                    p.last_progress_ms = now;
                }
                p.next = p.next.max(p.matched);
            }
            self.advance_high_watermark(out);
            self.ship(from, false, log, out);
        }
    }

    /// Follower `from` could not join an append in this epoch; its log spans `[start, end)`
    /// with `epochs`: probe again from where the two logs agree, or reset it.
    pub(super) fn on_mismatch<B: Batch>(
        &mut self,
        from: ReplicaId,
        start: u64,
        end: u64,
        epochs: &[EpochStart],
        log: &impl ReadLog<B>,
        out: &mut Vec<Output<B>>,
    ) {
        let now = self.now_ms;
        let view = &self.log;
        if let Role::Leader { followers, .. } = &mut self.role
            && let Some(p) = followers.get_mut(&from)
        {
            let agreed = view.common_prefix(epochs, end).min(view.end);
            p.last_heard_ms = now;
            p.last_contact_ms = now;
            p.in_flight = 0;
            p.probing = true;
            p.last_progress_ms = now;
            // Join where the logs agree, at the follower's own start (below which it holds
            // only committed data), and never below what it acked in this epoch (a late
            // mismatch must not send it back, let alone reset it).
            let join = agreed.max(start).max(p.matched);
            // At the leader's own start the entry before it is unknown here, so a follower
            // holding older entries could never check the join: it starts over at the
            // leader's start, as it does below it.
            if join < self.log.start || (join == self.log.start && start < join && p.matched < join)
            {
                p.next = self.log.start;
                p.reset = true;
            } else {
                p.next = join.min(self.log.end);
                p.reset = false;
            }
            self.ship(from, true, log, out);
        }
    }

    /// Moves the high watermark to the largest offset durable on a majority (of each voting
    /// set), if that offset lies in the current epoch.
    pub(super) fn advance_high_watermark<B: Batch>(&mut self, out: &mut Vec<Output<B>>) {
        let Role::Leader {
            epoch_start,
            voters,
            followers,
        } = &self.role
        else {
            return;
        };
        let candidate = voters.committed_end(|id| self.durable_end_of(id, followers));
        if candidate > *epoch_start && candidate > self.high_watermark {
            self.high_watermark = candidate;
            out.push(Output::HighWatermark(candidate));
        }
    }

    pub(super) fn follower_ids(&self) -> Vec<ReplicaId> {
        match &self.role {
            Role::Leader { followers, .. } => followers.keys().copied().collect(),
            _ => Vec::new(),
        }
    }

    /// The end a leader counts as durable on `id`: its own synced end, or a follower's ack.
    pub(super) fn durable_end_of(
        &self,
        id: ReplicaId,
        followers: &BTreeMap<ReplicaId, Progress>,
    ) -> u64 {
        if id == self.id {
            self.log.synced
        } else {
            followers.get(&id).map_or(0, |p| p.matched)
        }
    }

    pub(super) fn new_progress(&self) -> Progress {
        Progress {
            matched: 0,
            next: self.log.end,
            reset: false,
            probing: true,
            in_flight: 0,
            last_sent_ms: self.now_ms,
            last_heard_ms: self.now_ms,
            last_progress_ms: self.now_ms,
            last_contact_ms: self.now_ms,
        }
    }
}

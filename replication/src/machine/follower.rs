//! A follower's side of replication: taking the leader's appends (checking where its log
//! joins the leader's, truncating only what disagrees), and acking what is durable and
//! verified.

use floe_wire::LeaderEpoch;

use super::{Replica, Role};
use crate::message::{Batch, Message, Output, ReplicaId};

impl Replica {
    /// Follows `leader`, the sender of an append of `epoch` (not older than the promise):
    /// false, and the append must be dropped, when this replica leads `epoch` itself.
    pub(super) fn accept_leader<B: Batch>(
        &mut self,
        leader: ReplicaId,
        epoch: LeaderEpoch,
        out: &mut Vec<Output<B>>,
    ) -> bool {
        if epoch > self.promised {
            self.adopt_epoch(epoch, out);
            self.follow(leader);
        } else if !matches!(self.role, Role::Follower { .. }) {
            if matches!(self.role, Role::Leader { .. }) {
                // Two leaders in one epoch cannot happen; refuse rather than mix logs.
                return false;
            }
            self.follow(leader);
        }
        true
    }

    /// Takes `leader`'s append of `epoch` (this replica's promise): it joins the log after
    /// `prev_offset`, or resets the log, or draws a mismatch; then its batches are written,
    /// what they verify is committed up to the leader's high watermark, and acked.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_append<B: Batch>(
        &mut self,
        leader: ReplicaId,
        epoch: LeaderEpoch,
        prev_offset: u64,
        prev_epoch: LeaderEpoch,
        reset: bool,
        batches: Vec<B>,
        leader_high_watermark: u64,
        out: &mut Vec<Output<B>>,
    ) {
        let joins = self.joins_after(prev_offset, prev_epoch, reset);
        if reset && !joins && prev_offset > self.log.start {
            // The log cannot be joined to the leader's above its local start: start over
            // there. Idempotent: once reset (or once past `prev_offset` below the high
            // watermark), a duplicate or late reset joins instead of wiping acked data.
            debug_assert!(prev_offset <= leader_high_watermark);
            self.reset_to(prev_offset, prev_epoch, out);
        } else if !joins {
            self.send_mismatch(leader, epoch, out);
            return;
        }
        let checked = self.write_batches(epoch, prev_offset, batches, out);
        self.verify_and_commit(epoch, checked, leader_high_watermark, out);
        self.ack(out, true);
    }

    /// Whether the leader's log, whose entry before `prev_offset` is of `prev_epoch`,
    /// continues this one there.
    fn joins_after(&self, prev_offset: u64, prev_epoch: LeaderEpoch, reset: bool) -> bool {
        // Everything below the local start or the high watermark is committed and so agrees
        // with any leader; below the verified end it agrees with this one.
        let verified = match self.role {
            Role::Follower { verified, .. } => verified,
            _ => 0,
        };
        let agreed_below = self.log.start.max(self.high_watermark).max(verified);
        if prev_offset > self.log.end {
            false
        } else if prev_offset <= agreed_below {
            true
        } else {
            !reset && self.log.epoch_before(prev_offset) == Some(prev_epoch)
        }
    }

    /// Drops the whole log; it goes on empty at `start`, the leader's local start, after an
    /// entry of `base_epoch`.
    fn reset_to<B: Batch>(
        &mut self,
        start: u64,
        base_epoch: LeaderEpoch,
        out: &mut Vec<Output<B>>,
    ) {
        self.log.reset(start, base_epoch);
        out.push(Output::Reset { start, base_epoch });
        if start > self.high_watermark {
            // Below the leader's local start everything is committed (and tiered).
            self.high_watermark = start;
            out.push(Output::HighWatermark(start));
        }
        self.set_verified(start);
    }

    /// Tells the leader where this log lies, so it can find where the two agree.
    fn send_mismatch<B: Batch>(
        &self,
        leader: ReplicaId,
        epoch: LeaderEpoch,
        out: &mut Vec<Output<B>>,
    ) {
        out.push(Output::Send {
            to: leader,
            message: Message::Mismatch {
                epoch,
                start: self.log.start,
                end: self.log.end,
                epochs: self.log.epochs.clone(),
            },
        });
    }

    /// Writes the batches that continue the log from `prev_offset`, truncating first where
    /// they disagree with it; returns the end of the prefix checked against the leader's.
    fn write_batches<B: Batch>(
        &mut self,
        epoch: LeaderEpoch,
        prev_offset: u64,
        batches: Vec<B>,
        out: &mut Vec<Output<B>>,
    ) -> u64 {
        let mut checked = prev_offset;
        let mut writes = Vec::new();
        for batch in batches {
            if batch.base() != checked || batch.epoch() > epoch {
                break; // not contiguous: the leader will resend
            }
            if batch.end() <= self.log.start {
                // Below the local start: committed, and already tiered.
                checked = batch.end();
                continue;
            }
            if batch.base() < self.log.start {
                break; // straddles the local start: batch boundaries differ, cannot be
            }
            if batch.base() < self.log.end {
                if self.log.epoch_at(batch.base()) == Some(batch.epoch()) {
                    // Same epoch at the same offset: the same batch, already here.
                    checked = batch.end();
                    continue;
                }
                // Disagreement: everything from here on is uncommitted.
                assert!(
                    batch.base() >= self.high_watermark,
                    "replica {} would truncate committed data at {} (high watermark {})",
                    self.id,
                    batch.base(),
                    self.high_watermark
                );
                if !writes.is_empty() {
                    out.push(Output::Write(std::mem::take(&mut writes)));
                }
                self.log.truncate(batch.base());
                out.push(Output::Truncate(batch.base()));
            }
            if batch.epoch() < self.log.last_epoch() {
                break;
            }
            self.log.append(batch.epoch(), batch.end());
            checked = batch.end();
            writes.push(batch);
        }
        if !writes.is_empty() {
            out.push(Output::Write(writes));
        }
        checked
    }

    /// Marks the log verified to agree with the leader of `epoch` up to `checked` (all of
    /// it, once it ends in `epoch`), and commits the verified prefix up to the leader's
    /// high watermark.
    fn verify_and_commit<B: Batch>(
        &mut self,
        epoch: LeaderEpoch,
        checked: u64,
        leader_high_watermark: u64,
        out: &mut Vec<Output<B>>,
    ) {
        let verified = if self.log.last_epoch() == epoch {
            self.log.end // entries of this epoch come only from its leader
        } else {
            checked.min(self.log.end)
        };
        self.set_verified(verified);
        if let Role::Follower { verified, .. } = self.role {
            let committed = leader_high_watermark.min(verified);
            if committed > self.high_watermark {
                self.high_watermark = committed;
                out.push(Output::HighWatermark(committed));
            }
        }
    }

    fn set_verified(&mut self, to: u64) {
        let end = self.log.end;
        if let Role::Follower {
            verified, acked, ..
        } = &mut self.role
        {
            *verified = (*verified).max(to).min(end);
            *acked = (*acked).min(end);
        }
    }

    /// Acks the durable, verified prefix to the leader: when it grew, or always if `always`.
    pub(super) fn ack<B: Batch>(&mut self, out: &mut Vec<Output<B>>, always: bool) {
        let synced = self.log.synced;
        let epoch = self.promised;
        if let Role::Follower {
            leader,
            verified,
            acked,
        } = &mut self.role
        {
            let end = synced.min(*verified);
            if end > *acked || always {
                *acked = (*acked).max(end);
                out.push(Output::Send {
                    to: *leader,
                    message: Message::Ack { epoch, end },
                });
            }
        }
    }

    pub(super) fn follow(&mut self, leader: ReplicaId) {
        // Below the high watermark everything is committed, so the new leader has it.
        self.role = Role::Follower {
            leader,
            verified: self.high_watermark.min(self.log.end),
            acked: 0,
        };
    }
}

//! Taking a partition without replicas in the epoch the controlplane gave this broker. The
//! tier's manifest is fenced at that epoch first, so that no earlier owner — one cut off from
//! the controlplane, say — commits to it again; then the local log is made to continue the
//! history the tier holds: kept when nobody else wrote the partition since this broker did,
//! else started again, empty, where the tier ends. Only then are writes taken, in that epoch.

use floe_hot_log::LogError;
use floe_tier::TierError;
use floe_wire::{LeaderEpoch, Offset};

use super::Partition;

/// Why a partition could not be taken; the assignments are applied again shortly.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[error("fencing the tier manifest at epoch {epoch}")]
    Fence {
        epoch: LeaderEpoch,
        #[source]
        source: TierError,
    },
    #[error("starting the local log again at the tier's end, {start}")]
    Reset {
        start: Offset,
        #[source]
        source: LogError,
    },
}

impl Partition {
    /// Takes the partition in `epoch` (see the module's doc). Idempotent; needs the object
    /// store unless the log was already written in `epoch` (taken before a restart).
    pub(crate) async fn take(&self, epoch: LeaderEpoch) -> Result<(), TakeError> {
        if self.taken() == Some(epoch) {
            return Ok(());
        }
        let written = self.log.epoch_history().latest().map(|e| e.epoch);
        if written.is_some_and(|last| last >= epoch) {
            // Written in this epoch, so taken in it before this broker restarted.
            self.set_taken(epoch);
            return Ok(());
        }
        let fence = self
            .uploader
            .fence(epoch)
            .await
            .map_err(|source| TakeError::Fence { epoch, source })?;
        let last = written.unwrap_or(LeaderEpoch::ZERO);
        // Another owner held the partition since this log was last written (it fenced or
        // tiered in a newer epoch), or the tier reaches past the log: what the log holds
        // beyond the tier is not in the partition's history.
        if fence.before > last || fence.tier_end > self.log.log_end() {
            tracing::info!(
                stream = self.stream,
                partition = self.id,
                %epoch,
                log_epoch = %last,
                tier_epoch = %fence.before,
                log_end = %self.log.log_end(),
                tier_end = %fence.tier_end,
                "another broker held the partition since this log was written: it starts \
                 again at the tier's end"
            );
            self.log
                .reset(fence.tier_end, fence.before)
                .map_err(|source| TakeError::Reset {
                    start: fence.tier_end,
                    source,
                })?;
        }
        self.set_taken(epoch);
        tracing::info!(
            stream = self.stream,
            partition = self.id,
            %epoch,
            "partition taken"
        );
        Ok(())
    }

    fn set_taken(&self, epoch: LeaderEpoch) {
        *self.taken.lock().unwrap_or_else(|e| e.into_inner()) = Some(epoch);
    }
}

//! Local retention: deleting the oldest sealed segments, only those the caller allows (tiering
//! allows a segment once it is in the tier manifest).

use floe_wire::Offset;

use crate::producer_state::PRODUCERS_EXT;
use crate::segment::{self, INDEX_EXT};
use crate::{LogError, RetentionPolicy};

use super::truncation::remove_if_exists;
use super::{Log, SealedSegment, open};

impl Log {
    /// Deletes sealed segments, oldest first, while the policy says they are beyond retention
    /// and `may_delete` agrees; stops at the first segment that must stay, so the log remains
    /// contiguous. `now_ms` is the current time in milliseconds since the Unix epoch.
    ///
    /// By bytes, a segment goes only if the log keeps at least `bytes_max` without it. By age,
    /// a segment goes once its newest record is older than `age_max_ms`. The active segment
    /// is never deleted. Returns the deleted segments.
    pub fn apply_retention(
        &self,
        policy: RetentionPolicy,
        now_ms: i64,
        may_delete: impl Fn(&SealedSegment) -> bool,
    ) -> Result<Vec<SealedSegment>, LogError> {
        let shared = &self.shared;
        let w = shared.writer();
        shared.check_writable(&w)?;
        let mut total: u64 = shared.segments().iter().map(|s| s.state().size).sum();
        let mut doomed = Vec::new();
        for segment in self.sealed_segments() {
            let over_bytes = policy
                .bytes_max
                .is_some_and(|max| total.saturating_sub(segment.size_bytes) >= max);
            let too_old = policy.age_max_ms.is_some_and(|age| {
                segment.max_timestamp < now_ms.saturating_sub(age.min(i64::MAX as u64) as i64)
            });
            if !(over_bytes || too_old) || !may_delete(&segment) {
                break;
            }
            total -= segment.size_bytes;
            doomed.push(segment);
        }
        if doomed.is_empty() {
            return Ok(doomed);
        }
        // An index a roll left to write must not land after its segment is gone.
        shared.finish_chores();
        shared
            .segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..doomed.len());
        let result = self.remove_files(&doomed);
        if let Err(e) = &result {
            shared.fail(e);
        }
        drop(w);
        result.map(|()| doomed)
    }

    fn remove_files(&self, doomed: &[SealedSegment]) -> Result<(), LogError> {
        let storage = self.shared.storage.as_ref();
        let dir = &self.shared.dir;
        // Oldest first, so a crash part-way leaves a contiguous log.
        for segment in doomed {
            remove_if_exists(storage, &segment.path)?;
            remove_if_exists(
                storage,
                &dir.join(segment::file_name(segment.base_offset, INDEX_EXT)),
            )?;
        }
        let start: Offset = self.log_start();
        let listing = open::list(storage, dir)?;
        for &at in listing.snapshots.iter().filter(|&&at| at < start) {
            remove_if_exists(storage, &dir.join(segment::file_name(at, PRODUCERS_EXT)))?;
        }
        storage
            .sync_dir(dir)
            .map_err(LogError::io("fsync directory", dir))?;
        tracing::info!(dir = %dir.display(), deleted = doomed.len(), log_start = %start, "retention deleted segments");
        Ok(())
    }
}

//! [`Collector`]: deletes segment objects no manifest state references any more — removed by
//! retention, or orphaned by an upload whose commit never happened — once they are older than
//! a grace period, and old manifest versions the latest checkpoint summarises. Also deletes a
//! whole stream's objects.

use crate::layout::SegmentName;
use crate::manifest::{ManifestLog, PENDING_DELETION_KEEP_MS};
use crate::{PartitionPath, TierError, TierStore};

/// What one collection deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct CollectReport {
    pub segments_deleted: usize,
    pub manifest_files_deleted: usize,
    /// Unreferenced segment objects kept because they are younger than the grace period.
    pub segments_in_grace: usize,
    /// Staging files of a local-directory store that a killed writer left, out of grace.
    pub staging_files_deleted: usize,
}

/// Deletes unreferenced objects of a partition.
#[derive(Debug, Clone)]
pub struct Collector {
    store: TierStore,
    grace_ms: i64,
}

impl Collector {
    /// `grace_ms` must exceed the uploaders' commit window
    /// ([`crate::UploaderConfig::commit_window_ms`]) by more than the longest commit request
    /// and the clocks' skew, so that no object a commit may still list is deleted, and the
    /// longest a reader keeps a manifest state; and be below [`PENDING_DELETION_KEEP_MS`].
    pub fn new(store: TierStore, grace_ms: i64) -> Result<Collector, TierError> {
        if !(0..PENDING_DELETION_KEEP_MS).contains(&grace_ms) {
            return Err(TierError::Config(format!(
                "collector grace {grace_ms} ms must be in 0..{PENDING_DELETION_KEEP_MS}"
            )));
        }
        Ok(Collector { store, grace_ms })
    }

    /// Lists the partition's segment objects against its manifest and deletes those that are
    /// unreferenced and out of grace: removed ones counted from their removal, others from
    /// their upload. On a local directory, deletes staging files out of grace too. Then
    /// collects manifest versions below the latest checkpoint.
    pub async fn collect_partition(
        &self,
        partition: &PartitionPath,
        now_ms: i64,
    ) -> Result<CollectReport, TierError> {
        let manifest = ManifestLog::new(self.store.clone(), partition.clone());
        let state = manifest.load().await?;
        let mut report = CollectReport::default();
        for object in self.store.list(&partition.segments_dir()).await? {
            let file_name = object.key.rsplit('/').next().unwrap_or("");
            let Some((name, _, _)) = SegmentName::parse(file_name) else {
                continue; // not ours: leave it
            };
            if state.contains(&name) {
                continue;
            }
            let since = state
                .pending_deletion
                .iter()
                .find(|p| p.name == name)
                .map_or(object.last_modified_ms, |p| {
                    p.removed_at_ms.max(object.last_modified_ms)
                });
            if since.saturating_add(self.grace_ms) > now_ms {
                report.segments_in_grace += 1;
                continue;
            }
            self.store.delete(&object.key).await?;
            report.segments_deleted += 1;
        }
        let before_ms = now_ms.saturating_sub(self.grace_ms);
        for dir in [partition.segments_dir(), partition.manifest_dir()] {
            report.staging_files_deleted +=
                self.store.delete_stale_staging(&dir, before_ms).await?;
        }
        report.manifest_files_deleted = manifest.collect(now_ms, self.grace_ms).await?;
        Ok(report)
    }
}

/// Deletes every object of `stream`: segments, manifest versions, checkpoints, and on a
/// local directory the staging files of unfinished writes. Returns how many it deleted.
pub async fn delete_stream(store: &TierStore, stream: &str) -> Result<usize, TierError> {
    if !crate::layout::is_path_segment(stream) {
        return Err(TierError::Config(format!(
            "stream {stream:?} is not a single path segment"
        )));
    }
    let objects = store.list(stream).await?;
    for object in &objects {
        store.delete(&object.key).await?;
    }
    // Staging files a killed writer left, invisible to listing; an object still being
    // written for the deleted stream fails to publish.
    let staging = store.delete_stale_staging(stream, i64::MAX).await?;
    Ok(objects.len() + staging)
}

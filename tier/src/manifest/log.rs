//! [`ManifestLog`]: reads a partition's manifest from the bucket (latest checkpoint, then the
//! versions after it) and commits changes with put-if-absent, so that of two writers racing
//! for a version exactly one wins and the other re-reads and adapts.

use crate::layout::{CHECKPOINT_EXT, PartitionPath, VERSION_EXT, parse_version};
use crate::store::CreateOutcome;
use crate::{TierError, TierStore};
use floe_wire::LeaderEpoch;

use super::file::{self, CheckpointFile};
use super::state::{Change, ChangeError, ManifestState};

/// A checkpoint every this many versions.
pub const CHECKPOINT_INTERVAL_DEFAULT: u64 = 10;
/// Versions after the checkpoint a load reads side by side; more (a checkpoint that failed
/// to be written) are read one after another.
const SPECULATIVE_VERSIONS_MAX: u64 = 2 * CHECKPOINT_INTERVAL_DEFAULT;
/// Lost races before a commit gives up with [`TierError::Contended`].
const COMMIT_ATTEMPTS_MAX: u32 = 16;

/// One partition's manifest log in the bucket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ManifestLog {
    store: TierStore,
    partition: PartitionPath,
    checkpoint_interval: u64,
}

impl ManifestLog {
    pub fn new(store: TierStore, partition: PartitionPath) -> ManifestLog {
        ManifestLog {
            store,
            partition,
            checkpoint_interval: CHECKPOINT_INTERVAL_DEFAULT,
        }
    }

    /// Writes a checkpoint every `interval` versions (at least 1).
    pub fn with_checkpoint_interval(mut self, interval: u64) -> ManifestLog {
        self.checkpoint_interval = interval.max(1);
        self
    }

    pub fn partition(&self) -> &PartitionPath {
        &self.partition
    }

    /// The latest state: the newest checkpoint, then every version after it.
    ///
    /// One LIST, then one round of GETs side by side: the checkpoint, the versions the LIST
    /// showed after it, and the one after those (which usually is not there yet). Read one
    /// after another, a checkpoint and nine versions cost eleven round trips to object
    /// storage before a cold reader's first answer.
    pub async fn load(&self) -> Result<ManifestState, TierError> {
        // A collector may delete the checkpoint we listed once a newer one exists: list again.
        let mut attempts = 0;
        loop {
            let listed = self.store.list(&self.partition.manifest_dir()).await?;
            let name = |key: &str| key.rsplit('/').next().unwrap_or("").to_owned();
            let checkpoint = listed
                .iter()
                .filter_map(|o| parse_version(&name(&o.key), CHECKPOINT_EXT))
                .max();
            let after = checkpoint.unwrap_or(0);
            let newest_listed = listed
                .iter()
                .filter_map(|o| parse_version(&name(&o.key), VERSION_EXT))
                .max()
                .unwrap_or(after)
                .max(after);
            let last = newest_listed.min(after + SPECULATIVE_VERSIONS_MAX) + 1;
            let base = async {
                match checkpoint {
                    None => Ok(ManifestState::default()),
                    Some(v) => self.read_checkpoint(v).await,
                }
            };
            let versions =
                futures::future::join_all((after + 1..=last).map(|v| self.read_version(v)));
            let (base, versions) = futures::join!(base, versions);
            let base = match base {
                Ok(state) => state,
                Err(TierError::NotFound { .. }) if attempts < 3 => {
                    attempts += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            return self.apply_read(base, versions).await;
        }
    }

    /// `base` followed by `versions` (read side by side, in order from the version after
    /// `base`), up to the first that is missing, as [`ManifestLog::catch_up`] would; when none
    /// is missing, caught up from there.
    async fn apply_read(
        &self,
        base: ManifestState,
        versions: Vec<Result<Option<(String, file::VersionFile)>, TierError>>,
    ) -> Result<ManifestState, TierError> {
        let mut state = base;
        for read in versions {
            let Some((key, doc)) = read? else {
                return Ok(state);
            };
            state = apply_version(state, key, doc)?;
        }
        self.catch_up(state).await
    }

    /// Version `version`, with its key; `None` when it does not exist.
    async fn read_version(
        &self,
        version: u64,
    ) -> Result<Option<(String, file::VersionFile)>, TierError> {
        let key = self.partition.version_key(version);
        let bytes = match self.store.get(&key).await {
            Ok(bytes) => bytes,
            Err(TierError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let doc = file::decode_version(&bytes).map_err(|reason| TierError::InvalidManifest {
            key: key.clone(),
            reason,
        })?;
        Ok(Some((key, doc)))
    }

    /// `known` followed by every version committed after it.
    pub async fn catch_up(&self, known: ManifestState) -> Result<ManifestState, TierError> {
        let mut state = known;
        loop {
            let Some((key, doc)) = self.read_version(state.version + 1).await? else {
                return Ok(state);
            };
            state = apply_version(state, key, doc)?;
        }
    }

    async fn read_checkpoint(&self, version: u64) -> Result<ManifestState, TierError> {
        let key = self.partition.checkpoint_key(version);
        let bytes = self.store.get(&key).await?;
        let doc = file::decode_checkpoint(&bytes).map_err(|reason| TierError::InvalidManifest {
            key: key.clone(),
            reason,
        })?;
        if doc.state.version != version {
            return Err(TierError::InvalidManifest {
                key,
                reason: format!("holds version {}", doc.state.version),
            });
        }
        Ok(doc.state)
    }

    /// Commits `change` as the version after the latest one. `known` is the caller's latest
    /// state (loaded when `None`). On a lost race it re-reads; it retries while the change
    /// still applies and reports why when it no longer does. Returns the new state.
    pub async fn commit(
        &self,
        known: Option<ManifestState>,
        change: &Change,
    ) -> Result<ManifestState, TierError> {
        self.commit_after(known, change)
            .await
            .map(|(_, committed)| committed)
    }

    /// Fences the manifest at `epoch`: commits a version that changes no segment and raises
    /// the epoch, so that no writer of an older epoch commits again. A partition's new
    /// writer does so before it writes. Returns the newest epoch committed before, and the
    /// state after; when the manifest is at `epoch` already, nothing is written and both
    /// say so. Fails with [`TierError::Fenced`] once a newer epoch committed.
    pub async fn fence(
        &self,
        known: Option<ManifestState>,
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<(LeaderEpoch, ManifestState), TierError> {
        let change = Change {
            epoch,
            committed_at_ms: now_ms,
            added: Vec::new(),
            removed: Vec::new(),
        };
        let (before, after) = self.commit_after(known, &change).await?;
        Ok((before.epoch, after))
    }

    /// [`ManifestLog::commit`], returning the state the change was committed on as well.
    async fn commit_after(
        &self,
        known: Option<ManifestState>,
        change: &Change,
    ) -> Result<(ManifestState, ManifestState), TierError> {
        let mut state = match known {
            Some(state) => self.catch_up(state).await?,
            None => self.load().await?,
        };
        for _ in 0..COMMIT_ATTEMPTS_MAX {
            let next = match state.apply(change) {
                Ok(next) => next,
                // An earlier attempt whose answer was lost may have won: the names are unique.
                Err(_) if already_committed(&state, change) => return Ok((state.clone(), state)),
                Err(ChangeError::Fenced { writer, committed }) => {
                    return Err(TierError::Fenced { writer, committed });
                }
                Err(e) => return Err(TierError::Rejected(e)),
            };
            let key = self.partition.version_key(next.version);
            let doc = file::new_version(next.version, change);
            match self.store.put_if_absent(&key, file::encode(&doc)).await? {
                CreateOutcome::Created => {
                    self.checkpoint_if_due(&next).await?;
                    return Ok((state, next));
                }
                CreateOutcome::AlreadyExists => state = self.catch_up(state).await?,
            }
        }
        Err(TierError::Contended {
            version: state.version + 1,
            attempts: COMMIT_ATTEMPTS_MAX,
        })
    }

    async fn checkpoint_if_due(&self, state: &ManifestState) -> Result<(), TierError> {
        if !state.version.is_multiple_of(self.checkpoint_interval) {
            return Ok(());
        }
        let doc = CheckpointFile {
            format: super::MANIFEST_FORMAT,
            state: state.clone(),
        };
        let key = self.partition.checkpoint_key(state.version);
        // Another writer may have checkpointed this very version: same state, nothing to do.
        let _outcome = self.store.put_if_absent(&key, file::encode(&doc)).await?;
        Ok(())
    }

    /// Deletes versions and checkpoints that the latest checkpoint summarises, once they are
    /// older than `grace_ms`. Returns how many objects it deleted.
    pub async fn collect(&self, now_ms: i64, grace_ms: i64) -> Result<usize, TierError> {
        let listed = self.store.list(&self.partition.manifest_dir()).await?;
        let name = |key: &str| key.rsplit('/').next().unwrap_or("").to_string();
        let Some(latest) = listed
            .iter()
            .filter_map(|o| parse_version(&name(&o.key), CHECKPOINT_EXT))
            .max()
        else {
            return Ok(0);
        };
        let mut deleted = 0;
        for object in &listed {
            let n = name(&object.key);
            let covered = match (
                parse_version(&n, VERSION_EXT),
                parse_version(&n, CHECKPOINT_EXT),
            ) {
                (Some(v), _) => v <= latest,
                (_, Some(c)) => c < latest,
                _ => false,
            };
            if covered && object.last_modified_ms.saturating_add(grace_ms) <= now_ms {
                self.store.delete(&object.key).await?;
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

/// `state` after version `doc`, read from `key`, which must be the version after it.
fn apply_version(
    state: ManifestState,
    key: String,
    doc: file::VersionFile,
) -> Result<ManifestState, TierError> {
    if doc.version != state.version + 1 {
        return Err(TierError::InvalidManifest {
            key,
            reason: format!("says it is version {}", doc.version),
        });
    }
    state
        .apply(&doc.change)
        .map_err(|e| TierError::InvalidManifest {
            key,
            reason: e.to_string(),
        })
}

fn already_committed(state: &ManifestState, change: &Change) -> bool {
    if change.added.is_empty() && change.removed.is_empty() {
        // A fence: the manifest is at its epoch.
        return state.epoch == change.epoch;
    }
    let pending = |name| state.pending_deletion.iter().any(|p| &p.name == name);
    let added = change.added.iter().all(|s| state.contains(&s.name));
    let removed = change
        .removed
        .iter()
        .all(|n| !state.contains(n) && pending(n));
    (!change.added.is_empty() || !change.removed.is_empty()) && added && removed
}

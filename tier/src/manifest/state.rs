//! The manifest's state and the rules a change must follow. Pure: no I/O, time comes in with
//! the change.

use floe_wire::{LeaderEpoch, Offset};
use serde::{Deserialize, Serialize};

use crate::layout::SegmentName;
use crate::segment::UploadedSegment;

/// Version of the JSON documents (stable).
pub const MANIFEST_FORMAT: u32 = 1;
/// How long a removed segment stays listed as pending deletion. The collector's grace period
/// must be shorter; after it, the object's age alone tells the collector it may go.
pub const PENDING_DELETION_KEEP_MS: i64 = 7 * 24 * 3600 * 1000;

/// One segment object in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieredSegment {
    pub name: SegmentName,
    pub base_offset: u64,
    /// Greater than `base_offset`.
    pub next_offset: u64,
    pub object_bytes: u64,
    pub data_bytes: u64,
    pub record_count: u64,
    pub max_timestamp: i64,
    /// Leader epoch of the uploader.
    pub epoch: LeaderEpoch,
}

impl From<&UploadedSegment> for TieredSegment {
    fn from(u: &UploadedSegment) -> Self {
        TieredSegment {
            name: u.name.clone(),
            base_offset: u.base_offset.get(),
            next_offset: u.next_offset.get(),
            object_bytes: u.object_bytes,
            data_bytes: u.data_bytes,
            record_count: u.record_count,
            max_timestamp: u.max_timestamp,
            epoch: u.epoch,
        }
    }
}

/// A removed segment whose object may still be read by holders of an older state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingDeletion {
    pub name: SegmentName,
    pub removed_at_ms: i64,
}

/// What one manifest version does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// Leader epoch of the writer.
    pub epoch: LeaderEpoch,
    /// Milliseconds since the Unix epoch, as the writer's clock says.
    pub committed_at_ms: i64,
    /// Segments appended at the end, in offset order, contiguous with the state's end.
    pub added: Vec<TieredSegment>,
    /// Segments removed from the start, oldest first.
    pub removed: Vec<SegmentName>,
}

/// Why a change does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("writer epoch {writer} is older than the committed epoch {committed}")]
    Fenced {
        writer: LeaderEpoch,
        committed: LeaderEpoch,
    },
    #[error("the change neither adds nor removes a segment, nor raises the epoch")]
    Empty,
    #[error("the manifest has reached the last version number")]
    VersionsExhausted,
    #[error("segment {name} is empty or inverted")]
    EmptySegment { name: SegmentName },
    #[error("segment {name} starts at {found}, but the tier ends at {expected}")]
    NotContiguous {
        name: SegmentName,
        expected: u64,
        found: u64,
    },
    #[error("segment {name} is not the oldest segment, so it cannot be removed")]
    NotOldest { name: SegmentName },
    #[error("segment {name} is already in the manifest")]
    Duplicate { name: SegmentName },
}

/// A partition's tier as of one manifest version. Invariant: `segments` are contiguous in
/// offsets, and the first added segment ever fixed where the tier starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestState {
    /// 0 before the first commit.
    pub version: u64,
    /// The newest epoch that committed.
    pub epoch: LeaderEpoch,
    /// Where the next added segment must start; `None` until the first segment is added.
    pub end_offset: Option<u64>,
    pub segments: Vec<TieredSegment>,
    pub pending_deletion: Vec<PendingDeletion>,
}

impl ManifestState {
    /// The state after `change` as the next version, or why it may not be committed.
    pub fn apply(&self, change: &Change) -> Result<ManifestState, ChangeError> {
        if change.epoch < self.epoch {
            return Err(ChangeError::Fenced {
                writer: change.epoch,
                committed: self.epoch,
            });
        }
        // A change of segments only, or a fence: a new writer raising the epoch before it
        // writes, so that no writer of an older epoch commits again.
        let fence = change.epoch > self.epoch;
        if change.added.is_empty() && change.removed.is_empty() && !fence {
            return Err(ChangeError::Empty);
        }
        let mut next = self.clone();
        next.version = self
            .version
            .checked_add(1)
            .ok_or(ChangeError::VersionsExhausted)?;
        next.epoch = change.epoch;
        for (i, name) in change.removed.iter().enumerate() {
            if next.segments.get(i).map(|s| &s.name) != Some(name) {
                return Err(ChangeError::NotOldest { name: name.clone() });
            }
        }
        let removed: Vec<_> = next.segments.drain(..change.removed.len()).collect();
        let horizon = change
            .committed_at_ms
            .saturating_sub(PENDING_DELETION_KEEP_MS);
        next.pending_deletion.retain(|p| p.removed_at_ms >= horizon);
        next.pending_deletion
            .extend(removed.into_iter().map(|s| PendingDeletion {
                name: s.name,
                removed_at_ms: change.committed_at_ms,
            }));
        for segment in &change.added {
            next.append(segment)?;
        }
        Ok(next)
    }

    fn append(&mut self, segment: &TieredSegment) -> Result<(), ChangeError> {
        if segment.next_offset <= segment.base_offset {
            return Err(ChangeError::EmptySegment {
                name: segment.name.clone(),
            });
        }
        if self.contains(&segment.name) {
            return Err(ChangeError::Duplicate {
                name: segment.name.clone(),
            });
        }
        if let Some(expected) = self.end_offset
            && segment.base_offset != expected
        {
            return Err(ChangeError::NotContiguous {
                name: segment.name.clone(),
                expected,
                found: segment.base_offset,
            });
        }
        self.end_offset = Some(segment.next_offset);
        self.segments.push(segment.clone());
        Ok(())
    }

    pub fn contains(&self, name: &SegmentName) -> bool {
        self.segments.iter().any(|s| &s.name == name)
    }

    /// The first offset in the tier (the end when it holds nothing).
    pub fn start_offset(&self) -> Offset {
        Offset::new(
            self.segments
                .first()
                .map(|s| s.base_offset)
                .or(self.end_offset)
                .unwrap_or(0),
        )
    }

    /// The offset after the last tiered record (0 when nothing was ever tiered).
    pub fn tier_end(&self) -> Offset {
        Offset::new(self.end_offset.unwrap_or(0))
    }

    /// The segment holding `offset`.
    pub fn segment_for(&self, offset: Offset) -> Option<&TieredSegment> {
        let o = offset.get();
        let i = self.segments.partition_point(|s| s.next_offset <= o);
        self.segments.get(i).filter(|s| s.base_offset <= o)
    }

    pub fn data_bytes(&self) -> u64 {
        self.segments
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.data_bytes))
    }

    /// Checks the invariants of a state read from a checkpoint.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let mut end = None;
        for s in &self.segments {
            if s.next_offset <= s.base_offset {
                return Err(format!("segment {} is empty", s.name));
            }
            if end.is_some_and(|e| e != s.base_offset) {
                return Err(format!("segment {} is not contiguous", s.name));
            }
            end = Some(s.next_offset);
        }
        if end.is_some() && end != self.end_offset {
            return Err("end_offset disagrees with the last segment".into());
        }
        Ok(())
    }
}

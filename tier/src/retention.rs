//! Tier retention: which of the oldest tiered segments go, by bytes and by age. The plan is
//! pure; [`apply_tier_retention`] commits the removal. Objects are deleted later, by the
//! [`crate::Collector`], once readers holding an older manifest had a grace period.

use floe_wire::LeaderEpoch;

use crate::manifest::{Change, ManifestLog, ManifestState};
use crate::{SegmentName, TierError};

/// How much history the tier keeps. `None` keeps everything by that measure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierRetention {
    /// A segment goes only if the tier keeps at least this many data bytes without it.
    pub bytes_max: Option<u64>,
    /// A segment goes once its newest record is older than this.
    pub age_max_ms: Option<u64>,
}

/// The oldest segments beyond retention, oldest first, stopping at the first one that stays.
pub fn plan_removal(state: &ManifestState, policy: TierRetention, now_ms: i64) -> Vec<SegmentName> {
    let mut remaining = state.data_bytes();
    let mut removed = Vec::new();
    for segment in &state.segments {
        let by_bytes = policy
            .bytes_max
            .is_some_and(|max| remaining.saturating_sub(segment.data_bytes) >= max);
        let by_age = policy.age_max_ms.is_some_and(|age| {
            let cutoff = now_ms.saturating_sub(i64::try_from(age).unwrap_or(i64::MAX));
            segment.max_timestamp < cutoff
        });
        if !(by_bytes || by_age) {
            break;
        }
        remaining = remaining.saturating_sub(segment.data_bytes);
        removed.push(segment.name.clone());
    }
    removed
}

/// Commits the removal of every segment beyond `policy` as leader `epoch`. Returns the new
/// state, or `None` when nothing was beyond retention.
pub async fn apply_tier_retention(
    manifest: &ManifestLog,
    policy: TierRetention,
    epoch: LeaderEpoch,
    now_ms: i64,
) -> Result<Option<ManifestState>, TierError> {
    let state = manifest.load().await?;
    let removed = plan_removal(&state, policy, now_ms);
    if removed.is_empty() {
        return Ok(None);
    }
    let change = Change {
        epoch,
        committed_at_ms: now_ms,
        added: Vec::new(),
        removed,
    };
    manifest.commit(Some(state), &change).await.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::TieredSegment;
    use floe_wire::Offset;

    fn state(sizes_and_times: &[(u64, i64)]) -> ManifestState {
        let mut state = ManifestState::default();
        let mut base = 0;
        for &(bytes, ts) in sizes_and_times {
            let change = Change {
                epoch: LeaderEpoch::new(1),
                committed_at_ms: 0,
                added: vec![TieredSegment {
                    name: SegmentName::generate(Offset::new(base), LeaderEpoch::new(1)),
                    base_offset: base,
                    next_offset: base + 10,
                    object_bytes: bytes + 100,
                    data_bytes: bytes,
                    record_count: 10,
                    max_timestamp: ts,
                    epoch: LeaderEpoch::new(1),
                }],
                removed: Vec::new(),
            };
            state = state.apply(&change).expect("contiguous");
            base += 10;
        }
        state
    }

    #[test]
    fn retention_by_bytes_keeps_at_least_the_limit() {
        let s = state(&[(100, 0), (100, 0), (100, 0)]);
        let policy = TierRetention {
            bytes_max: Some(150),
            age_max_ms: None,
        };
        let removed = plan_removal(&s, policy, 0);
        assert_eq!(removed, vec![s.segments[0].name.clone()]);
    }

    #[test]
    fn retention_by_age_stops_at_the_first_young_segment() {
        let s = state(&[(1, 100), (1, 5_000), (1, 200)]);
        let policy = TierRetention {
            bytes_max: None,
            age_max_ms: Some(1_000),
        };
        let removed = plan_removal(&s, policy, 3_000);
        assert_eq!(removed, vec![s.segments[0].name.clone()]);
        assert!(plan_removal(&s, TierRetention::default(), 3_000).is_empty());
    }
}

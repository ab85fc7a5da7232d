//! The scrape hook: gauges and mirrored counters brought up to date from the broker's
//! layers just before `/metrics` encodes them.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use floe_hot_log::SyncActivity;

use super::Layers;
use crate::disk::DiskWatch;
use crate::metrics::{FollowerLabels, Metrics, ScrapeHook, StreamLabels, mirror};
use crate::partitions::Partitions;
use crate::tiering::Tiering;

/// What the hook reads; weak, so that the metrics keep no layer alive.
struct Sources {
    partitions: Weak<Partitions>,
    tiering: Weak<Tiering>,
    disk: Weak<DiskWatch>,
    syncs: Arc<SyncActivity>,
}

pub(super) fn hook(layers: &Layers) -> ScrapeHook {
    let sources = Sources {
        partitions: Arc::downgrade(&layers.partitions),
        tiering: Arc::downgrade(&layers.tiering),
        disk: Arc::downgrade(&layers.disk),
        syncs: layers.syncs.clone(),
    };
    ScrapeHook(Box::new(move |m: &Metrics| {
        let (Some(partitions), Some(tiering), Some(disk)) = (
            sources.partitions.upgrade(),
            sources.tiering.upgrade(),
            sources.disk.upgrade(),
        ) else {
            return;
        };
        mirror(
            &m.tier_upload_yield_seconds,
            sources.syncs.waited().as_secs_f64(),
        );
        tier_backlog(m, &partitions);
        replication_lag(m, &partitions);
        m.disk_high_water.set(i64::from(disk.is_reached()));
        let corrupt = partitions.corrupt_partitions().len();
        m.partitions_corrupt
            .set(i64::try_from(corrupt).unwrap_or(i64::MAX));
        m.mirror_tier(
            &tiering.store().metrics().snapshot(),
            tiering.reader().cache_memory_bytes(),
        );
    }))
}

/// Segments and bytes waiting to be tiered, by stream, and the bytes of every local log.
fn tier_backlog(m: &Metrics, partitions: &Partitions) {
    let mut backlog: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut local_bytes = 0;
    for p in partitions.all() {
        let b = p.upload_backlog();
        let entry = backlog.entry(p.stream().to_string()).or_default();
        entry.0 += b.segments;
        entry.1 += b.bytes;
        local_bytes += p.log().size_bytes();
    }
    m.tier_backlog_segments.clear();
    m.tier_backlog_bytes.clear();
    for (stream, (segments, bytes)) in backlog {
        let labels = StreamLabels { stream };
        m.tier_backlog_segments
            .get_or_create(&labels)
            .set(i64::try_from(segments).unwrap_or(i64::MAX));
        m.tier_backlog_bytes
            .get_or_create(&labels)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
    m.local_log_bytes
        .set(i64::try_from(local_bytes).unwrap_or(i64::MAX));
}

/// Records each follower of a partition led here lacks.
fn replication_lag(m: &Metrics, partitions: &Partitions) {
    m.replication_lag.clear();
    for p in partitions.all() {
        let Some(replica) = p.replica() else { continue };
        let end = p.log().log_end().get();
        for (follower, acked) in replica.follower_progress() {
            m.replication_lag
                .get_or_create(&FollowerLabels {
                    stream: p.stream().to_string(),
                    partition: p.id(),
                    follower,
                })
                .set(i64::try_from(end.saturating_sub(acked)).unwrap_or(i64::MAX));
        }
    }
}

//! Healing from the bucket: a local sealed segment that fails its checksums and is already
//! tiered is read from its objects instead (the fetch that found the damage is served from
//! the tier), and its file is replaced by the tiered copy, checked batch by batch against
//! the segment before it is written (`Log::replace_sealed`). One repair at a time per
//! segment; a failed one is tried again by the next read that finds the damage.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use floe_hot_log::SealedSegment;
use floe_tier::TierReader;
use floe_wire::{BatchHeader, Offset};

use super::Tiering;
use crate::metrics::Metrics;
use crate::partition::Partition;

/// Bytes asked of the tier per read while copying a segment.
const READ_BYTES: usize = 8 << 20;

/// The committed tier's range, `[start, end)`: as the partition's uploader last read it, or,
/// before its first run (just after a start), read from the bucket now. `None` when the
/// bucket cannot be read.
pub(crate) async fn tier_range(partition: &Partition) -> Option<Range<Offset>> {
    let uploader = partition.uploader();
    if let Some(start) = uploader.tier_start() {
        return Some(start..uploader.tier_end());
    }
    let state = uploader.manifest().load().await.ok()?;
    Some(state.start_offset()..state.tier_end())
}

/// Starts replacing the local sealed segment whose file is `damaged` by its tiered copy,
/// when the tier (`tiered`, from [`tier_range`]) holds all of it and no repair of it is
/// under way. Returns at once.
pub(crate) fn start(
    tiering: &Arc<Tiering>,
    metrics: &Arc<Metrics>,
    partition: &Arc<Partition>,
    damaged: &Path,
    tiered: Range<Offset>,
) {
    let Some(segment) = partition
        .log()
        .sealed_segments()
        .into_iter()
        .find(|s| s.path == damaged)
    else {
        return;
    };
    let wholly_tiered = tiered.start <= segment.base_offset && segment.next_offset <= tiered.end;
    if !wholly_tiered || !partition.begin_repair(segment.base_offset) {
        return;
    }
    let (tiering, metrics, partition) = (tiering.clone(), metrics.clone(), partition.clone());
    tokio::spawn(async move {
        let result = repair(tiering.reader(), &partition, &segment).await;
        partition.end_repair(segment.base_offset);
        match result {
            Ok(()) => {
                metrics.local_segments_healed.inc();
                tracing::warn!(
                    stream = partition.stream(),
                    partition = partition.id(),
                    file = %segment.path.display(),
                    "a damaged local segment was replaced by its tiered copy"
                );
            }
            Err(e) => tracing::error!(
                stream = partition.stream(),
                partition = partition.id(),
                file = %segment.path.display(),
                error = %e,
                "replacing a damaged local segment by its tiered copy failed; reads of it are served from the tier"
            ),
        }
    });
}

/// Why a repair failed.
#[derive(Debug, thiserror::Error)]
enum RepairError {
    #[error("reading the tiered copy")]
    Tier(#[from] floe_tier::TierError),
    #[error("the tiered batches do not end where the segment ends (at offset {at})")]
    Boundary { at: Offset },
    #[error("replacing the segment file")]
    Log(#[from] floe_hot_log::LogError),
    #[error("the replacement task failed")]
    Task(#[from] tokio::task::JoinError),
}

/// Copies the segment's batches from the tier (each validated by the reader) and replaces
/// the local file with them. Holds the whole segment in memory meanwhile.
async fn repair(
    reader: &TierReader,
    partition: &Arc<Partition>,
    segment: &SealedSegment,
) -> Result<(), RepairError> {
    let mut data = BytesMut::with_capacity(usize::try_from(segment.size_bytes).unwrap_or(0));
    let mut at = segment.base_offset;
    while at < segment.next_offset {
        let read = reader.read(partition.tier_path(), at, READ_BYTES).await?;
        let before = at;
        // An object may reach past the segment's end (other segment boundaries on another
        // leader): its batches are taken up to the end only.
        let mut rest = &read.bytes[..];
        while at < segment.next_offset && !rest.is_empty() {
            let header = BatchHeader::parse(rest).map_err(|_| RepairError::Boundary { at })?;
            if header.base_offset != at {
                return Err(RepairError::Boundary { at });
            }
            let (batch, after) = rest
                .split_at_checked(header.batch_length as usize)
                .ok_or(RepairError::Boundary { at })?;
            data.extend_from_slice(batch);
            rest = after;
            at = header.next_offset();
        }
        if at == before {
            return Err(RepairError::Boundary { at });
        }
    }
    if at != segment.next_offset {
        return Err(RepairError::Boundary { at });
    }
    let healing = partition.clone();
    let base = segment.base_offset;
    tokio::task::spawn_blocking(move || healing.log().replace_sealed(base, &data)).await??;
    Ok(())
}

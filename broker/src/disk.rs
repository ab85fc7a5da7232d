//! The disk high-water mark: when the data directory's filesystem (or the partition logs)
//! is this full, publishes are refused with a retryable error until tiering and local
//! retention free space. The mark is checked by the maintenance loop; produce reads the
//! answer, lock-free.

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// When the broker stops accepting publishes to protect its disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskHighWater {
    /// The data directory's filesystem is this full (a fraction, e.g. 0.9).
    UsedFraction(f64),
    /// The partition logs hold this many bytes.
    LogBytes(u64),
}

impl FromStr for DiskHighWater {
    type Err = String;

    /// `90%` (of the filesystem) or a size such as `200GiB` (of the partition logs).
    fn from_str(s: &str) -> Result<DiskHighWater, String> {
        if let Some(percent) = s.trim().strip_suffix('%') {
            let value: f64 = percent
                .trim()
                .parse()
                .map_err(|_| format!("`{s}`: not a percentage"))?;
            if !(value > 0.0 && value <= 100.0) {
                return Err(format!("`{s}`: a percentage above 0 and at most 100"));
            }
            return Ok(DiskHighWater::UsedFraction(value / 100.0));
        }
        floe_wire::units::parse_size(s).map(DiskHighWater::LogBytes)
    }
}

impl DiskHighWater {
    /// Whether the mark is reached.
    fn reached(&self, data_dir: &Path, log_bytes: u64) -> bool {
        match *self {
            DiskHighWater::LogBytes(max) => log_bytes >= max,
            DiskHighWater::UsedFraction(fraction) => match rustix::fs::statvfs(data_dir) {
                Ok(fs) => used_fraction(fs.f_blocks, fs.f_bfree, fs.f_bavail) >= fraction,
                Err(e) => {
                    tracing::warn!(dir = %data_dir.display(), error = %e, "cannot read the filesystem's usage");
                    false
                }
            },
        }
    }
}

/// How full a filesystem is, as `df` reports it: the blocks in use over the blocks this
/// process could use (in use plus available to it). Blocks reserved for root, or otherwise
/// neither free to us nor in use, count for neither: on a filesystem with a large reserve,
/// `(total - available) / total` would call it full long before it is.
fn used_fraction(blocks: u64, free: u64, available: u64) -> f64 {
    let used = blocks.saturating_sub(free);
    let usable = used.saturating_add(available);
    if usable == 0 {
        return 0.0;
    }
    used as f64 / usable as f64
}

/// Whether the disk is past its mark, as last checked.
#[derive(Debug, Default)]
pub(crate) struct DiskWatch {
    reached: AtomicBool,
}

impl DiskWatch {
    /// Publishes are refused while this holds.
    pub(crate) fn is_reached(&self) -> bool {
        self.reached.load(Ordering::Relaxed)
    }

    /// Checks `mark` against the data directory and the logs' bytes; logs a change.
    pub(crate) fn check(&self, mark: DiskHighWater, data_dir: &Path, log_bytes: u64) {
        let reached = mark.reached(data_dir, log_bytes);
        let was = self.reached.swap(reached, Ordering::Relaxed);
        if reached != was {
            if reached {
                tracing::warn!(high_water = ?mark, "disk high-water mark reached: refusing publishes until tiering frees space");
            } else {
                tracing::info!("disk below its high-water mark: accepting publishes again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fullness_is_used_over_usable_like_df() {
        // 252 blocks, 57 in use, 195 free of which only 35 are ours: 62% full, as df says.
        let fraction = used_fraction(252, 195, 35);
        assert!((fraction - 57.0 / 92.0).abs() < 1e-9, "{fraction}");
        assert_eq!(used_fraction(0, 0, 0), 0.0);
        assert_eq!(used_fraction(100, 0, 0), 1.0);
        assert_eq!(
            "90%".parse::<DiskHighWater>(),
            Ok(DiskHighWater::UsedFraction(0.9))
        );
    }
}

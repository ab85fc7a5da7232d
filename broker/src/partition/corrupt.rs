//! A partition whose log refused to open as corrupt: damaged data that recovery must not cut
//! (rot in the active segment, a damaged sealed segment without its index). The broker holds
//! it in the `corrupt` state: it refuses the partition's publishes and fetches, naming the
//! file and byte in its log, and the offsets (never the file) to clients, while its other
//! partitions serve. Nothing here changes the files; leaving
//! the state takes an operator's repair (or the data healed from elsewhere) and a reopen.

use std::path::{Path, PathBuf};

use floe_hot_log::LogError;
use serde::{Deserialize, Serialize};

/// The file in a partition's log directory that keeps its corrupt state across restarts,
/// when damage was found in data that opening the log does not check (a sealed segment
/// with its index, found damaged by an upload).
const MARKER_FILE: &str = "corrupt.json";

/// The marker's content: the damaged segment by name, within the log's directory.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    segment: String,
    position: u64,
    reason: String,
}

/// Where a partition's log is damaged, as its open reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CorruptPartition {
    pub stream: String,
    pub partition: u32,
    /// The damaged file.
    pub file: PathBuf,
    /// The first damaged byte in it (the start of the damaged batch).
    pub position: u64,
    /// What the open found there.
    pub reason: String,
    /// The offsets the damaged segment holds, from its name and the next segment's: `end`
    /// is `None` for the active segment (it runs to the log's end); both `None` when the
    /// file is not a segment.
    pub offsets_start: Option<u64>,
    pub offsets_end: Option<u64>,
}

impl CorruptPartition {
    /// The corrupt state of `stream`'s `partition` when its open failed with `error`; `None`
    /// when the error is not corruption (an I/O failure, a bad configuration).
    pub(crate) fn from_open(stream: &str, partition: u32, error: &LogError) -> Option<Self> {
        let LogError::Corrupt {
            file,
            position,
            reason,
        } = error
        else {
            return None;
        };
        Some(CorruptPartition::in_segment(
            stream,
            partition,
            file.clone(),
            *position,
            reason.clone(),
        ))
    }

    /// The corrupt state of `stream`'s `partition`, damaged at byte `position` of the
    /// segment `file`; the offsets it holds come from its name and the next segment's.
    pub(crate) fn in_segment(
        stream: &str,
        partition: u32,
        file: PathBuf,
        position: u64,
        reason: String,
    ) -> Self {
        let (offsets_start, offsets_end) = match segment_base(&file) {
            Some(start) => (Some(start), next_segment_base(&file, start)),
            None => (None, None),
        };
        CorruptPartition {
            stream: stream.to_string(),
            partition,
            file,
            position,
            reason,
            offsets_start,
            offsets_end,
        }
    }

    /// Narrows the damaged offsets to start at the damaged batch rather than at its
    /// segment's base: the batches before it in the segment are whole (a repair keeps them).
    pub(crate) fn find_first_damaged_offset(&mut self, config: &floe_hot_log::LogConfig) {
        let Some(dir) = self.file.parent() else {
            return;
        };
        if self.offsets_start.is_none() {
            return;
        }
        let plan = floe_hot_log::Log::plan_repair(
            &floe_hot_log::FsStorage,
            dir,
            config,
            &self.file,
            self.position,
            floe_wire::Offset::ZERO,
        );
        if let Ok(plan) = plan {
            self.offsets_start = Some(plan.discard_from.get());
        }
    }

    /// The corrupt state recorded in the partition's log directory `dir`, if any. A marker
    /// that cannot be read still holds the partition corrupt, naming the marker.
    pub(crate) fn read_marker(stream: &str, partition: u32, dir: &Path) -> Option<Self> {
        let path = dir.join(MARKER_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                let reason = format!("its corrupt marker cannot be read: {e}");
                return Some(CorruptPartition::in_segment(
                    stream, partition, path, 0, reason,
                ));
            }
        };
        Some(match serde_json::from_slice::<Marker>(&bytes) {
            Ok(marker) if is_plain_name(&marker.segment) => CorruptPartition::in_segment(
                stream,
                partition,
                dir.join(&marker.segment),
                marker.position,
                marker.reason,
            ),
            _ => CorruptPartition::in_segment(
                stream,
                partition,
                path,
                0,
                "its corrupt marker is unreadable".into(),
            ),
        })
    }

    /// Records this state in the partition's log directory `dir`, durably, so that a
    /// restart holds the partition corrupt too.
    pub(crate) fn write_marker(&self, dir: &Path) -> Result<(), crate::state_file::StateFileError> {
        let marker = Marker {
            segment: self
                .file
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            position: self.position,
            reason: self.reason.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&marker).unwrap_or_default();
        crate::state_file::write_atomically(&dir.join(MARKER_FILE), &bytes)
    }

    /// Removes the marker from the log directory `dir`, durably; none there is fine.
    pub(crate) fn remove_marker(dir: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(dir.join(MARKER_FILE)) {
            Ok(()) => crate::state_file::sync_dir(dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The damaged range, as clients are told it.
    pub(crate) fn damaged_range(&self) -> Option<floe_wire::frame::DamagedRange> {
        Some(floe_wire::frame::DamagedRange {
            start: floe_wire::Offset::new(self.offsets_start?),
            end: self.offsets_end.map(floe_wire::Offset::new),
        })
    }

    /// What a client is told: the stream, the partition and the offsets, never the server's
    /// file (its log has that).
    pub(crate) fn client_message(&self) -> String {
        let offsets = match (self.offsets_start, self.offsets_end) {
            (Some(start), Some(end)) => format!("offsets {start} to {} are damaged", end - 1),
            (Some(start), None) => format!("offsets from {start} to the log's end are damaged"),
            _ => "its log is damaged".to_owned(),
        };
        format!(
            "stream {} partition {} is corrupt: {offsets}; it refuses publishes and fetches \
             until an operator repairs it",
            self.stream, self.partition
        )
    }
}

/// A file name with no directory in it.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// The base offset a segment file's name (`{base:020}.log`) gives.
fn segment_base(file: &Path) -> Option<u64> {
    let name = file.file_name()?.to_str()?;
    name.strip_suffix(".log")?.parse().ok()
}

/// The base offset of the segment after the one starting at `base`, in `file`'s directory:
/// where the damaged segment's offsets end.
fn next_segment_base(file: &Path, base: u64) -> Option<u64> {
    std::fs::read_dir(file.parent()?)
        .ok()?
        .filter_map(|entry| segment_base(&entry.ok()?.path()))
        .filter(|&b| b > base)
        .min()
}

impl std::fmt::Display for CorruptPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream {} partition {} is corrupt: {} is damaged at byte {} ({}); it refuses \
             publishes and fetches until an operator repairs it",
            self.stream,
            self.partition,
            self.file.display(),
            self.position,
            self.reason
        )
    }
}

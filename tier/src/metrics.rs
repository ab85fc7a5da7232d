//! Counters of the tier's object-store traffic and cache behaviour, cheap to bump and to read
//! from a metrics exporter. No I/O here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The kinds of object-store request the tier makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    Get,
    Put,
    List,
    Delete,
}

impl RequestKind {
    pub const ALL: [RequestKind; 4] = [
        RequestKind::Get,
        RequestKind::Put,
        RequestKind::List,
        RequestKind::Delete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Get => "get",
            RequestKind::Put => "put",
            RequestKind::List => "list",
            RequestKind::Delete => "delete",
        }
    }
}

/// Told the kind and duration of every finished object-store request (failed ones too), e.g.
/// to feed a latency histogram. A multipart upload counts as one `Put` from start to finish.
#[derive(Clone)]
pub struct RequestObserver(pub Arc<dyn Fn(RequestKind, Duration) + Send + Sync>);

impl std::fmt::Debug for RequestObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestObserver")
    }
}

/// Monotonic counters; read them with [`TierMetrics::snapshot`].
#[derive(Debug, Default)]
pub struct TierMetrics {
    pub(crate) gets: AtomicU64,
    pub(crate) get_bytes: AtomicU64,
    pub(crate) puts: AtomicU64,
    pub(crate) put_bytes: AtomicU64,
    pub(crate) lists: AtomicU64,
    pub(crate) deletes: AtomicU64,
    pub(crate) chunk_hits: AtomicU64,
    pub(crate) chunk_misses: AtomicU64,
    pub(crate) prefetches: AtomicU64,
    pub(crate) footer_misses: AtomicU64,
    pub(crate) corrupt_objects: AtomicU64,
}

/// A copy of [`TierMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierMetricsSnapshot {
    pub gets: u64,
    pub get_bytes: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub lists: u64,
    pub deletes: u64,
    pub chunk_hits: u64,
    pub chunk_misses: u64,
    pub prefetches: u64,
    pub footer_misses: u64,
    pub corrupt_objects: u64,
}

impl TierMetricsSnapshot {
    /// Requests of one kind.
    pub fn requests(&self, kind: RequestKind) -> u64 {
        match kind {
            RequestKind::Get => self.gets,
            RequestKind::Put => self.puts,
            RequestKind::List => self.lists,
            RequestKind::Delete => self.deletes,
        }
    }
}

impl TierMetrics {
    pub fn snapshot(&self) -> TierMetricsSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TierMetricsSnapshot {
            gets: r(&self.gets),
            get_bytes: r(&self.get_bytes),
            puts: r(&self.puts),
            put_bytes: r(&self.put_bytes),
            lists: r(&self.lists),
            deletes: r(&self.deletes),
            chunk_hits: r(&self.chunk_hits),
            chunk_misses: r(&self.chunk_misses),
            prefetches: r(&self.prefetches),
            footer_misses: r(&self.footer_misses),
            corrupt_objects: r(&self.corrupt_objects),
        }
    }
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

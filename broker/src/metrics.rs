//! The broker's and the read replica's Prometheus metrics; [`crate::operators`] serves
//! them.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{Atomic, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-stream series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    pub stream: String,
}

/// Labels of a leader's per-follower series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FollowerLabels {
    pub stream: String,
    pub partition: u32,
    pub follower: u32,
}

/// Labels of error series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub code: String,
}

/// Labels of per-kind object-store series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Labels of peer-identity refusals: `claim`, `no_identity` or `dialed`
/// ([`crate::peer_identity::MismatchReason`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Brings gauges and mirrored counters up to date just before a scrape.
pub struct ScrapeHook(pub Box<dyn Fn(&Metrics) + Send + Sync>);

impl std::fmt::Debug for ScrapeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScrapeHook")
    }
}

/// Every metric the broker exports.
#[derive(Debug)]
pub struct Metrics {
    pub publish_batches: Family<StreamLabels, Counter>,
    pub publish_records: Family<StreamLabels, Counter>,
    pub publish_bytes: Family<StreamLabels, Counter>,
    /// Batches a `ProduceAck` refused, by error code.
    pub publish_refused: Family<ErrorLabels, Counter>,
    /// From a produce request's arrival to its acknowledgement, seconds.
    pub publish_latency: Histogram,
    /// From a replicated append to its commit (the high watermark passing it), seconds.
    pub quorum_ack_latency: Histogram,
    pub fetch_requests: Family<StreamLabels, Counter>,
    pub fetch_bytes: Family<StreamLabels, Counter>,
    /// Bytes of history served from the tier (below the local log) to consumers: the load
    /// read replicas would take over, reported to the controlplane's autoscaler.
    pub fetch_tier_bytes: Counter,
    pub fetch_latency: Histogram,
    /// Time history reads waited for the broker's history read rate, seconds.
    pub history_read_throttle_seconds: Counter<f64, AtomicU64>,
    /// Duration of each `fdatasync` of a partition log, seconds.
    pub fsync_latency: Histogram,
    pub errors: Family<ErrorLabels, Counter>,
    pub connections: Gauge,
    /// Client connections refused at accept, by the limit they met: `broker` or `address`.
    pub connections_refused: Family<ReasonLabels, Counter>,
    /// Bytes of requests in flight, every client connection together.
    pub request_bytes_in_flight: Gauge,
    /// Bytes of every partition log on local disk.
    pub local_log_bytes: Gauge,
    /// 1 while publishes are refused at the disk high-water mark.
    pub disk_high_water: Gauge,
    /// Partitions held in the `corrupt` state (their logs refused to open as corrupt, or an
    /// upload found a sealed segment failing its checksums).
    pub partitions_corrupt: Gauge,
    pub tier_backlog_segments: Family<StreamLabels, Gauge>,
    pub tier_backlog_bytes: Family<StreamLabels, Gauge>,
    pub tier_upload_failures: Counter,
    /// Uploads refused because a batch of the local sealed segment failed its checksum:
    /// the rot is never copied to the tier, and the segment stays on disk.
    pub tier_upload_corrupt_segments: Counter,
    /// Local sealed segments that failed their checksums and were replaced by their tiered
    /// copy.
    pub local_segments_healed: Counter,
    /// Time uploads waited for pauses in the logs' syncs (mirrored at scrape time).
    pub tier_upload_yield_seconds: Counter<f64, AtomicU64>,
    /// Object-store requests by kind (mirrored from the tier's counters at scrape time).
    pub tier_requests: Family<KindLabels, Counter>,
    pub tier_request_latency: Family<KindLabels, Histogram>,
    pub tier_get_bytes: Counter,
    pub tier_put_bytes: Counter,
    pub tier_cache_hits: Counter,
    pub tier_cache_misses: Counter,
    pub tier_cache_memory_bytes: Gauge,
    pub tier_corrupt_objects: Counter,
    /// Records a follower still lacks (the leader's log end minus its acked end), per
    /// partition this broker leads.
    pub replication_lag: Family<FollowerLabels, Gauge>,
    /// Elections this broker's replicas won (became leader).
    pub replica_leaderships: Counter,
    /// Uncommitted tails truncated, and whole logs reset, on this broker's replicas.
    pub replica_truncations: Counter,
    pub replica_resets: Counter,
    /// Replicas paused by a full disk, to recover from their logs once space is freed.
    pub replica_disk_full_pauses: Counter,
    /// Peer connections refused because a peer is not the broker its certificate names (or
    /// the one dialed), by reason.
    pub peer_identity_mismatches: Family<ReasonLabels, Counter>,
    /// Always 1, labelled with the version and commit (`floe_build_info`).
    build_info: Family<floe_controlplane::BuildLabels, Gauge>,
    scrape_hook: OnceLock<ScrapeHook>,
    registry: Registry,
}

fn latency_histogram() -> Histogram {
    // 10 µs to ~20 s.
    Histogram::new(exponential_buckets(0.000_01, 2.0, 21))
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("floe");
        let m = Metrics {
            publish_batches: Family::default(),
            publish_records: Family::default(),
            publish_bytes: Family::default(),
            publish_refused: Family::default(),
            publish_latency: latency_histogram(),
            quorum_ack_latency: latency_histogram(),
            fetch_requests: Family::default(),
            fetch_bytes: Family::default(),
            fetch_tier_bytes: Counter::default(),
            fetch_latency: latency_histogram(),
            history_read_throttle_seconds: Counter::default(),
            fsync_latency: latency_histogram(),
            errors: Family::default(),
            connections: Gauge::default(),
            connections_refused: Family::default(),
            request_bytes_in_flight: Gauge::default(),
            local_log_bytes: Gauge::default(),
            disk_high_water: Gauge::default(),
            partitions_corrupt: Gauge::default(),
            tier_backlog_segments: Family::default(),
            tier_backlog_bytes: Family::default(),
            tier_upload_failures: Counter::default(),
            tier_upload_corrupt_segments: Counter::default(),
            local_segments_healed: Counter::default(),
            tier_upload_yield_seconds: Counter::default(),
            tier_requests: Family::default(),
            tier_request_latency: Family::new_with_constructor(latency_histogram),
            tier_get_bytes: Counter::default(),
            tier_put_bytes: Counter::default(),
            tier_cache_hits: Counter::default(),
            tier_cache_misses: Counter::default(),
            tier_cache_memory_bytes: Gauge::default(),
            tier_corrupt_objects: Counter::default(),
            replication_lag: Family::default(),
            replica_leaderships: Counter::default(),
            replica_truncations: Counter::default(),
            replica_resets: Counter::default(),
            replica_disk_full_pauses: Counter::default(),
            peer_identity_mismatches: Family::default(),
            build_info: Family::default(),
            scrape_hook: OnceLock::new(),
            registry: Registry::default(),
        };
        m.build_info
            .get_or_create(&floe_controlplane::BuildLabels::current())
            .set(1);
        registry.register(
            "build_info",
            "The running build: always 1, labelled with its version and commit",
            m.build_info.clone(),
        );
        m.register_publish(&mut registry);
        m.register_replication(&mut registry);
        m.register_fetch(&mut registry);
        m.register_disk(&mut registry);
        m.register_tier(&mut registry);
        Arc::new(Metrics { registry, ..m })
    }

    /// Publishing: batches, records and bytes appended, refusals, and acknowledgement latencies.
    fn register_publish(&self, registry: &mut Registry) {
        registry.register(
            "publish_batches",
            "Record batches appended",
            self.publish_batches.clone(),
        );
        registry.register(
            "publish_refused_batches",
            "Batches refused in a produce acknowledgement, by error code",
            self.publish_refused.clone(),
        );
        registry.register(
            "publish_records",
            "Records appended",
            self.publish_records.clone(),
        );
        registry.register(
            "publish_bytes",
            "Bytes of record batches appended",
            self.publish_bytes.clone(),
        );
        registry.register(
            "publish_latency_seconds",
            "Produce request to acknowledgement",
            self.publish_latency.clone(),
        );
        registry.register(
            "quorum_ack_latency_seconds",
            "Replicated append to commit on a majority of the replicas (quorum acks)",
            self.quorum_ack_latency.clone(),
        );
    }

    /// Replication, on the leader and on this broker's replicas.
    fn register_replication(&self, registry: &mut Registry) {
        registry.register(
            "replication_lag_records",
            "Records a follower lacks behind its leader's log end (on the leader)",
            self.replication_lag.clone(),
        );
        registry.register(
            "replica_leaderships",
            "Elections this broker's replicas won",
            self.replica_leaderships.clone(),
        );
        registry.register(
            "replica_truncations",
            "Uncommitted tails truncated on this broker's replicas",
            self.replica_truncations.clone(),
        );
        registry.register(
            "replica_resets",
            "Replica logs reset to their leader's log start",
            self.replica_resets.clone(),
        );
        registry.register(
            "replica_disk_full_pauses",
            "Replicas paused by a full disk, to recover from their logs once space is freed",
            self.replica_disk_full_pauses.clone(),
        );
        registry.register(
            "peer_identity_mismatches",
            "Peer connections refused: a peer claimed another broker than its certificate \
             names, presented one naming none, or was not the broker dialed",
            self.peer_identity_mismatches.clone(),
        );
    }

    /// Fetching: requests, bytes served (from the log and from the tier), latency.
    fn register_fetch(&self, registry: &mut Registry) {
        registry.register(
            "fetch_requests",
            "Fetch requests answered",
            self.fetch_requests.clone(),
        );
        registry.register(
            "fetch_bytes",
            "Bytes of record batches served",
            self.fetch_bytes.clone(),
        );
        registry.register(
            "fetch_tier_bytes",
            "Bytes of history served from the tier (below the local log)",
            self.fetch_tier_bytes.clone(),
        );
        registry.register(
            "fetch_latency_seconds",
            "Fetch request to response, long-poll wait included",
            self.fetch_latency.clone(),
        );
        registry.register(
            "history_read_throttle_seconds",
            "Time fetches of history (sealed segments, the tier) waited for the broker's history read rate",
            self.history_read_throttle_seconds.clone(),
        );
    }

    /// The logs and their disk: sync latency, local bytes, the high-water mark, corrupt
    /// partitions; errors and connections.
    fn register_disk(&self, registry: &mut Registry) {
        registry.register(
            "log_fsync_latency_seconds",
            "Duration of each fdatasync of a partition log",
            self.fsync_latency.clone(),
        );
        registry.register(
            "errors",
            "Requests answered with an error, by code",
            self.errors.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            self.connections.clone(),
        );
        registry.register(
            "connections_refused",
            "Client connections refused at accept, by the limit they met: broker or address",
            self.connections_refused.clone(),
        );
        registry.register(
            "request_bytes_in_flight",
            "Bytes of requests in flight, every client connection together",
            self.request_bytes_in_flight.clone(),
        );
        registry.register(
            "local_log_bytes",
            "Bytes of every partition log on local disk",
            self.local_log_bytes.clone(),
        );
        registry.register(
            "disk_high_water",
            "1 while publishes are refused at the disk high-water mark",
            self.disk_high_water.clone(),
        );
        registry.register(
            "partitions_corrupt",
            "Partitions whose logs refused to open as corrupt: they refuse publishes and fetches",
            self.partitions_corrupt.clone(),
        );
    }

    /// Tiering: upload backlog and failures, object-store requests and bytes, the tier cache.
    fn register_tier(&self, registry: &mut Registry) {
        registry.register(
            "tier_upload_backlog_segments",
            "Sealed, committed segments waiting for upload",
            self.tier_backlog_segments.clone(),
        );
        registry.register(
            "tier_upload_backlog_bytes",
            "Bytes of sealed, committed segments waiting for upload",
            self.tier_backlog_bytes.clone(),
        );
        registry.register(
            "tier_upload_yield_seconds",
            "Time uploads waited for pauses in the logs' syncs on the same disk",
            self.tier_upload_yield_seconds.clone(),
        );
        registry.register(
            "tier_upload_failures",
            "Upload runs that failed and will be retried",
            self.tier_upload_failures.clone(),
        );
        registry.register(
            "tier_upload_corrupt_segments",
            "Uploads refused because a local sealed segment failed its checksums (kept on disk, never tiered)",
            self.tier_upload_corrupt_segments.clone(),
        );
        registry.register(
            "local_segments_healed",
            "Local sealed segments that failed their checksums, replaced by their tiered copy",
            self.local_segments_healed.clone(),
        );
        registry.register(
            "tier_requests",
            "Object-store requests by kind",
            self.tier_requests.clone(),
        );
        registry.register(
            "tier_request_duration_seconds",
            "Object-store request duration by kind (a multipart upload counts as one put)",
            self.tier_request_latency.clone(),
        );
        registry.register(
            "tier_get_bytes",
            "Bytes read from object storage",
            self.tier_get_bytes.clone(),
        );
        registry.register(
            "tier_put_bytes",
            "Bytes written to object storage",
            self.tier_put_bytes.clone(),
        );
        registry.register(
            "tier_cache_hits",
            "Tier chunk reads served by the cache",
            self.tier_cache_hits.clone(),
        );
        registry.register(
            "tier_cache_misses",
            "Tier chunk reads that needed a GET",
            self.tier_cache_misses.clone(),
        );
        registry.register(
            "tier_cache_memory_bytes",
            "Bytes of tier chunks cached in memory",
            self.tier_cache_memory_bytes.clone(),
        );
        registry.register(
            "tier_corrupt_objects",
            "Tier reads that found a corrupt object (never served)",
            self.tier_corrupt_objects.clone(),
        );
    }

    /// Counts a peer refused for its identity, in `floe_peer_identity_mismatches_total`.
    pub fn mismatch_counter(self: &Arc<Self>) -> crate::peer_identity::MismatchCounter {
        let metrics = self.clone();
        Arc::new(move |reason: crate::peer_identity::MismatchReason| {
            metrics
                .peer_identity_mismatches
                .get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                })
                .inc();
        })
    }

    /// Sets the hook run before every scrape; only the first call takes effect.
    pub fn set_scrape_hook(&self, hook: ScrapeHook) {
        let _ = self.scrape_hook.set(hook);
    }

    /// Mirrors the tier's request and cache counters, which floe-tier keeps, before a scrape.
    pub fn mirror_tier(&self, tier: &floe_tier::TierMetricsSnapshot, cache_memory_bytes: usize) {
        for kind in floe_tier::RequestKind::ALL {
            mirror(
                &self.tier_requests.get_or_create(&KindLabels {
                    kind: kind.as_str(),
                }),
                tier.requests(kind),
            );
        }
        mirror(&self.tier_get_bytes, tier.get_bytes);
        mirror(&self.tier_put_bytes, tier.put_bytes);
        mirror(&self.tier_cache_hits, tier.chunk_hits);
        mirror(&self.tier_cache_misses, tier.chunk_misses);
        mirror(&self.tier_corrupt_objects, tier.corrupt_objects);
        self.tier_cache_memory_bytes
            .set(i64::try_from(cache_memory_bytes).unwrap_or(i64::MAX));
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        if let Some(hook) = self.scrape_hook.get() {
            (hook.0)(self);
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Raises `counter` to `total`, a monotonic count kept elsewhere.
pub fn mirror<N, A>(counter: &Counter<N, A>, total: N)
where
    N: PartialOrd + std::ops::Sub<Output = N> + Copy,
    A: Atomic<N>,
{
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

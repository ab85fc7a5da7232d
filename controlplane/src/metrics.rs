//! The controlplane's Prometheus metrics, served at `GET /metrics` (text format, outside the
//! `/v1` API): the build, leadership, lapsed leases, every read replica's reported load,
//! replicas by state, and the autoscaler's policy bounds,
//! desired count, decisions and driver calls.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use floe_wire::admin::{ReadReplicaInfo, ReadReplicaState};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::api::error::Failure;
use crate::cluster::Cluster;
use crate::store::Store;

/// Labels of per-replica series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReplicaLabels {
    pub(crate) replica: String,
}

/// Labels of replica counts.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabels {
    pub(crate) state: &'static str,
}

/// Labels of the build's identity, for `floe_build_info` (the controlplane's and the
/// broker's).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
}

impl BuildLabels {
    /// This build: the crate's version, and the commit `FLOE_BUILD_COMMIT` named at compile
    /// time (`scripts/package.sh` sets it), else `unknown`.
    pub fn current() -> BuildLabels {
        BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            commit: option_env!("FLOE_BUILD_COMMIT").unwrap_or("unknown"),
        }
    }

    /// What `--version` prints after the program's name: `0.1.0 (commit 1a2b3c4)`.
    pub fn version_line() -> &'static str {
        static LINE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            let build = BuildLabels::current();
            format!("{} (commit {})", build.version, build.commit)
        });
        LINE.as_str()
    }
}

/// Labels of a consumer group's lag in one partition.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GroupLagLabels {
    pub(crate) group: String,
    pub(crate) stream: String,
    pub(crate) partition: u32,
}

/// Labels of autoscaler decisions.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DirectionLabels {
    pub(crate) direction: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// One group's lag in one partition.
pub(crate) type GroupLag = (GroupLagLabels, u64);

/// Every metric the controlplane exports.
#[derive(Debug)]
pub(crate) struct Metrics {
    /// The autoscaler's desired count of live replicas (absent until it decides).
    pub(crate) desired_replicas: Gauge,
    /// The scaling policy's bounds, as of the autoscaler's last decision: alerts compare the
    /// desired count with the maximum.
    pub(crate) min_replicas: Gauge,
    pub(crate) max_replicas: Gauge,
    /// 1 while this controlplane leads, 0 while it stands by.
    pub(crate) leader: Gauge,
    /// Brokers and read replicas declared dead because their lease lapsed.
    pub(crate) broker_leases_expired: Counter,
    pub(crate) read_replica_leases_expired: Counter,
    /// Changes of the desired count, by direction (`up`, `down`).
    pub(crate) decisions: Family<DirectionLabels, Counter>,
    pub(crate) replicas_started: Counter,
    pub(crate) replicas_stopped: Counter,
    /// Driver calls that failed.
    pub(crate) driver_errors: Counter,
    /// Changes of replicated partitions' replica sets started (members on dead or
    /// draining brokers replaced, or sets short of their factor grown).
    pub(crate) replica_replacements: Counter,
    /// Leaders deposed for losing contact with a majority of their replicas.
    pub(crate) leaders_cut_off: Counter,
    pub(crate) leaders_corrupt: Counter,
    /// Always 1, labelled with the version and commit (`floe_build_info`).
    build_info: Family<BuildLabels, Gauge>,
    replicas: Family<StateLabels, Gauge>,
    bytes_served: Family<ReplicaLabels, Gauge>,
    consumers: Family<ReplicaLabels, Gauge>,
    fetch_latency_p99: Family<ReplicaLabels, FloatGauge>,
    cache_hit_ratio: Family<ReplicaLabels, FloatGauge>,
    /// Records between a group's committed offset and the partition's high watermark.
    group_lag: Family<GroupLagLabels, Gauge>,
    /// Scrapes rebuild the per-replica series; one at a time.
    registry: Mutex<Registry>,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let metrics = Metrics {
            desired_replicas: Gauge::default(),
            min_replicas: Gauge::default(),
            max_replicas: Gauge::default(),
            leader: Gauge::default(),
            broker_leases_expired: Counter::default(),
            read_replica_leases_expired: Counter::default(),
            decisions: Family::default(),
            replicas_started: Counter::default(),
            replicas_stopped: Counter::default(),
            driver_errors: Counter::default(),
            replica_replacements: Counter::default(),
            leaders_cut_off: Counter::default(),
            leaders_corrupt: Counter::default(),
            build_info: Family::default(),
            replicas: Family::default(),
            bytes_served: Family::default(),
            consumers: Family::default(),
            fetch_latency_p99: Family::default(),
            cache_hit_ratio: Family::default(),
            group_lag: Family::default(),
            registry: Mutex::new(Registry::with_prefix("floe")),
        };
        metrics.register();
        metrics
    }

    /// Registers every metric, in the order the exposition lists them.
    fn register(&self) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.register_build(&mut registry);
        self.register_autoscaler_bounds(&mut registry);
        self.register_leadership(&mut registry);
        self.register_autoscaler_actions(&mut registry);
        self.register_partition_changes(&mut registry);
        self.register_read_replica_load(&mut registry);
        self.register_group_lag(&mut registry);
    }

    /// The build's identity.
    fn register_build(&self, registry: &mut Registry) {
        self.build_info
            .get_or_create(&BuildLabels::current())
            .set(1);
        registry.register(
            "build_info",
            "The running build: always 1, labelled with its version and commit",
            self.build_info.clone(),
        );
    }

    /// The autoscaler's desired count and its policy's bounds.
    fn register_autoscaler_bounds(&self, registry: &mut Registry) {
        registry.register(
            "autoscaler_desired_replicas",
            "Read replicas the autoscaler wants live",
            self.desired_replicas.clone(),
        );
        registry.register(
            "autoscaler_min_replicas",
            "The scaling policy's minimum of read replicas",
            self.min_replicas.clone(),
        );
        registry.register(
            "autoscaler_max_replicas",
            "The scaling policy's maximum of read replicas",
            self.max_replicas.clone(),
        );
    }

    /// Leadership, and leases that lapsed.
    fn register_leadership(&self, registry: &mut Registry) {
        registry.register(
            "controlplane_leader",
            "1 while this controlplane leads, 0 while it stands by",
            self.leader.clone(),
        );
        registry.register(
            "broker_leases_expired",
            "Brokers declared dead because their lease lapsed",
            self.broker_leases_expired.clone(),
        );
        registry.register(
            "read_replica_leases_expired",
            "Read replicas declared dead because their lease lapsed",
            self.read_replica_leases_expired.clone(),
        );
    }

    /// The autoscaler's decisions and its driver's calls.
    fn register_autoscaler_actions(&self, registry: &mut Registry) {
        registry.register(
            "autoscaler_decisions",
            "Changes of the desired read replica count",
            self.decisions.clone(),
        );
        registry.register(
            "autoscaler_replicas_started",
            "Read replicas the driver was asked to start",
            self.replicas_started.clone(),
        );
        registry.register(
            "autoscaler_replicas_stopped",
            "Read replicas the driver was asked to stop",
            self.replicas_stopped.clone(),
        );
        registry.register(
            "autoscaler_driver_errors",
            "Driver calls that failed",
            self.driver_errors.clone(),
        );
    }

    /// Changes of partitions' replica sets and leaders.
    fn register_partition_changes(&self, registry: &mut Registry) {
        registry.register(
            "partition_replica_replacements",
            "Replica-set changes started: members on dead or draining brokers replaced, or sets short of their factor grown",
            self.replica_replacements.clone(),
        );
        registry.register(
            "partition_leaders_cut_off",
            "Partition leaders replaced because they lost contact with a majority of their \
             replicas while still reaching the controlplane",
            self.leaders_cut_off.clone(),
        );
        registry.register(
            "partition_leaders_corrupt",
            "Partition leaders replaced because they hold the partition in the corrupt state",
            self.leaders_corrupt.clone(),
        );
    }

    /// Consumer groups' lag.
    fn register_group_lag(&self, registry: &mut Registry) {
        registry.register(
            "group_lag_records",
            "Records between a consumer group's committed offset and the partition's high \
             watermark (the whole log before the group's first commit there)",
            self.group_lag.clone(),
        );
    }

    /// Read replicas by state, and each one's reported load.
    fn register_read_replica_load(&self, registry: &mut Registry) {
        registry.register(
            "read_replicas",
            "Read replicas by state",
            self.replicas.clone(),
        );
        registry.register(
            "read_replica_bytes_served_per_second",
            "Bytes per second a read replica served, as last reported",
            self.bytes_served.clone(),
        );
        registry.register(
            "read_replica_consumers",
            "Consumers reading from a read replica, as last reported",
            self.consumers.clone(),
        );
        registry.register(
            "read_replica_fetch_latency_p99_seconds",
            "99th percentile of a read replica's fetch latency, as last reported",
            self.fetch_latency_p99.clone(),
        );
        registry.register(
            "read_replica_cache_hit_ratio",
            "Share of a read replica's fetched bytes served from its cache (0 to 1)",
            self.cache_hit_ratio.clone(),
        );
    }

    /// The text exposition, with the per-replica series set from `replicas` (replicas
    /// forgotten since the last scrape disappear).
    pub(crate) fn render(&self, replicas: &[ReadReplicaInfo], lags: &[GroupLag]) -> String {
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for family in [&self.bytes_served, &self.consumers] {
            family.clear();
        }
        self.fetch_latency_p99.clear();
        self.cache_hit_ratio.clear();
        self.group_lag.clear();
        for (labels, lag) in lags {
            self.group_lag
                .get_or_create(labels)
                .set(i64::try_from(*lag).unwrap_or(i64::MAX));
        }
        for (state, name) in [
            (ReadReplicaState::Live, "live"),
            (ReadReplicaState::Draining, "draining"),
            (ReadReplicaState::Dead, "dead"),
        ] {
            let count = replicas.iter().filter(|r| r.state == state).count();
            self.replicas
                .get_or_create(&StateLabels { state: name })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        for replica in replicas
            .iter()
            .filter(|r| r.state != ReadReplicaState::Dead)
        {
            let labels = ReplicaLabels {
                replica: replica.replica_id.clone(),
            };
            self.bytes_served
                .get_or_create(&labels)
                .set(i64::try_from(replica.bytes_served_per_second).unwrap_or(i64::MAX));
            self.consumers
                .get_or_create(&labels)
                .set(i64::from(replica.consumers));
            self.fetch_latency_p99
                .get_or_create(&labels)
                .set(replica.fetch_latency_p99_us as f64 / 1e6);
            self.cache_hit_ratio
                .get_or_create(&labels)
                .set(f64::from(replica.cache_hit_ratio_permille) / 1000.0);
        }
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &registry) {
            tracing::warn!(%error, "encoding the metrics failed");
        }
        text
    }
}

/// `GET /metrics`.
pub(crate) async fn serve<S: Store>(
    State(cluster): State<std::sync::Arc<Cluster<S>>>,
) -> Result<impl IntoResponse, Failure> {
    let replicas = cluster.store.read_replicas().await?;
    let lags = crate::api::group_lags(&cluster).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        cluster.metrics.render(&replicas, &lags),
    ))
}

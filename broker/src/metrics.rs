//! The broker's Prometheus metrics and the `/metrics` HTTP endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-stream series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    pub stream: String,
}

/// Labels of error series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub code: String,
}

/// Every metric the broker exports.
#[derive(Debug)]
pub struct Metrics {
    pub publish_batches: Family<StreamLabels, Counter>,
    pub publish_records: Family<StreamLabels, Counter>,
    pub publish_bytes: Family<StreamLabels, Counter>,
    /// From a produce request's arrival to its acknowledgement, seconds.
    pub publish_latency: Histogram,
    pub fetch_requests: Family<StreamLabels, Counter>,
    pub fetch_bytes: Family<StreamLabels, Counter>,
    pub fetch_latency: Histogram,
    /// Duration of each `fdatasync` of a partition log, seconds.
    pub fsync_latency: Histogram,
    pub errors: Family<ErrorLabels, Counter>,
    pub connections: Gauge,
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
            publish_latency: latency_histogram(),
            fetch_requests: Family::default(),
            fetch_bytes: Family::default(),
            fetch_latency: latency_histogram(),
            fsync_latency: latency_histogram(),
            errors: Family::default(),
            connections: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "publish_batches",
            "Record batches appended",
            m.publish_batches.clone(),
        );
        registry.register(
            "publish_records",
            "Records appended",
            m.publish_records.clone(),
        );
        registry.register(
            "publish_bytes",
            "Bytes of record batches appended",
            m.publish_bytes.clone(),
        );
        registry.register(
            "publish_latency_seconds",
            "Produce request to acknowledgement",
            m.publish_latency.clone(),
        );
        registry.register(
            "fetch_requests",
            "Fetch requests answered",
            m.fetch_requests.clone(),
        );
        registry.register(
            "fetch_bytes",
            "Bytes of record batches served",
            m.fetch_bytes.clone(),
        );
        registry.register(
            "fetch_latency_seconds",
            "Fetch request to response, long-poll wait included",
            m.fetch_latency.clone(),
        );
        registry.register(
            "log_fsync_latency_seconds",
            "Duration of each fdatasync of a partition log",
            m.fsync_latency.clone(),
        );
        registry.register(
            "errors",
            "Requests answered with an error, by code",
            m.errors.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            m.connections.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `/metrics` on `addr` until the task is dropped; returns the bound address.
pub async fn serve(
    metrics: Arc<Metrics>,
    addr: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics port {addr}"))?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }
        }),
    );
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok((bound, handle))
}

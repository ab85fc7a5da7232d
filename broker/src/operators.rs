//! The operators' HTTP port: `/metrics` (Prometheus), `/healthz` (the process answers) and
//! `/readyz` (it serves what it owns: a broker once its partitions are open and, when a
//! controlplane manages it, it has registered and applied its first assignments; a read
//! replica once registered). Load balancers and orchestrators probe the last two.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// Why the port could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind the metrics port {addr}")]
pub struct OperatorsPortError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Whether the process is ready; set once by whoever knows, read by `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Serves the port on `addr` until the task is dropped; returns the bound address.
pub async fn serve(
    metrics: Arc<Metrics>,
    readiness: Readiness,
    addr: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), OperatorsPortError> {
    let failed = |source| OperatorsPortError { addr, source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    let app = axum::Router::new()
        .route(
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
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = readiness.is_ready();
                async move {
                    if ready {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
                    }
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

//! `GET /v1/health` (the process serves HTTP) and `GET /v1/ready` (it leads).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use floe_wire::admin::{Build, Health, Readiness, Role};

use crate::cluster::Cluster;
use crate::store::Store;

pub(super) async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        build: Some(Build::current()),
    })
}

/// 200 on the leader, 503 on a standby: only the leader serves the API, so a load balancer
/// sends traffic to it alone.
pub(super) async fn ready<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> (StatusCode, Json<Readiness>) {
    let role = cluster.role();
    let ready = role == Role::Leader;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(Readiness { ready, role }))
}

//! The REST API under `/v1`: routes, the guard every request passes (leadership, admin
//! token), and JSON failures for unknown routes. Handlers live in the children, one file per
//! resource; the bodies are [`floe_wire::admin`] types.

mod brokers;
mod election_reports;
pub(crate) mod error;
mod extract;
mod groups;
mod health;
pub(crate) mod openapi;
mod peer_certificates;
mod read_replicas;
mod streams;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use floe_wire::admin::Role;

use crate::api::error::Failure;
use crate::cluster::Cluster;
use crate::store::Store;

/// Every route, as `(method, path)` in OpenAPI's path syntax. The OpenAPI document must
/// describe exactly these (checked by a test), and the router serves exactly these besides
/// `GET /metrics`.
#[cfg(test)]
pub(crate) const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/health"),
    ("get", "/v1/ready"),
    ("get", "/v1/openapi.json"),
    ("get", "/v1/streams"),
    ("post", "/v1/streams"),
    ("get", "/v1/streams/{name}"),
    ("patch", "/v1/streams/{name}"),
    ("delete", "/v1/streams/{name}"),
    ("put", "/v1/streams/{name}/retention"),
    ("get", "/v1/brokers"),
    ("post", "/v1/brokers"),
    ("post", "/v1/brokers/{broker_id}/heartbeat"),
    ("post", "/v1/brokers/{broker_id}/peer-certificate"),
    ("post", "/v1/brokers/{broker_id}/drain"),
    ("post", "/v1/brokers/{broker_id}/undrain"),
    ("get", "/v1/brokers/{broker_id}/assignments"),
    ("post", "/v1/brokers/{broker_id}/elections"),
    ("get", "/v1/groups"),
    ("get", "/v1/groups/{group}/offsets"),
    ("post", "/v1/groups/{group}/offsets"),
    ("post", "/v1/groups/{group}/reset"),
    ("get", "/v1/read-replicas"),
    ("post", "/v1/read-replicas"),
    ("post", "/v1/read-replicas/{replica_id}/heartbeat"),
    ("post", "/v1/read-replicas/{replica_id}/drain"),
    ("delete", "/v1/read-replicas/{replica_id}"),
    ("get", "/v1/scaling-policy"),
    ("put", "/v1/scaling-policy"),
];

/// Paths served by standbys too, and without a token. `/healthz` and `/readyz` are the same
/// as `/v1/health` and `/v1/ready`, at the paths load balancers and orchestrators probe
/// on every Floe process; like `/metrics`, they are outside the `/v1` API and its document.
const OPEN_PATHS: &[&str] = &[
    "/v1/health",
    "/v1/ready",
    "/v1/openapi.json",
    "/metrics",
    "/healthz",
    "/readyz",
];

/// The API's router over `cluster`.
pub(crate) fn router<S: Store>(cluster: Arc<Cluster<S>>) -> Router {
    Router::new()
        .merge(probe_routes::<S>())
        .merge(stream_routes::<S>())
        .merge(broker_routes::<S>())
        .merge(group_routes::<S>())
        .merge(read_replica_routes::<S>())
        .fallback(|request: Request| async move {
            Failure::RouteNotFound(request.uri().path().to_owned())
        })
        .method_not_allowed_fallback(|| async { Failure::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(cluster.clone(), guard::<S>))
        .with_state(cluster)
}

/// Routes still to be given the cluster as their state.
type Routes<S> = Router<Arc<Cluster<S>>>;

/// Health, readiness, this API's document and the metrics.
fn probe_routes<S: Store>() -> Routes<S> {
    Router::new()
        .route("/v1/health", get(health::health))
        .route("/v1/ready", get(health::ready::<S>))
        .route("/v1/openapi.json", get(openapi::serve))
        // Prometheus' text format and the probes, outside the `/v1` API and its document.
        .route("/metrics", get(crate::metrics::serve::<S>))
        .route("/healthz", get(health::health))
        .route("/readyz", get(health::ready::<S>))
}

fn stream_routes<S: Store>() -> Routes<S> {
    Router::new()
        .route(
            "/v1/streams",
            get(streams::list::<S>).post(streams::create::<S>),
        )
        .route(
            "/v1/streams/{name}",
            get(streams::describe::<S>)
                .patch(streams::alter::<S>)
                .delete(streams::delete::<S>),
        )
        .route(
            "/v1/streams/{name}/retention",
            put(streams::set_retention::<S>),
        )
}

fn broker_routes<S: Store>() -> Routes<S> {
    Router::new()
        .route(
            "/v1/brokers",
            get(brokers::list::<S>).post(brokers::register::<S>),
        )
        .route(
            "/v1/brokers/{broker_id}/heartbeat",
            post(brokers::heartbeat::<S>),
        )
        .route(
            "/v1/brokers/{broker_id}/peer-certificate",
            post(peer_certificates::issue::<S>),
        )
        .route("/v1/brokers/{broker_id}/drain", post(brokers::drain::<S>))
        .route(
            "/v1/brokers/{broker_id}/undrain",
            post(brokers::undrain::<S>),
        )
        .route(
            "/v1/brokers/{broker_id}/assignments",
            get(brokers::assignments::<S>),
        )
        .route(
            "/v1/brokers/{broker_id}/elections",
            post(election_reports::report::<S>),
        )
}

fn group_routes<S: Store>() -> Routes<S> {
    Router::new()
        .route("/v1/groups", get(groups::list::<S>))
        .route(
            "/v1/groups/{group}/offsets",
            get(groups::offsets::<S>).post(groups::commit::<S>),
        )
        .route("/v1/groups/{group}/reset", post(groups::reset::<S>))
}

/// Read replicas and their scaling policy.
fn read_replica_routes<S: Store>() -> Routes<S> {
    Router::new()
        .route(
            "/v1/read-replicas",
            get(read_replicas::list::<S>).post(read_replicas::register::<S>),
        )
        .route(
            "/v1/read-replicas/{replica_id}/heartbeat",
            post(read_replicas::heartbeat::<S>),
        )
        .route(
            "/v1/read-replicas/{replica_id}/drain",
            post(read_replicas::drain::<S>),
        )
        .route(
            "/v1/read-replicas/{replica_id}",
            delete(read_replicas::remove::<S>),
        )
        .route(
            "/v1/scaling-policy",
            get(read_replicas::policy::<S>).put(read_replicas::set_policy::<S>),
        )
}

/// Refuses API calls on a standby, and mutating calls without the admin token.
async fn guard<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    request: Request,
    next: Next,
) -> Response {
    let open = OPEN_PATHS.contains(&request.uri().path());
    if !open {
        let mutating = !matches!(*request.method(), Method::GET | Method::HEAD);
        if mutating && let Some(token) = &cluster.config.admin_token {
            let presented = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "));
            if !presented.is_some_and(|presented| same_secret(presented, token)) {
                return Failure::Unauthorized.into_response();
            }
        }
        if cluster.role() != Role::Leader {
            return Failure::NotLeader.into_response();
        }
    }
    next.run(request).await
}

/// Compares secrets in time independent of where they differ.
fn same_secret(presented: &str, expected: &str) -> bool {
    presented.len() == expected.len()
        && presented
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

//! The REST API under `/v1`: routes and their policies, the guards every request passes
//! (leadership, then who the caller is and what the route lets them do), and JSON failures
//! for unknown routes. Handlers live in the children, one file per
//! resource; the bodies are [`floe_wire::admin`] types.

mod brokers;
mod caller;
mod election_reports;
pub(crate) mod error;
mod extract;
mod groups;
mod health;
pub(crate) mod openapi;
mod peer_certificates;
mod principals;
mod read_replicas;
mod streams;

use std::sync::Arc;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use floe_wire::admin::Role;
use floe_wire::auth::{Action, PrincipalKind};

pub(crate) use caller::{Caller, Policy};
pub(crate) use groups::{PendingCommit, commit_offsets_loop, lags as group_lags};

use crate::api::error::Failure;
use crate::cluster::Cluster;
use crate::store::Store;

/// Every route, as `(method, path, policy)` in OpenAPI's path syntax. The OpenAPI document
/// must describe exactly these (checked by a test), the router serves exactly these besides
/// `GET /metrics` and the probes, and each is checked against its policy before its handler
/// runs.
pub(crate) const ROUTES: &[(&str, &str, Policy)] = &[
    ("get", "/v1/health", Policy::Open),
    ("get", "/v1/ready", Policy::Open),
    ("get", "/v1/openapi.json", Policy::Open),
    ("get", "/v1/streams", Policy::InHandler),
    ("post", "/v1/streams", Policy::InHandler),
    (
        "get",
        "/v1/streams/{name}",
        Policy::Stream(Action::Describe),
    ),
    ("patch", "/v1/streams/{name}", Policy::Stream(Action::Admin)),
    (
        "delete",
        "/v1/streams/{name}",
        Policy::Stream(Action::Admin),
    ),
    (
        "put",
        "/v1/streams/{name}/retention",
        Policy::Stream(Action::Admin),
    ),
    ("get", "/v1/brokers", Policy::Authenticated),
    ("post", "/v1/brokers", Policy::Kind(PrincipalKind::Broker)),
    ("post", "/v1/brokers/{broker_id}/heartbeat", Policy::Broker),
    (
        "post",
        "/v1/brokers/{broker_id}/peer-certificate",
        Policy::Broker,
    ),
    (
        "post",
        "/v1/brokers/{broker_id}/drain",
        Policy::ClusterAdmin,
    ),
    (
        "post",
        "/v1/brokers/{broker_id}/undrain",
        Policy::ClusterAdmin,
    ),
    ("get", "/v1/brokers/{broker_id}/assignments", Policy::Broker),
    ("post", "/v1/brokers/{broker_id}/elections", Policy::Broker),
    ("get", "/v1/groups", Policy::ClusterAdmin),
    ("get", "/v1/groups/{group}", Policy::InHandler),
    ("delete", "/v1/groups/{group}", Policy::InHandler),
    ("post", "/v1/groups/{group}/members", Policy::InHandler),
    (
        "post",
        "/v1/groups/{group}/members/{member}/heartbeat",
        Policy::InHandler,
    ),
    (
        "delete",
        "/v1/groups/{group}/members/{member}",
        Policy::InHandler,
    ),
    ("get", "/v1/groups/{group}/offsets", Policy::InHandler),
    ("post", "/v1/groups/{group}/offsets", Policy::InHandler),
    ("post", "/v1/groups/{group}/reset", Policy::InHandler),
    ("get", "/v1/read-replicas", Policy::Authenticated),
    (
        "post",
        "/v1/read-replicas",
        Policy::Kind(PrincipalKind::ReadReplica),
    ),
    (
        "post",
        "/v1/read-replicas/{replica_id}/heartbeat",
        Policy::Kind(PrincipalKind::ReadReplica),
    ),
    (
        "post",
        "/v1/read-replicas/{replica_id}/drain",
        Policy::ClusterAdmin,
    ),
    (
        "delete",
        "/v1/read-replicas/{replica_id}",
        Policy::Kind(PrincipalKind::ReadReplica),
    ),
    ("get", "/v1/scaling-policy", Policy::ClusterAdmin),
    ("put", "/v1/scaling-policy", Policy::ClusterAdmin),
    ("get", "/v1/principals", Policy::ClusterAdmin),
    ("post", "/v1/principals", Policy::ClusterAdmin),
    ("delete", "/v1/principals/{principal}", Policy::ClusterAdmin),
    (
        "post",
        "/v1/principals/{principal}/tokens",
        Policy::ClusterAdmin,
    ),
    (
        "delete",
        "/v1/principals/{principal}/tokens/{key_id}",
        Policy::ClusterAdmin,
    ),
    ("get", "/v1/auth/credentials", Policy::ClusterMember),
    ("get", "/v1/auth/whoami", Policy::Authenticated),
];

/// The policy of the route `request` matched; routes outside [`ROUTES`] (the probes, the
/// metrics) are open.
fn policy(method: &Method, request: &Request) -> Policy {
    let Some(path) = request.extensions().get::<MatchedPath>() else {
        return Policy::Open;
    };
    let method = method.as_str().to_ascii_lowercase();
    ROUTES
        .iter()
        .find(|(m, p, _)| *m == method && *p == path.as_str())
        .map_or(Policy::Open, |(_, _, policy)| *policy)
}

/// Removes consumer-group members whose session lapsed, every 100 ms, until the
/// controlplane stops. Standbys hold no members: nothing to do there.
pub(crate) async fn expire_group_members<S: Store>(cluster: Arc<Cluster<S>>) {
    while !cluster
        .stopped_within(std::time::Duration::from_millis(100))
        .await
    {
        for (group, member) in cluster.groups.expire(crate::cluster::now_ms()) {
            tracing::info!(%group, %member, "a member's session lapsed; its partitions go to the others");
        }
    }
}

/// Paths served by standbys too, and without a token. `/healthz` and `/readyz` are the same
/// as `/v1/health` and `/v1/ready`, at the paths load balancers and orchestrators probe
/// on every Floe process; like `/metrics`, they are outside the `/v1` API and its document.
/// `/metrics` names read replicas, streams and consumer groups (with their lag), and no more:
/// `docs/security.md` asks operators to let only monitoring reach it.
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
        .merge(principal_routes::<S>())
        .route_layer(middleware::from_fn_with_state(
            cluster.clone(),
            caller::authorize::<S>,
        ))
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
            "/v1/groups/{group}",
            get(groups::describe::<S>).delete(groups::delete::<S>),
        )
        .route("/v1/groups/{group}/members", post(groups::join::<S>))
        .route(
            "/v1/groups/{group}/members/{member}/heartbeat",
            post(groups::heartbeat::<S>),
        )
        .route(
            "/v1/groups/{group}/members/{member}",
            delete(groups::leave::<S>),
        )
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

/// Principals and their tokens, and the table brokers and read replicas check callers
/// against.
fn principal_routes<S: Store>() -> Routes<S> {
    Router::new()
        .route(
            "/v1/principals",
            get(principals::list::<S>).post(principals::create::<S>),
        )
        .route(
            "/v1/principals/{principal}",
            delete(principals::revoke::<S>),
        )
        .route(
            "/v1/principals/{principal}/tokens",
            post(principals::add_token::<S>),
        )
        .route(
            "/v1/principals/{principal}/tokens/{key_id}",
            delete(principals::revoke_token::<S>),
        )
        .route("/v1/auth/credentials", get(principals::credentials::<S>))
        .route("/v1/auth/whoami", get(principals::whoami))
}

/// Refuses API calls on a standby; who may call what is `caller::authorize`'s.
async fn guard<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    request: Request,
    next: Next,
) -> Response {
    let open = OPEN_PATHS.contains(&request.uri().path());
    if !open && cluster.role() != Role::Leader {
        return Failure::NotLeader.into_response();
    }
    next.run(request).await
}

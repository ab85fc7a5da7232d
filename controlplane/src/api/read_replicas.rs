//! `/v1/read-replicas` (register, heartbeat, drain, leave, list) and `/v1/scaling-policy`,
//! which the autoscaler acts on.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use floe_wire::admin::{
    MAX_READ_REPLICA_ID_LEN, ReadReplicaHeartbeat, ReadReplicaHeartbeatResponse, ReadReplicaInfo,
    ReadReplicaList, RegisterReadReplicaRequest, RegisterReadReplicaResponse, ScalingPolicy,
    valid_read_replica_id,
};

use crate::api::brokers::{check_build, check_zone, millis};
use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams};
use crate::cluster::{Cluster, now_ms};
use crate::store::{ReadReplicaRegistration, Store};

fn id_message() -> String {
    format!("a read replica id is 1 to {MAX_READ_REPLICA_ID_LEN} bytes of [A-Za-z0-9._-]")
}

/// A replica id from the path: malformed is 400, like any bad path.
fn path_id(id: String) -> Result<String, Failure> {
    if valid_read_replica_id(&id) {
        Ok(id)
    } else {
        Err(Failure::BadRequest(id_message()))
    }
}

pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<ReadReplicaList>, Failure> {
    let replicas = cluster.store.read_replicas().await?;
    Ok(Json(ReadReplicaList { replicas }))
}

pub(super) async fn register<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    Body(request): Body<RegisterReadReplicaRequest>,
) -> Result<Json<RegisterReadReplicaResponse>, Failure> {
    if let Some(id) = &request.replica_id
        && !valid_read_replica_id(id)
    {
        return Err(Failure::Invalid(id_message()));
    }
    check_zone(request.zone.as_deref())?;
    check_build(request.build.as_ref())?;
    let lease_ms = millis(cluster.config.lease);
    let registration = ReadReplicaRegistration {
        id: request.replica_id,
        endpoint: request.endpoint,
        zone: request.zone,
        build: request.build,
        lease_expires_at_ms: now_ms().saturating_add(lease_ms),
    };
    let replica = {
        let _writes = cluster.write_lock().await;
        cluster.store.register_read_replica(&registration).await?
    };
    tracing::info!(replica = %replica.replica_id, endpoint = %replica.endpoint,
        state = ?replica.state, "read replica registered");
    Ok(Json(RegisterReadReplicaResponse {
        replica_id: replica.replica_id,
        lease_ms,
        heartbeat_interval_ms: millis(cluster.config.heartbeat_interval),
    }))
}

pub(super) async fn heartbeat<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<String>,
    Body(load): Body<ReadReplicaHeartbeat>,
) -> Result<Json<ReadReplicaHeartbeatResponse>, Failure> {
    let id = path_id(id)?;
    if load.cache_hit_ratio_permille > 1000 {
        return Err(Failure::Invalid(
            "cache_hit_ratio_permille must be from 0 to 1000".to_owned(),
        ));
    }
    let lease_ms = millis(cluster.config.lease);
    let replica = {
        let _writes = cluster.write_lock().await;
        cluster
            .store
            .renew_read_replica(&id, now_ms().saturating_add(lease_ms), &load)
            .await?
    };
    Ok(Json(ReadReplicaHeartbeatResponse {
        state: replica.state,
        lease_ms,
    }))
}

/// Clients send the replica no new readers; the autoscaler stops it once it is idle.
pub(super) async fn drain<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<String>,
) -> Result<Json<ReadReplicaInfo>, Failure> {
    let id = path_id(id)?;
    let replica = {
        let _writes = cluster.write_lock().await;
        cluster.store.drain_read_replica(&id).await?
    };
    tracing::info!(replica = %id, state = ?replica.state, "read replica draining");
    Ok(Json(replica))
}

/// A replica leaving on purpose (it is shutting down): forgotten at once.
pub(super) async fn remove<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, Failure> {
    let id = path_id(id)?;
    {
        let _writes = cluster.write_lock().await;
        cluster.store.remove_read_replica(&id).await?;
    }
    tracing::info!(replica = %id, "read replica left");
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn policy<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<ScalingPolicy>, Failure> {
    Ok(Json(cluster.store.scaling_policy().await?))
}

pub(super) async fn set_policy<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    Body(policy): Body<ScalingPolicy>,
) -> Result<Json<ScalingPolicy>, Failure> {
    if policy.min_replicas > policy.max_replicas {
        return Err(Failure::Invalid(
            "min_replicas must not exceed max_replicas".to_owned(),
        ));
    }
    if policy.hysteresis_percent > 100 {
        return Err(Failure::Invalid(
            "hysteresis_percent must be from 0 to 100".to_owned(),
        ));
    }
    for (field, value) in [
        ("target_bytes_per_second", policy.target_bytes_per_second),
        ("scale_up_cooldown_ms", policy.scale_up_cooldown_ms),
        ("scale_down_cooldown_ms", policy.scale_down_cooldown_ms),
    ] {
        if i64::try_from(value).is_err() {
            return Err(Failure::Invalid(format!(
                "{field} must be at most {}",
                i64::MAX
            )));
        }
    }
    let _writes = cluster.write_lock().await;
    cluster.store.set_scaling_policy(&policy).await?;
    Ok(Json(policy))
}

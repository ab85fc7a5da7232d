//! `/v1/read-replicas` and `/v1/scaling-policy`: stored here, acted on by the autoscaler.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use floe_wire::admin::{ReadReplicaList, ScalingPolicy};

use crate::api::error::Failure;
use crate::api::extract::Body;
use crate::cluster::Cluster;
use crate::store::Store;

pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<ReadReplicaList>, Failure> {
    let replicas = cluster.store.read_replicas().await?;
    Ok(Json(ReadReplicaList { replicas }))
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

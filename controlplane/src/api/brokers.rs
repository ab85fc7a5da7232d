//! `/v1/brokers`: register, heartbeat (lease), list, drain, and the assignments long-poll.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use floe_wire::BrokerId;
use floe_wire::admin::{
    Assignments, BrokerInfo, BrokerList, BrokerState, Build, HeartbeatRequest, HeartbeatResponse,
    RegisterBrokerRequest, RegisterBrokerResponse,
};
use floe_wire::auth::PrincipalKind;
use serde::Deserialize;

use crate::api::Caller;
use crate::api::election_reports::{Deposed, depose_leader};
use crate::api::error::Failure;
use crate::api::extract::{Body, PathParams, QueryParams};
use crate::cluster::{Cluster, now_ms};
use crate::store::{BrokerRegistration, Store};

/// The longest zone label, in bytes.
const MAX_ZONE_LEN: usize = 64;
/// The most partitions one heartbeat may report.
const MAX_REPORTS: usize = 100_000;
/// Followers one partition report may name: a replica set has at most 16 members.
const MAX_REPLICATION_FACTOR: usize = 16;

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A zone label is 1 to [`MAX_ZONE_LEN`] bytes of `[A-Za-z0-9._-]`.
pub(super) fn check_zone(zone: Option<&str>) -> Result<(), Failure> {
    let Some(zone) = zone else { return Ok(()) };
    let valid = !zone.is_empty()
        && zone.len() <= MAX_ZONE_LEN
        && zone
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(Failure::Invalid(format!(
            "zone must be 1 to {MAX_ZONE_LEN} bytes of [A-Za-z0-9._-]"
        )))
    }
}

/// The longest version or commit a process may register with, in bytes.
const MAX_BUILD_LEN: usize = 64;

/// A build's version and commit are 1 to [`MAX_BUILD_LEN`] printable ASCII characters.
pub(super) fn check_build(build: Option<&Build>) -> Result<(), Failure> {
    let Some(build) = build else { return Ok(()) };
    for (field, value) in [
        ("build.version", &build.version),
        ("build.commit", &build.commit),
    ] {
        let valid = !value.is_empty()
            && value.len() <= MAX_BUILD_LEN
            && value.bytes().all(|b| b.is_ascii_graphic());
        if !valid {
            return Err(Failure::Invalid(format!(
                "{field} must be 1 to {MAX_BUILD_LEN} printable ASCII characters"
            )));
        }
    }
    Ok(())
}

pub(super) async fn register<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    caller: Caller,
    Body(request): Body<RegisterBrokerRequest>,
) -> Result<Json<RegisterBrokerResponse>, Failure> {
    check_zone(request.zone.as_deref())?;
    check_build(request.build.as_ref())?;
    // A principal bound to a broker id registers that broker: under its id, whatever the
    // broker asked for being that id or nothing.
    let bound = caller
        .principal()
        .filter(|p| p.kind == PrincipalKind::Broker)
        .and_then(|p| p.broker_id);
    let id = match (request.broker_id, bound) {
        (Some(asked), _) => {
            caller.require_broker(asked)?;
            Some(asked)
        }
        (None, bound) => bound,
    };
    let now = now_ms();
    let lease_ms = millis(cluster.config.lease);
    let registration = BrokerRegistration {
        id,
        client_endpoint: request.client_endpoint,
        peer_endpoint: request.peer_endpoint,
        zone: request.zone,
        build: request.build,
        now_ms: now,
        lease_expires_at_ms: now.saturating_add(lease_ms),
    };
    let broker = {
        let _writes = cluster.write_lock().await;
        cluster.store.register_broker(&registration).await?
    };
    // A new broker may take replicas that had nowhere to go.
    cluster.request_repair();
    Ok(Json(RegisterBrokerResponse {
        broker_id: broker.broker_id,
        lease_ms,
        heartbeat_interval_ms: millis(cluster.config.heartbeat_interval),
    }))
}

pub(super) async fn heartbeat<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<u32>,
    Body(request): Body<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>, Failure> {
    if request.partitions.len() > MAX_REPORTS {
        return Err(Failure::Invalid(format!(
            "a heartbeat reports at most {MAX_REPORTS} partitions"
        )));
    }
    if let Some(report) = request.partitions.iter().find(|r| {
        r.replica_lag.len() > MAX_REPLICATION_FACTOR
            || r.new_set_caught_up.len() > MAX_REPLICATION_FACTOR
    }) {
        return Err(Failure::Invalid(format!(
            "partition {}/{} reports {} followers' lag and a set of {}; a replica set has at \
             most {}",
            report.stream,
            report.partition,
            report.replica_lag.len(),
            report.new_set_caught_up.len(),
            MAX_REPLICATION_FACTOR
        )));
    }
    if request.corrupt.len() > MAX_REPORTS {
        return Err(Failure::Invalid(format!(
            "a heartbeat reports at most {MAX_REPORTS} corrupt partitions"
        )));
    }
    if let Some(report) = request
        .corrupt
        .iter()
        .find(|r| r.segment.len() > 255 || r.reason.len() > 4096)
    {
        return Err(Failure::Invalid(format!(
            "corrupt partition {}/{}: a segment name has at most 255 bytes and a reason 4096",
            report.stream, report.partition
        )));
    }
    if i64::try_from(request.history_read_bytes_per_second).is_err() {
        return Err(Failure::Invalid(format!(
            "history_read_bytes_per_second must be at most {}",
            i64::MAX
        )));
    }
    let id = BrokerId::new(id);
    let lease_ms = millis(cluster.config.lease);
    let broker = {
        let _writes = cluster.write_lock().await;
        let broker = cluster
            .store
            .renew_lease(id, now_ms().saturating_add(lease_ms))
            .await?;
        if let Some(version) = cluster
            .store
            .report_partitions(id, &request.partitions)
            .await?
        {
            // A replica-set change completed: its members learn the final set.
            cluster.announce(version);
        }
        for report in request.partitions.iter().filter(|r| r.quorum_lost) {
            let partition = (&report.stream, report.partition, report.epoch);
            depose_leader(&cluster, id, partition, Deposed::CutOff).await?;
        }
        for report in &request.corrupt {
            if let Some(epoch) = report.epoch {
                let partition = (&report.stream, report.partition, epoch);
                depose_leader(&cluster, id, partition, Deposed::Corrupt).await?;
            }
        }
        broker
    };
    cluster.record_history_reads(id, request.history_read_bytes_per_second);
    if cluster.record_corrupt(id, &request.corrupt) {
        // A replica newly corrupt is replaced from the others.
        cluster.request_repair();
    }
    Ok(Json(HeartbeatResponse {
        state: broker.state,
        lease_ms,
        assignment_version: cluster.version(),
    }))
}

pub(super) async fn list<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
) -> Result<Json<BrokerList>, Failure> {
    let brokers = cluster.store.brokers().await?;
    Ok(Json(BrokerList { brokers }))
}

/// Stops placing replicas on the broker and moves its replicas away; it keeps its lease.
pub(super) async fn drain<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<u32>,
) -> Result<Json<BrokerInfo>, Failure> {
    let broker = set_state(&cluster, id, BrokerState::Draining).await?;
    cluster.request_repair();
    Ok(Json(broker))
}

/// Sets a broker's state under the write lock; the broker as it now is.
async fn set_state<S: Store>(
    cluster: &Cluster<S>,
    id: u32,
    state: BrokerState,
) -> Result<BrokerInfo, Failure> {
    let _writes = cluster.write_lock().await;
    Ok(cluster
        .store
        .set_broker_state(BrokerId::new(id), state)
        .await?)
}

/// Ends a drain: the broker may take replicas and lead again. A dead broker cannot be
/// undrained; it becomes live when it heartbeats again.
pub(super) async fn undrain<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<u32>,
) -> Result<Json<BrokerInfo>, Failure> {
    let broker = set_state(&cluster, id, BrokerState::Live).await?;
    if broker.state == BrokerState::Dead {
        return Err(Failure::Conflict(format!(
            "broker {id} is dead (its lease expired): it becomes live when it runs and \
             heartbeats again, not by undrain"
        )));
    }
    // Partitions short of replicas may now be placed on it.
    cluster.request_repair();
    Ok(Json(broker))
}

/// Query of the assignments long-poll.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AssignmentsQuery {
    /// Answer once the assignment version is above this; at once when absent.
    after_version: Option<u64>,
    /// The longest to wait, capped by the controlplane's `long_poll_max`.
    timeout_ms: Option<u64>,
}

/// Answers with the broker's assignments once the assignment version exceeds
/// `after_version`, or when the timeout passes (then with the unchanged version).
pub(super) async fn assignments<S: Store>(
    State(cluster): State<Arc<Cluster<S>>>,
    PathParams(id): PathParams<u32>,
    QueryParams(query): QueryParams<AssignmentsQuery>,
) -> Result<Json<Assignments>, Failure> {
    let id = BrokerId::new(id);
    if let Some(after) = query.after_version {
        // Refuse an unknown broker before waiting on its behalf.
        let brokers = cluster.store.brokers().await?;
        if !brokers.iter().any(|broker| broker.broker_id == id) {
            return Err(crate::store::StoreError::BrokerNotFound { id }.into());
        }
        let max = cluster.config.long_poll_max;
        let timeout = query
            .timeout_ms
            .map_or(max, |ms| Duration::from_millis(ms).min(max));
        cluster.wait_version_after(after, timeout).await;
    }
    Ok(Json(cluster.store.assignments(id).await?))
}

//! A broker managed by a controlplane: it registers (its id is kept in the data directory),
//! renews its lease with heartbeats that report the partitions it leads, and long-polls its
//! assignments, applying each version to its partitions.
//!
//! Applying never loses data on a guess. A stream missing from this broker's assignments is
//! deleted here only once the controlplane says the stream itself is gone (or was created
//! again, which a different creation time shows); a partition merely moved away is closed
//! and its files stay. A stream created again under a name whose objects are still being
//! deleted waits until they are, so it never adopts the old stream's history. The last
//! assignment applied is kept in the local catalog: a broker restarted while the
//! controlplane is down serves what it served before.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use floe_client::rest::{Controlplane, RestError};
use floe_wire::admin::{
    ApiErrorCode, Assignments, BrokerState as LeaseState, HeartbeatRequest, OffsetRange,
    PartitionAssignment, PartitionReport, RegisterBrokerRequest, ReplicaLag, StreamAssignment,
};
use floe_wire::{AckMode, BrokerId, Endpoint, PartitionId, StreamName};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::catalog::{StreamEntry, write_atomically};
use crate::partitions::StreamError;
use crate::server::BrokerState;

/// How this broker reaches its controlplane.
#[derive(Debug, Clone)]
pub struct ControlplaneSettings {
    /// Base URL of the REST API, e.g. `http://10.0.0.5:7300`.
    pub url: String,
    /// Bearer token for the controlplane's mutating calls (register, heartbeat).
    pub admin_token: Option<String>,
    /// Failure domain reported at registration.
    pub zone: Option<String>,
    /// Where peers reach this broker; the client address until replication has its port.
    pub peer_endpoint: Option<String>,
}

/// The longest an assignments long-poll waits before asking again.
const LONG_POLL: Duration = Duration::from_secs(30);
/// Pause after a failed call to the controlplane.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A managed broker's link to its controlplane, shared with the request handlers.
#[derive(Debug)]
pub struct Managed {
    pub controlplane: Controlplane,
    pub broker_id: BrokerId,
    registration: RegisterBrokerRequest,
    /// The epoch of every partition this broker leads, from the assignments last applied.
    epochs: Mutex<HashMap<(String, u32), u64>>,
    /// The assignment version last applied in full.
    applied: watch::Sender<u64>,
}

/// The broker's identity, kept in `<data-dir>/broker.json` once the controlplane gives it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Identity {
    broker_id: BrokerId,
}

impl Managed {
    /// The broker's id: the one in the data directory, or a new one from the controlplane
    /// (registering, retrying until it answers). `client_endpoint` is where clients reach
    /// this broker.
    pub async fn connect(
        settings: &ControlplaneSettings,
        data_dir: &Path,
        client_endpoint: Endpoint,
    ) -> Result<Managed> {
        let controlplane = Controlplane::new(&settings.url, settings.admin_token.clone())?;
        let peer_endpoint = match &settings.peer_endpoint {
            Some(peer) => Endpoint::new(peer.clone()).context("the peer address")?,
            None => client_endpoint.clone(),
        };
        let mut registration = RegisterBrokerRequest {
            broker_id: None,
            client_endpoint,
            peer_endpoint,
            zone: settings.zone.clone(),
        };
        let path = data_dir.join("broker.json");
        let broker_id = match std::fs::read(&path) {
            Ok(bytes) => {
                let identity: Identity = serde_json::from_slice(&bytes)
                    .with_context(|| format!("parsing {}", path.display()))?;
                identity.broker_id
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let id = register_until_answered(&controlplane, &registration).await?;
                let bytes = serde_json::to_vec_pretty(&Identity { broker_id: id })?;
                write_atomically(&path, &bytes)?;
                id
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        registration.broker_id = Some(broker_id);
        let (applied, _) = watch::channel(0);
        Ok(Managed {
            controlplane,
            broker_id,
            registration,
            epochs: Mutex::new(HashMap::new()),
            applied,
        })
    }

    /// Waits until `done` holds, checking it after every assignment version applied, for
    /// at most `timeout`; whether it holds.
    pub async fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let mut applied = self.applied.subscribe();
        let wait = async {
            while !done() {
                if applied.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        done()
    }

    fn epoch(&self, stream: &str, partition: u32) -> Option<u64> {
        let epochs = self.epochs.lock().unwrap_or_else(|e| e.into_inner());
        epochs.get(&(stream.to_string(), partition)).copied()
    }
}

async fn register_until_answered(
    controlplane: &Controlplane,
    registration: &RegisterBrokerRequest,
) -> Result<BrokerId> {
    let mut warned = false;
    loop {
        match controlplane.register_broker(registration).await {
            Ok(answer) => {
                tracing::info!(
                    broker_id = answer.broker_id.get(),
                    controlplane = controlplane.url(),
                    "registered"
                );
                return Ok(answer.broker_id);
            }
            Err(e) if e.is_retryable() => {
                if !warned {
                    tracing::warn!(error = %e, "waiting for the controlplane to register");
                    warned = true;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e).context("registering with the controlplane"),
        }
    }
}

/// The rate of history bytes this broker served from the tier, between heartbeats: the
/// demand the controlplane's autoscaler starts read replicas for.
struct HistoryRate {
    bytes: u64,
    at: Instant,
}

impl HistoryRate {
    fn new(state: &BrokerState) -> HistoryRate {
        HistoryRate {
            bytes: state.metrics.fetch_tier_bytes.get(),
            at: Instant::now(),
        }
    }

    /// Bytes per second since the last call.
    fn per_second(&mut self, state: &BrokerState) -> u64 {
        let now = HistoryRate::new(state);
        let bytes = now.bytes.saturating_sub(self.bytes);
        let seconds = now.at.duration_since(self.at).as_secs_f64();
        *self = now;
        if seconds <= 0.0 {
            return 0;
        }
        (bytes as f64 / seconds) as u64
    }
}

/// Renews the lease until shutdown, registering again whenever the controlplane has let it
/// lapse.
pub async fn heartbeat(state: Arc<BrokerState>) {
    let Some(managed) = state.managed.as_ref() else {
        return;
    };
    let mut shutdown = state.shutdown.clone();
    let mut registered = false;
    let mut interval = RETRY_PAUSE;
    let mut lease = Duration::MAX;
    let mut failing = false;
    let mut history = HistoryRate::new(&state);
    loop {
        if !registered {
            match managed
                .controlplane
                .register_broker(&managed.registration)
                .await
            {
                Ok(answer) => {
                    registered = true;
                    interval = Duration::from_millis(answer.heartbeat_interval_ms.max(100));
                    lease = Duration::from_millis(answer.lease_ms);
                    tracing::info!(broker_id = answer.broker_id.get(), "lease taken");
                }
                Err(e) => note_failure(&mut failing, "registering", &e),
            }
        } else {
            let request = HeartbeatRequest {
                partitions: reports(&state, managed, lease),
                history_read_bytes_per_second: history.per_second(&state),
            };
            match managed
                .controlplane
                .heartbeat(managed.broker_id, &request)
                .await
            {
                Ok(answer) => {
                    lease = Duration::from_millis(answer.lease_ms);
                    if failing {
                        tracing::info!("the controlplane answers heartbeats again");
                        failing = false;
                    }
                    if answer.state == LeaseState::Dead {
                        registered = false;
                        continue;
                    }
                }
                Err(e)
                    if matches!(
                        e.code(),
                        Some(ApiErrorCode::LeaseExpired | ApiErrorCode::BrokerNotFound)
                    ) =>
                {
                    tracing::warn!(error = %e, "lease lost; registering again");
                    registered = false;
                    continue;
                }
                Err(e) => note_failure(&mut failing, "heartbeat", &e),
            }
        }
        let pause = if registered { interval } else { RETRY_PAUSE };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

fn note_failure(failing: &mut bool, what: &str, error: &RestError) {
    if *failing {
        tracing::debug!(%error, "{what} failed again");
    } else {
        tracing::warn!(%error, "{what} failed; serving the last assignments meanwhile");
        *failing = true;
    }
}

/// What this broker knows of the partitions it leads.
fn reports(state: &BrokerState, managed: &Managed, lease: Duration) -> Vec<PartitionReport> {
    let mut reports = Vec::new();
    for p in state.partitions.all() {
        let Some(epoch) = managed.epoch(&p.stream, p.id) else {
            continue;
        };
        let Ok(stream) = StreamName::new(p.stream.clone()) else {
            continue;
        };
        let tier = p.uploader.tier_start().map(|start| OffsetRange {
            start: start.get(),
            end: p.uploader.tier_end().get().max(start.get()),
        });
        let log_end = p.log.log_end().get();
        let replica_lag = p
            .replica()
            .map(|replica| {
                replica
                    .follower_progress()
                    .into_iter()
                    .map(|(follower, acked)| ReplicaLag {
                        broker_id: BrokerId::new(follower),
                        records: log_end.saturating_sub(acked),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let new_set_caught_up = p
            .replica()
            .and_then(|replica| replica.new_set_caught_up())
            .map(|set| set.into_iter().map(BrokerId::new).collect())
            .unwrap_or_default();
        // Cut off from a majority for a whole lease: the controlplane would declare a leader
        // dead after as long, and one that cannot commit is no better.
        let quorum_lost = p
            .replica()
            .and_then(|replica| replica.quorum_contact_age())
            .is_some_and(|age| age >= lease);
        reports.push(PartitionReport {
            stream,
            partition: PartitionId::new(p.id),
            epoch,
            hot: Some(OffsetRange {
                start: p.log.log_start().get(),
                end: p.log.synced_end().get(),
            }),
            tier,
            bytes: p.log.size_bytes(),
            upload_backlog_bytes: p.upload_backlog().bytes,
            high_watermark: p.committed_end().map(|end| end.get()),
            replica_lag,
            new_set_caught_up,
            quorum_lost,
        });
    }
    reports
}

/// Follows the assignments until shutdown.
pub async fn follow_assignments(state: Arc<BrokerState>) {
    let Some(managed) = state.managed.as_ref() else {
        return;
    };
    let mut shutdown = state.shutdown.clone();
    let mut after: Option<u64> = None;
    let mut failing = false;
    loop {
        let poll = managed
            .controlplane
            .assignments(managed.broker_id, after, LONG_POLL);
        let answer = tokio::select! {
            answer = poll => answer,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let pause = match answer {
            Ok(assignments) => {
                failing = false;
                let version = assignments.version;
                if after == Some(version) {
                    // The long-poll timed out unchanged.
                    continue;
                }
                if apply(&state, managed, assignments).await {
                    after = Some(version);
                    continue;
                }
                // Something is still in the way (a deletion in progress, an unreachable
                // controlplane): apply the same version again shortly.
                after = None;
                RETRY_PAUSE
            }
            Err(e) => {
                note_failure(&mut failing, "fetching assignments", &e);
                after = None;
                RETRY_PAUSE
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// The catalog entry for a stream as assigned: the partitions this broker leads.
fn entry(stream: &StreamAssignment, me: BrokerId) -> StreamEntry {
    let config = &stream.config;
    StreamEntry {
        partitions: config.partitions,
        ack_mode: match config.ack_mode {
            AckMode::None => "none",
            AckMode::Leader => "leader",
            AckMode::Quorum => "quorum",
        }
        .to_string(),
        segment_bytes: config.segment.bytes,
        segment_age_ms: config.segment.age_ms,
        local_retention_bytes: config.retention.local_bytes,
        local_retention_ms: config.retention.local_ms,
        retention_bytes: config.retention.tier_bytes,
        retention_ms: config.retention.tier_ms,
        created_at_ms: Some(stream.created_at_ms),
        replication_factor: Some(config.replication_factor),
        held: Some(
            stream
                .partitions
                .iter()
                .filter(|p| holds(config.replication_factor, p, me))
                .map(|p| p.partition.get())
                .collect(),
        ),
        deleting: false,
    }
}

/// Whether this broker serves `partition`: every replica of a replicated partition, only
/// the leader of one without replicas.
fn holds(replication_factor: u32, partition: &PartitionAssignment, me: BrokerId) -> bool {
    if replication_factor > 1 {
        partition.replicas.contains(&me)
    } else {
        partition.leader == Some(me)
    }
}

/// Applies one version of the assignments; whether everything in it could be.
async fn apply(state: &Arc<BrokerState>, managed: &Managed, assignments: Assignments) -> bool {
    let me = managed.broker_id;
    let mut wanted: BTreeMap<String, StreamEntry> = BTreeMap::new();
    let mut epochs = HashMap::new();
    for stream in &assignments.streams {
        for p in &stream.partitions {
            if p.leader == Some(me) {
                epochs.insert((stream.name.to_string(), p.partition.get()), p.epoch);
            }
        }
        wanted.insert(stream.name.to_string(), entry(stream, me));
    }
    *managed.epochs.lock().unwrap_or_else(|e| e.into_inner()) = epochs;

    let mut complete = true;
    for (name, held) in state.partitions.streams() {
        let gone = match wanted.get(&name) {
            Some(next) => held.created_at_ms.is_some() && next.created_at_ms != held.created_at_ms,
            // Created on this broker before it had a controlplane: left alone.
            None if held.created_at_ms.is_none() => false,
            None => match managed.controlplane.stream(&name).await {
                Ok(description) => Some(description.created_at_ms) != held.created_at_ms,
                Err(e) if e.code() == Some(ApiErrorCode::StreamNotFound) => true,
                Err(e) => {
                    tracing::warn!(stream = %name, error = %e, "cannot tell whether the stream still exists");
                    complete = false;
                    continue;
                }
            },
        };
        if gone {
            if let Err(e) = blocking(state, move |s| s.partitions.delete_stream(&name)).await {
                tracing::error!(error = %e, "deleting a stream the controlplane deleted");
                complete = false;
            }
        } else if !wanted.contains_key(&name) && held.created_at_ms.is_some() {
            // Moved away: stop serving it, keep the files.
            let released = StreamEntry {
                held: Some(Vec::new()),
                ..held
            };
            if let Err(e) = state.partitions.set_stream(&name, released).await {
                tracing::error!(error = %e, "releasing a stream");
                complete = false;
            }
        }
    }
    for (name, next) in wanted {
        let stream = name.clone();
        match state.partitions.set_stream(&stream, next).await {
            Ok(()) => {}
            Err(StreamError::Deleting(_)) => {
                tracing::info!(stream = %name, "waiting for the objects of an earlier stream of this name to be deleted");
                complete = false;
            }
            Err(e) => {
                tracing::error!(stream = %name, error = %e, "cannot serve the stream as assigned");
                complete = false;
            }
        }
    }
    if !assign_replicas(state, &assignments) {
        complete = false;
    }
    if complete {
        managed.applied.send_replace(assignments.version);
    }
    complete
}

/// Hands each replicated partition held here its assignment (epoch, leader, election),
/// starting its replica first when it has none. False when replication is not set up on this
/// broker (no peer port) and a replicated partition needs it.
fn assign_replicas(state: &BrokerState, assignments: &Assignments) -> bool {
    let me = assignments.broker_id;
    let mut complete = true;
    for stream in &assignments.streams {
        if stream.config.replication_factor <= 1 {
            continue;
        }
        for p in stream
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&me))
        {
            let Some(partition) = state
                .partitions
                .get(stream.name.as_str(), p.partition.get())
            else {
                continue;
            };
            let Some(context) = &state.replication else {
                tracing::error!(stream = %stream.name, "a replicated stream, and this broker has no peer port (--peer-listen)");
                complete = false;
                continue;
            };
            partition
                .start_replica(context)
                .assign(crate::replica::Assignment {
                    epoch: p.epoch,
                    leader: p.leader,
                    electing: p.electing,
                    replicas: p.replicas.clone(),
                    previous: p.previous_replicas.clone(),
                });
        }
    }
    complete
}

async fn blocking(
    state: &Arc<BrokerState>,
    work: impl FnOnce(&BrokerState) -> Result<(), StreamError> + Send + 'static,
) -> Result<(), StreamError> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || work(&state))
        .await
        .unwrap_or_else(|e| Err(StreamError::Storage(anyhow::anyhow!("a task failed: {e}"))))
}

//! Assignments: long-polled from the controlplane and applied, version by version, to the
//! partitions this broker holds and to their replicas.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use floe_wire::BrokerId;
use floe_wire::admin::{ApiErrorCode, Assignments, PartitionAssignment, StreamAssignment};
use tokio::sync::watch;

use super::{LONG_POLL, RETRY_PAUSE, Session, note_failure};
use crate::catalog::StreamEntry;
use crate::partitions::{Partitions, StreamError};
use crate::replication::Replication;
use floe_wire::ErrorChain;

/// What applying assignments changes: the partitions held here and their replicas.
#[derive(Debug, Clone)]
pub(crate) struct Holdings {
    pub partitions: Arc<Partitions>,
    /// `None` on a broker without a peer port: it can hold no replicated partition.
    pub replication: Option<Replication>,
}

/// Follows the assignments until shutdown.
pub(crate) async fn follow_assignments(
    managed: Arc<Session>,
    holdings: Holdings,
    mut shutdown: watch::Receiver<bool>,
) {
    let managed = managed.as_ref();
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
                if apply(&holdings, managed, assignments).await {
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
        ack_mode: config.ack_mode,
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
async fn apply(holdings: &Holdings, managed: &Session, assignments: Assignments) -> bool {
    let partitions = &holdings.partitions;
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
    managed.lease.assigned(assignments.version, epochs);

    let mut complete = retire_streams(partitions, managed, &wanted).await;
    if !serve_streams(partitions, wanted).await {
        complete = false;
    }
    if !assign_replicas(holdings, &assignments) {
        complete = false;
    }
    if complete {
        managed.applied.send_replace(Some(assignments.version));
    }
    complete
}

/// Deletes the streams held here that the controlplane deleted (or deleted and created
/// again), and stops serving those assigned elsewhere; whether all of it could be done.
async fn retire_streams(
    partitions: &Arc<Partitions>,
    managed: &Session,
    wanted: &BTreeMap<String, StreamEntry>,
) -> bool {
    let mut complete = true;
    for (name, held) in partitions.streams() {
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
            let deleting = partitions.clone();
            let deleted = tokio::task::spawn_blocking(move || deleting.delete_stream(&name))
                .await
                .unwrap_or_else(|e| Err(StreamError::Task(e)));
            if let Err(e) = deleted {
                tracing::error!(error = %ErrorChain(&e), "deleting a stream the controlplane deleted");
                complete = false;
            }
        } else if !wanted.contains_key(&name) && held.created_at_ms.is_some() {
            // Moved away: stop serving it, keep the files.
            let released = StreamEntry {
                held: Some(Vec::new()),
                ..held
            };
            if let Err(e) = partitions.set_stream(&name, released).await {
                tracing::error!(error = %ErrorChain(&e), "releasing a stream");
                complete = false;
            }
        }
    }
    complete
}

/// Serves every stream as assigned; whether each one could be.
async fn serve_streams(partitions: &Partitions, wanted: BTreeMap<String, StreamEntry>) -> bool {
    let mut complete = true;
    for (name, next) in wanted {
        let stream = name.clone();
        match partitions.set_stream(&stream, next).await {
            Ok(()) => {}
            Err(StreamError::Deleting(_)) => {
                tracing::info!(stream = %name, "waiting for the objects of an earlier stream of this name to be deleted");
                complete = false;
            }
            Err(e) => {
                tracing::error!(stream = %name, error = %ErrorChain(&e), "cannot serve the stream as assigned");
                complete = false;
            }
        }
    }
    complete
}

/// Hands each replicated partition held here its assignment (epoch, leader, election),
/// starting its replica first when it has none. False when replication is not set up on this
/// broker (no peer port) and a replicated partition needs it.
fn assign_replicas(holdings: &Holdings, assignments: &Assignments) -> bool {
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
            let Some(partition) = holdings
                .partitions
                .get(stream.name.as_str(), p.partition.get())
            else {
                continue;
            };
            let Some(replication) = &holdings.replication else {
                tracing::error!(stream = %stream.name, "a replicated stream, and this broker has no peer port (--peer-listen)");
                complete = false;
                continue;
            };
            replication
                .start(&partition)
                .assign(crate::partition::replica::Assignment {
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

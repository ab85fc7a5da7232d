//! Heartbeats: the lease renewed, with a report of every partition this broker leads and
//! of the history it served from the tier; a lapsed lease is answered by registering again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_wire::admin::{
    ApiErrorCode, BrokerState as LeaseState, CorruptReport, HeartbeatRequest, OffsetRange,
    PartitionReport, ReplicaLag,
};
use floe_wire::{BrokerId, PartitionId, StreamName};
use tokio::sync::watch;

use super::{RETRY_PAUSE, Session, note_failure};
use crate::metrics::Metrics;
use crate::partitions::Partitions;

/// The rate of history bytes this broker served from the tier, between heartbeats: the
/// demand the controlplane's autoscaler starts read replicas for.
struct HistoryDemand {
    bytes: u64,
    at: Instant,
}

impl HistoryDemand {
    fn new(metrics: &Metrics) -> HistoryDemand {
        HistoryDemand {
            bytes: metrics.fetch_tier_bytes.get(),
            at: Instant::now(),
        }
    }

    /// Bytes per second since the last call.
    fn per_second(&mut self, metrics: &Metrics) -> u64 {
        let now = HistoryDemand::new(metrics);
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
pub(crate) async fn heartbeat(
    managed: Arc<Session>,
    partitions: Arc<Partitions>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut registered = false;
    let mut interval = RETRY_PAUSE;
    let mut lease = Duration::MAX;
    let mut failing = false;
    let mut history = HistoryDemand::new(&metrics);
    loop {
        // The lease is counted from when each call was sent: the controlplane counts it from
        // when the call arrived, later.
        if !registered {
            let sent = Instant::now();
            match managed
                .controlplane
                .register_broker(&managed.registration)
                .await
            {
                Ok(answer) => {
                    registered = true;
                    interval = Duration::from_millis(answer.heartbeat_interval_ms.max(100));
                    lease = Duration::from_millis(answer.lease_ms);
                    managed.lease.registered(sent, lease);
                    tracing::info!(broker_id = answer.broker_id.get(), "lease taken");
                    // Heartbeat at once: its answer names the assignments to know before
                    // writing again.
                    continue;
                }
                Err(e) => note_failure(&mut failing, "registering", &e),
            }
        } else {
            let request = HeartbeatRequest {
                partitions: reports(&partitions, &managed, lease),
                history_read_bytes_per_second: history.per_second(&metrics),
                corrupt: corrupt_reports(&partitions, &managed),
            };
            let sent = Instant::now();
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
                        managed.lease.lost();
                        registered = false;
                        continue;
                    }
                    managed
                        .lease
                        .renewed(sent, lease, answer.assignment_version);
                }
                Err(e)
                    if matches!(
                        e.code(),
                        Some(ApiErrorCode::LeaseExpired | ApiErrorCode::BrokerNotFound)
                    ) =>
                {
                    tracing::warn!(error = %e, "lease lost; registering again");
                    managed.lease.lost();
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

/// The partitions this broker holds in the `corrupt` state, with the epoch of those its
/// assignment says it leads.
fn corrupt_reports(partitions: &Partitions, managed: &Session) -> Vec<CorruptReport> {
    partitions
        .corrupt_partitions()
        .into_iter()
        .filter_map(|c| {
            let mut reason = c.reason.clone();
            if reason.len() > 4096 {
                let mut cut = 4096;
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                reason.truncate(cut);
            }
            Some(CorruptReport {
                stream: StreamName::new(c.stream.clone()).ok()?,
                partition: PartitionId::new(c.partition),
                epoch: managed.epoch(&c.stream, c.partition),
                segment: c
                    .file
                    .file_name()
                    .map(|name| name.to_string_lossy().chars().take(255).collect())
                    .unwrap_or_default(),
                position: c.position,
                damaged_start: c.offsets_start,
                damaged_end: c.offsets_end,
                reason,
            })
        })
        .collect()
}

/// What this broker knows of the partitions it leads.
fn reports(partitions: &Partitions, managed: &Session, lease: Duration) -> Vec<PartitionReport> {
    let mut reports = Vec::new();
    for p in partitions.all() {
        let Some(epoch) = managed.epoch(p.stream(), p.id()) else {
            continue;
        };
        let Ok(stream) = StreamName::new(p.stream().to_string()) else {
            continue;
        };
        let tier = p.uploader().tier_start().map(|start| OffsetRange {
            start: start.get(),
            end: p.uploader().tier_end().get().max(start.get()),
        });
        let log_end = p.log().log_end().get();
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
            partition: PartitionId::new(p.id()),
            epoch,
            hot: Some(OffsetRange {
                start: p.log().log_start().get(),
                end: p.log().synced_end().get(),
            }),
            tier,
            bytes: p.log().size_bytes(),
            upload_backlog_bytes: p.upload_backlog().bytes,
            high_watermark: p.committed_end().map(|end| end.get()),
            replica_lag,
            new_set_caught_up,
            quorum_lost,
        });
    }
    reports
}

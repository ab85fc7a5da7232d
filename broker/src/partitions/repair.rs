//! An operator's repair of a partition in the `corrupt` state: the damaged log is cut at its
//! first damaged batch, losing that batch and everything after it, and the partition serves
//! again. Asked without an acknowledgement, the repair only says what it would discard; it
//! cuts only when the operator names exactly the first offset it discards, so nothing goes
//! that they did not see named. Records that object storage still holds are not lost: when
//! the tiered history reaches past the damage, the local log is dropped whole and starts
//! again where that history ends.
//!
//! A partition with replicas is not repaired here: cutting one replica's log could lose
//! records that a majority acknowledged, should that replica then be counted in an
//! election. Its broker reports it corrupt, and the controlplane replaces that replica by a
//! copy made from the others (electing another leader first if it led).

use std::sync::Arc;

use floe_hot_log::{FsStorage, Log, LogError, Repair};
use floe_wire::Offset;

use super::{Partitions, StreamError, refresh_manifest};
use crate::partition::corrupt::CorruptPartition;

/// Why a repair was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("stream {stream} partition {partition} is not corrupt: there is nothing to repair")]
    NotCorrupt { stream: String, partition: u32 },
    #[error(
        "stream {stream} partition {partition} has replicas: cutting one replica's log could \
         lose records a majority acknowledged, so it is not repaired here; the controlplane \
         replaces this replica by a copy made from the others, once a broker outside the \
         replica set is live to take it"
    )]
    Replicated { stream: String, partition: u32 },
    #[error(
        "the repair of stream {stream} partition {partition} discards from offset \
         {planned}, not {acknowledged}: ask again without an acknowledgement to see what it \
         discards"
    )]
    NotAcknowledged {
        stream: String,
        partition: u32,
        planned: Offset,
        acknowledged: Offset,
    },
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("repairing stream {stream} partition {partition}")]
    Log {
        stream: String,
        partition: u32,
        #[source]
        source: LogError,
    },
    #[error("a repair's task failed")]
    Task(#[source] tokio::task::JoinError),
}

/// What a repair found and did.
#[derive(Debug, Clone)]
pub(crate) struct RepairOutcome {
    pub corrupt: CorruptPartition,
    pub plan: Repair,
    /// The plan was carried out and the partition serves again.
    pub repaired: bool,
}

impl Partitions {
    /// Plans the repair of `stream`'s corrupt partition `id`, and carries it out when
    /// `acknowledged` is the first offset it discards.
    pub(crate) async fn repair(
        &self,
        stream: &str,
        id: u32,
        acknowledged: Option<Offset>,
    ) -> Result<RepairOutcome, RepairError> {
        let _one_at_a_time = self.repairing.lock().await;
        let not_corrupt = || RepairError::NotCorrupt {
            stream: stream.to_string(),
            partition: id,
        };
        let corrupt = self.corrupt(stream, id).ok_or_else(not_corrupt)?;
        let entry = self
            .streams()
            .into_iter()
            .find(|(name, _)| name == stream)
            .map(|(_, entry)| entry)
            .ok_or_else(not_corrupt)?;
        if entry.replication_factor.is_some_and(|factor| factor > 1) {
            return Err(RepairError::Replicated {
                stream: stream.to_string(),
                partition: id,
            });
        }
        let (uploader, tier_path) = self.uploader_for(stream, id)?;
        refresh_manifest(&uploader, stream, id).await?;
        let dir = self.stream_dir(stream).join(id.to_string());
        let config = self.log_config(&entry);
        let log_error = |source| RepairError::Log {
            stream: stream.to_string(),
            partition: id,
            source,
        };
        let plan = {
            let (dir, config, file) = (dir.clone(), config.clone(), corrupt.file.clone());
            let (position, tier_end) = (corrupt.position, uploader.tier_end());
            tokio::task::spawn_blocking(move || {
                Log::plan_repair(&FsStorage, &dir, &config, &file, position, tier_end)
            })
            .await
            .map_err(RepairError::Task)?
            .map_err(log_error)?
        };
        match acknowledged {
            None => {
                return Ok(RepairOutcome {
                    corrupt,
                    plan,
                    repaired: false,
                });
            }
            Some(acknowledged) if acknowledged != plan.discard_from => {
                return Err(RepairError::NotAcknowledged {
                    stream: stream.to_string(),
                    partition: id,
                    planned: plan.discard_from,
                    acknowledged,
                });
            }
            Some(_) => {}
        }
        tracing::warn!(
            stream, partition = id, file = %corrupt.file.display(), position = corrupt.position,
            discard_from = %plan.discard_from, discarded_bytes = plan.discarded_bytes,
            discarded_segments = plan.discarded_segments, restart = plan.restart,
            "repairing a corrupt partition as an operator acknowledged: records from \
             discard_from on are discarded"
        );
        let log = {
            let (dir, plan) = (dir.clone(), plan.clone());
            tokio::task::spawn_blocking(move || {
                Log::apply_repair(Arc::new(FsStorage), &dir, config, &plan)
            })
            .await
            .map_err(RepairError::Task)?
            .map_err(log_error)?
        };
        CorruptPartition::remove_marker(&dir).map_err(|source| StreamError::Io {
            op: "remove the corrupt marker in",
            path: dir.clone(),
            source,
        })?;
        // Served before it leaves the corrupt ones, so that no request in between finds it
        // in neither.
        self.install(stream, id, &entry, log, uploader, tier_path);
        {
            let mut held = self.corrupt.write().unwrap_or_else(|e| e.into_inner());
            held.remove(&(stream.to_string(), id));
        }
        // Written again only in the epoch its assignment gives (a managed broker).
        self.take(stream, id).await?;
        tracing::info!(stream, partition = id, log_end = %plan.discard_from, "repaired partition serves again");
        Ok(RepairOutcome {
            corrupt,
            plan,
            repaired: true,
        })
    }
}

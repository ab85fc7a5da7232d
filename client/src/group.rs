//! A consumer joined to a consumer group: the controlplane assigns it partitions of the
//! group's streams, it reads them from the committed offsets, and commits what it handed
//! out. See `docs/client.md`, "Consumer groups", for the protocol and its failure cases.
//!
//! ```no_run
//! # async fn demo(client: floe_client::Client) -> Result<(), floe_client::Error> {
//! use floe_client::{GroupConfig, GroupConsumer, StreamName};
//! let stream = StreamName::new("orders").expect("a valid name");
//! let mut group = GroupConsumer::join(client, GroupConfig::new("billing", [stream])).await?;
//! loop {
//!     let record = group.next().await?;
//!     // ... process record.record ...
//!     group.commit().await?; // at-least-once: commit after processing
//! }
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use floe_wire::admin::{
    ApiErrorCode, CommitOffsetsRequest, GroupPartition, JoinGroupRequest, MemberGeneration,
    MemberHeartbeat, Membership, OffsetCommit,
};
use floe_wire::frame::FetchPosition;
use floe_wire::{Offset, StreamName};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::rest::{Controlplane, RestError};
use crate::{Client, ConfigError, ConsumedRecord, Consumer, ConsumerConfig, Error};

/// Records in flight between the partitions' readers and [`GroupConsumer::next`].
const RECORDS_PENDING: usize = 1024;
/// The wait before retrying a controlplane that could not be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// How a [`GroupConsumer`] joins and reads.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub group: String,
    pub streams: Vec<StreamName>,
    /// Where a partition the group never committed in starts (default: earliest).
    pub start: FetchPosition,
    /// The member is removed this long after its last heartbeat (default 10 s); it
    /// heartbeats three times per timeout.
    pub session_timeout: Duration,
    /// Commit what was handed out and processed this often, and before giving a partition
    /// up; `None` (the default): only [`GroupConsumer::commit`] commits.
    pub auto_commit: Option<Duration>,
    /// A label shown by `floe group describe`.
    pub client_id: Option<String>,
    /// How each partition is read.
    pub consumer: ConsumerConfig,
}

impl GroupConfig {
    /// Joins `group` reading `streams`, with the defaults.
    pub fn new(group: impl Into<String>, streams: impl IntoIterator<Item = StreamName>) -> Self {
        GroupConfig {
            group: group.into(),
            streams: streams.into_iter().collect(),
            start: FetchPosition::Earliest,
            session_timeout: Duration::from_secs(10),
            auto_commit: None,
            client_id: None,
            consumer: ConsumerConfig::default(),
        }
    }
}

/// A record and the stream it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub stream: StreamName,
    pub record: ConsumedRecord,
}

/// What a reader sends: a record, or why it stopped. `turn` tells a partition read now from
/// an earlier reading of it whose records may still be in the channel.
enum Delivery {
    Record {
        slot: GroupPartition,
        turn: u64,
        record: ConsumedRecord,
    },
    Failed {
        slot: GroupPartition,
        turn: u64,
        error: Error,
    },
}

struct Reader {
    turn: u64,
    task: JoinHandle<()>,
}

/// What the member knows, shared by the heartbeat task and the caller's side.
struct State {
    member_id: String,
    generation: u64,
    readers: BTreeMap<GroupPartition, Reader>,
    /// Per partition read now: the offset after the last record handed out.
    delivered: BTreeMap<GroupPartition, u64>,
    /// The record handed out last, not yet processed (the caller has not asked for the
    /// next one): auto-commits stop before it.
    in_hand: Option<(GroupPartition, u64)>,
    /// What this member last committed, per partition.
    committed: BTreeMap<GroupPartition, u64>,
    next_turn: u64,
    /// Why the member stopped for good.
    failed: Option<Error>,
}

struct Shared {
    client: Client,
    rest: Controlplane,
    config: GroupConfig,
    state: Mutex<State>,
    records: mpsc::Sender<Delivery>,
    assignment: watch::Sender<Vec<GroupPartition>>,
    /// Wakes the heartbeat task to report at once what this member gave up.
    nudge: tokio::sync::Notify,
}

/// A member of a consumer group. Dropping it leaves the group (in the background);
/// [`GroupConsumer::close`] commits first when auto-commit is on, and waits for the leave.
pub struct GroupConsumer {
    shared: Arc<Shared>,
    records: mpsc::Receiver<Delivery>,
    heartbeats: JoinHandle<()>,
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumer")
            .field("group", &self.shared.config.group)
            .field("member_id", &self.member_id())
            .finish_non_exhaustive()
    }
}

impl GroupConsumer {
    /// Joins the group and starts reading what it is assigned. The client must know the
    /// controlplane ([`ClientConfig::controlplane`](crate::ClientConfig::controlplane)).
    pub async fn join(client: Client, config: GroupConfig) -> Result<GroupConsumer, Error> {
        let rest = client.controlplane().cloned().ok_or_else(|| {
            Error::Config(ConfigError::Invalid {
                field: "controlplane",
                reason: "a consumer group needs the controlplane's URL".into(),
            })
        })?;
        let membership = rest
            .join_group(&config.group, &join_request(&config))
            .await?;
        let (records, incoming) = mpsc::channel(RECORDS_PENDING);
        let shared = Arc::new(Shared {
            client,
            rest,
            config,
            state: Mutex::new(State {
                member_id: membership.member_id.clone(),
                generation: membership.generation,
                readers: BTreeMap::new(),
                delivered: BTreeMap::new(),
                in_hand: None,
                committed: BTreeMap::new(),
                next_turn: 0,
                failed: None,
            }),
            records,
            assignment: watch::Sender::new(Vec::new()),
            nudge: tokio::sync::Notify::new(),
        });
        apply(&shared, &membership).await?;
        let heartbeats = tokio::spawn(heartbeat_loop(shared.clone(), membership));
        Ok(GroupConsumer {
            shared,
            records: incoming,
            heartbeats,
        })
    }

    /// The next record of a partition this member reads, waiting as long as it takes.
    /// Handing it out marks the one before as processed (what auto-commit commits).
    pub async fn next(&mut self) -> Result<GroupRecord, Error> {
        self.shared.state().in_hand = None;
        loop {
            if let Some(error) = self.shared.state().failed.clone() {
                return Err(error);
            }
            let delivery = tokio::select! {
                delivery = self.records.recv() => delivery,
                // Wakes up to look at `failed` now and then.
                () = tokio::time::sleep(Duration::from_millis(500)) => continue,
            };
            let Some(delivery) = delivery else {
                return Err(Error::Closed);
            };
            let mut state = self.shared.state();
            match delivery {
                Delivery::Record { slot, turn, record } => {
                    if state.readers.get(&slot).map(|r| r.turn) != Some(turn) {
                        // Read before the partition was given up: its next owner has it.
                        continue;
                    }
                    let after = record.offset.get() + 1;
                    state.delivered.insert(slot.clone(), after);
                    state.in_hand = Some((slot.clone(), record.offset.get()));
                    return Ok(GroupRecord {
                        stream: slot.stream,
                        record,
                    });
                }
                Delivery::Failed { slot, turn, error } => {
                    if state.readers.get(&slot).map(|r| r.turn) == Some(turn) {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Commits the position after every record handed out, in the partitions this member
    /// still reads. A partition that moved to another member meanwhile is not committed
    /// (its next owner reads on from the last commit).
    pub async fn commit(&mut self) -> Result<(), Error> {
        commit(&self.shared, Through::Handed).await
    }

    /// The partitions this member reads now; changes with every rebalance.
    pub fn assignment(&self) -> watch::Receiver<Vec<GroupPartition>> {
        self.shared.assignment.subscribe()
    }

    /// This member's id in the group.
    pub fn member_id(&self) -> String {
        self.shared.state().member_id.clone()
    }

    /// The group's generation this member last heard.
    pub fn generation(&self) -> u64 {
        self.shared.state().generation
    }

    /// Leaves the group: commits what was processed first when auto-commit is on. Its
    /// partitions go to the other members at once.
    pub async fn close(self) -> Result<(), Error> {
        self.heartbeats.abort();
        if self.shared.config.auto_commit.is_some() {
            commit(&self.shared, Through::Handed).await?;
        }
        leave(&self.shared).await
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        self.heartbeats.abort();
        let shared = self.shared.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = leave(&shared).await;
            });
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it leaves at worst a stale position: still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn member(&self) -> (String, u64) {
        let state = self.state();
        (state.member_id.clone(), state.generation)
    }

    fn owned(&self) -> Vec<GroupPartition> {
        self.state().readers.keys().cloned().collect()
    }
}

fn join_request(config: &GroupConfig) -> JoinGroupRequest {
    JoinGroupRequest {
        streams: config.streams.clone(),
        session_timeout_ms: Some(
            u64::try_from(config.session_timeout.as_millis()).unwrap_or(u64::MAX),
        ),
        client_id: config.client_id.clone(),
    }
}

/// How far a commit goes in each partition.
#[derive(Clone, Copy)]
enum Through {
    /// Every record handed out.
    Handed,
    /// Every record processed: all handed out but the one in the caller's hands.
    Processed,
}

/// Commits this member's positions in `only` (all partitions it reads when `None`).
async fn commit_some(
    shared: &Shared,
    through: Through,
    only: Option<&BTreeSet<GroupPartition>>,
) -> Result<(), Error> {
    for _ in 0..3 {
        let (member, offsets) = {
            let state = shared.state();
            let offsets: Vec<OffsetCommit> = state
                .delivered
                .iter()
                .filter(|(slot, _)| state.readers.contains_key(*slot))
                .filter(|(slot, _)| only.is_none_or(|only| only.contains(*slot)))
                .map(|(slot, &after)| {
                    let position = match (&state.in_hand, through) {
                        (Some((held, offset)), Through::Processed) if held == slot => *offset,
                        _ => after,
                    };
                    (slot, position)
                })
                .filter(|(slot, position)| state.committed.get(*slot) != Some(position))
                .map(|(slot, offset)| OffsetCommit {
                    stream: slot.stream.clone(),
                    partition: slot.partition,
                    offset,
                })
                .collect();
            let member = MemberGeneration {
                member_id: state.member_id.clone(),
                generation: state.generation,
            };
            (member, offsets)
        };
        if offsets.is_empty() {
            return Ok(());
        }
        let request = CommitOffsetsRequest {
            offsets: offsets.clone(),
            member: Some(member),
        };
        match shared
            .rest
            .commit_offsets(&shared.config.group, &request)
            .await
        {
            Ok(_) => {
                let mut state = shared.state();
                for offset in offsets {
                    state.committed.insert(offset.slot(), offset.offset);
                }
                return Ok(());
            }
            // The assignment changed: learn how, then commit what is still ours.
            Err(error)
                if matches!(
                    error.code(),
                    Some(ApiErrorCode::StaleGeneration | ApiErrorCode::PartitionNotAssigned)
                ) =>
            {
                let (member_id, _) = shared.member();
                let heartbeat = MemberHeartbeat {
                    owned: shared.owned(),
                    wait_ms: 0,
                };
                let membership = shared
                    .rest
                    .group_heartbeat(&shared.config.group, &member_id, &heartbeat, RETRY_PAUSE)
                    .await?;
                let gave_up = Box::pin(apply(shared, &membership)).await?;
                if gave_up {
                    shared.nudge.notify_one();
                }
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(Error::Controlplane(Arc::new(RestError::Invalid {
        url: shared.rest.url().to_owned(),
        detail: "the group's assignment kept changing under the commit".into(),
    })))
}

async fn commit(shared: &Shared, through: Through) -> Result<(), Error> {
    commit_some(shared, through, None).await
}

async fn leave(shared: &Shared) -> Result<(), Error> {
    let member_id = {
        let mut state = shared.state();
        for (_, reader) in std::mem::take(&mut state.readers) {
            reader.task.abort();
        }
        state.member_id.clone()
    };
    shared.assignment.send_replace(Vec::new());
    shared
        .rest
        .leave_group(&shared.config.group, &member_id)
        .await
        .map_err(Error::from)
}

/// Acts on a membership: gives up what is no longer this member's (committing first with
/// auto-commit), starts reading what is new. Returns whether anything was given up, so that
/// the controlplane hears of it at once.
async fn apply(shared: &Shared, membership: &Membership) -> Result<bool, Error> {
    let assigned: BTreeSet<GroupPartition> = membership.assignment.iter().cloned().collect();
    let revoked: BTreeSet<GroupPartition> = {
        let mut state = shared.state();
        state.generation = state.generation.max(membership.generation);
        state
            .readers
            .keys()
            .filter(|slot| !assigned.contains(*slot))
            .cloned()
            .collect()
    };
    if !revoked.is_empty() {
        if shared.config.auto_commit.is_some() {
            // Still ours until the next heartbeat leaves them out.
            commit_some(shared, Through::Processed, Some(&revoked)).await?;
        }
        let mut state = shared.state();
        for slot in &revoked {
            if let Some(reader) = state.readers.remove(slot) {
                reader.task.abort();
            }
            state.delivered.remove(slot);
            state.committed.remove(slot);
        }
    }
    let added: Vec<GroupPartition> = {
        let state = shared.state();
        assigned
            .iter()
            .filter(|slot| !state.readers.contains_key(*slot))
            .cloned()
            .collect()
    };
    if !added.is_empty() {
        let committed = committed_offsets(shared).await?;
        let mut state = shared.state();
        for slot in added {
            if state.readers.contains_key(&slot) {
                // Another call of this member started it meanwhile.
                continue;
            }
            let start = committed.get(&slot).map_or(shared.config.start, |&offset| {
                FetchPosition::Offset(Offset::new(offset))
            });
            if let Some(&offset) = committed.get(&slot) {
                state.committed.insert(slot.clone(), offset);
            }
            state.next_turn += 1;
            let turn = state.next_turn;
            let consumer = Consumer::new(
                shared.client.clone(),
                slot.stream.clone(),
                slot.partition,
                start,
                shared.config.consumer.clone(),
            );
            let task = tokio::spawn(read(consumer, slot.clone(), turn, shared.records.clone()));
            state.readers.insert(slot, Reader { turn, task });
        }
    }
    shared.assignment.send_if_modified(|current| {
        let now: Vec<GroupPartition> = assigned.iter().cloned().collect();
        let changed = *current != now;
        *current = now;
        changed
    });
    Ok(!revoked.is_empty())
}

/// The group's committed offsets (none before its first commit).
async fn committed_offsets(shared: &Shared) -> Result<BTreeMap<GroupPartition, u64>, Error> {
    match shared.rest.group_offsets(&shared.config.group).await {
        Ok(offsets) => Ok(offsets
            .offsets
            .into_iter()
            .map(|o| (o.slot(), o.offset))
            .collect()),
        Err(error) if error.code() == Some(ApiErrorCode::GroupNotFound) => Ok(BTreeMap::new()),
        Err(error) => Err(error.into()),
    }
}

/// Reads one partition into the channel until told to stop (aborted) or the reading fails.
async fn read(
    mut consumer: Consumer,
    slot: GroupPartition,
    turn: u64,
    records: mpsc::Sender<Delivery>,
) {
    loop {
        let delivery = match consumer.next().await {
            Ok(record) => Delivery::Record {
                slot: slot.clone(),
                turn,
                record,
            },
            Err(error) => Delivery::Failed {
                slot: slot.clone(),
                turn,
                error,
            },
        };
        let failed = matches!(delivery, Delivery::Failed { .. });
        if records.send(delivery).await.is_err() || failed {
            return;
        }
    }
}

/// Heartbeats until the member is dropped: applies every change of assignment, joins again
/// when the controlplane no longer knows this member, and auto-commits on schedule.
async fn heartbeat_loop(shared: Arc<Shared>, mut membership: Membership) {
    let mut last_commit = Instant::now();
    let mut last_heard = Instant::now();
    let mut hurry = false;
    loop {
        let interval = Duration::from_millis(membership.heartbeat_interval_ms);
        let mut wait = if hurry { Duration::ZERO } else { interval };
        if let Some(every) = shared.config.auto_commit {
            let due = every.saturating_sub(last_commit.elapsed());
            wait = wait.min(due);
            if due.is_zero() {
                if let Err(error) = commit(&shared, Through::Processed).await {
                    tracing::warn!(group = %shared.config.group, %error, "auto-commit failed");
                }
                last_commit = Instant::now();
                continue;
            }
        }
        let (member_id, _) = shared.member();
        let heartbeat = MemberHeartbeat {
            owned: shared.owned(),
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        // Past its wait, an answer may take one heartbeat interval: a member cut off from
        // the controlplane learns it within its session, not a whole HTTP timeout later.
        let call =
            shared
                .rest
                .group_heartbeat(&shared.config.group, &member_id, &heartbeat, interval);
        let answer = tokio::select! {
            answer = call => answer.map_err(Error::from),
            // Something was given up meanwhile: report it now, not at the end of the wait.
            () = shared.nudge.notified() => {
                hurry = true;
                continue;
            }
        };
        let answer = match answer {
            Ok(next) => {
                last_heard = Instant::now();
                membership = next;
                apply(&shared, &membership).await
            }
            Err(error) => Err(error),
        };
        match answer {
            Ok(gave_up) => hurry = gave_up,
            Err(error) if is_code(&error, ApiErrorCode::UnknownMember) => {
                tracing::info!(group = %shared.config.group, "this member is no longer in the group; joining again");
                match rejoin(&shared).await {
                    Ok(next) => {
                        last_heard = Instant::now();
                        membership = next;
                    }
                    Err(error) if is_fatal(&error) => return fail(&shared, error),
                    Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
                }
            }
            Err(error) if is_fatal(&error) => return fail(&shared, error),
            Err(error) => {
                // The controlplane removes this member a session after its last heartbeat;
                // stop reading a heartbeat interval before that, so that the member it
                // hands the partitions to is the only one reading them.
                let session = Duration::from_millis(membership.session_timeout_ms);
                let silent = last_heard.elapsed();
                if silent > session.saturating_sub(interval) && !shared.owned().is_empty() {
                    tracing::warn!(group = %shared.config.group, %error, ?silent, "no heartbeat answered for most of a session; stopped reading until one is");
                    drop_readers(&shared);
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// Whether `error` is the controlplane's `code`.
fn is_code(error: &Error, code: ApiErrorCode) -> bool {
    matches!(error, Error::Controlplane(rest) if rest.code() == Some(code))
}

/// Whether trying again cannot help: the member is refused for what it is or asks. Anything
/// else — the controlplane unreachable, failing over, a proxy's error page — is retried.
fn is_fatal(error: &Error) -> bool {
    match error {
        Error::Controlplane(rest) => matches!(
            rest.code(),
            Some(
                ApiErrorCode::Unauthorized
                    | ApiErrorCode::Forbidden
                    | ApiErrorCode::StreamNotFound
                    | ApiErrorCode::InvalidArgument
                    | ApiErrorCode::BadRequest
            )
        ),
        Error::Config(_) => true,
        _ => false,
    }
}

fn drop_readers(shared: &Shared) {
    let mut state = shared.state();
    for (_, reader) in std::mem::take(&mut state.readers) {
        reader.task.abort();
    }
    state.delivered.clear();
    state.committed.clear();
    state.in_hand = None;
    drop(state);
    shared.assignment.send_replace(Vec::new());
}

/// Joins as a new member after the old one was removed: what it read may be another's now,
/// so it starts over from the committed offsets.
async fn rejoin(shared: &Shared) -> Result<Membership, Error> {
    drop_readers(shared);
    let membership = shared
        .rest
        .join_group(&shared.config.group, &join_request(&shared.config))
        .await?;
    {
        let mut state = shared.state();
        state.member_id = membership.member_id.clone();
        state.generation = membership.generation;
    }
    apply(shared, &membership).await?;
    Ok(membership)
}

fn fail(shared: &Shared, error: Error) {
    tracing::warn!(group = %shared.config.group, %error, "the group member stopped");
    shared.state().failed = Some(error);
}

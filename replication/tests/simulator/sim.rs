//! A seeded, deterministic simulation of one partition's replicas, their disks, the network
//! between them, the controlplane's elections and a producer. Every step is one random event;
//! after every step the invariants are checked. A failure panics with the seed.

pub mod rng;

use std::collections::{BTreeMap, BTreeSet};

use floe_replication::{Batch, Config, LogView, Message, Output, ReadLog, Replica, ReplicaId};
use floe_wire::LeaderEpoch;

use rng::Rng;

/// A batch in the simulation: its offsets, epoch and the producer's id for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimBatch {
    pub base: u64,
    pub count: u64,
    pub epoch: LeaderEpoch,
    pub id: u64,
}

impl Batch for SimBatch {
    fn base(&self) -> u64 {
        self.base
    }
    fn end(&self) -> u64 {
        self.base + self.count
    }
    fn epoch(&self) -> LeaderEpoch {
        self.epoch
    }
    fn size(&self) -> usize {
        100 * self.count as usize
    }
}

/// A log's contents: everything below `start` is gone (tiered), then the batches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogData {
    pub start: u64,
    /// The epoch of the batch just below `start`, as the broker's log keeps it.
    pub base_epoch: LeaderEpoch,
    pub batches: Vec<SimBatch>,
}

impl LogData {
    fn end(&self) -> u64 {
        self.batches.last().map_or(self.start, Batch::end)
    }

    fn apply(&mut self, op: &DiskOp) {
        match op {
            DiskOp::Write(batches) => {
                for b in batches {
                    assert_eq!(b.base, self.end(), "write not at the log end");
                    self.batches.push(b.clone());
                }
            }
            DiskOp::Truncate(to) => self.batches.retain(|b| b.end() <= *to),
        }
    }

    /// A random batch end in `(above, upto]`, if there is one.
    fn boundary_in(&self, above: u64, upto: u64, rng: &mut Rng) -> Option<u64> {
        let ends: Vec<u64> = self
            .batches
            .iter()
            .map(Batch::end)
            .filter(|&end| end > above && end <= upto)
            .collect();
        (!ends.is_empty()).then(|| ends[rng.below(ends.len() as u64) as usize])
    }

    /// Drops the batches below `start`, a batch boundary (local retention after tiering).
    fn advance_start(&mut self, start: u64) {
        if let Some(below) = self.batches.iter().rfind(|b| b.end() <= start) {
            self.base_epoch = below.epoch;
        }
        self.batches.retain(|b| b.base >= start);
        self.start = self.start.max(start);
    }

    fn view(&self) -> LogView {
        let mut view = LogView::empty_after(self.start, self.base_epoch);
        for b in &self.batches {
            view.append(b.epoch, b.end());
        }
        view.synced = view.end;
        view
    }

    fn batch_at(&self, base: u64) -> Option<&SimBatch> {
        let i = self.batches.binary_search_by_key(&base, |b| b.base).ok()?;
        self.batches.get(i)
    }
}

impl ReadLog<SimBatch> for LogData {
    fn read(&self, from: u64, max_bytes: usize) -> Vec<SimBatch> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let first = self.batches.partition_point(|b| b.base < from);
        for b in &self.batches[first..] {
            if !out.is_empty() && bytes + b.size() > max_bytes {
                break;
            }
            bytes += b.size();
            out.push(b.clone());
        }
        out
    }
}

#[derive(Debug, Clone)]
enum DiskOp {
    Write(Vec<SimBatch>),
    Truncate(u64),
}

/// A disk: what the last sync made durable, and the changes since, in order. A crash keeps
/// the durable state plus any prefix of the changes.
#[derive(Debug, Clone, Default)]
struct Disk {
    durable: LogData,
    current: LogData,
    since_sync: Vec<DiskOp>,
    /// The lowest offset a truncation or reset since the last sync removed data from.
    removed_from: Option<u64>,
    promised: LeaderEpoch,
    high_watermark: u64,
}

impl Disk {
    fn apply(&mut self, op: DiskOp) {
        let removed = match op {
            DiskOp::Write(_) => None,
            DiskOp::Truncate(to) => Some(to),
        };
        if let Some(at) = removed {
            self.removed_from = Some(self.removed_from.map_or(at, |r| r.min(at)));
        }
        self.current.apply(&op);
        self.since_sync.push(op);
    }

    /// A reset is durable at once (the contract on `Output::Reset`).
    fn reset(&mut self, start: u64, base_epoch: LeaderEpoch) {
        self.current = LogData {
            start,
            base_epoch,
            batches: Vec::new(),
        };
        self.durable = self.current.clone();
        self.since_sync.clear();
        self.removed_from = None;
    }

    /// Local retention: segments below `start` are deleted, durably.
    fn advance_start(&mut self, start: u64) {
        self.durable.advance_start(start);
        self.current.advance_start(start);
    }

    /// Makes every change durable; returns the lowest offset it removed data from.
    fn sync(&mut self) -> Option<u64> {
        self.durable = self.current.clone();
        self.since_sync.clear();
        self.removed_from.take()
    }

    fn crash(&mut self, rng: &mut Rng) -> Option<u64> {
        let kept = rng.below(self.since_sync.len() as u64 + 1) as usize;
        let mut image = self.durable.clone();
        for op in &self.since_sync[..kept] {
            image.apply(op);
        }
        // Recovery syncs what it found.
        self.durable = image.clone();
        self.current = image;
        self.since_sync.clear();
        self.removed_from.take()
    }
}

struct Node {
    replica: Replica,
    disk: Disk,
    up: bool,
    /// The high watermark this incarnation exposed.
    exposed: u64,
    /// Below this offset the log was checked against the committed prefix.
    checked_to: u64,
    /// The newest assignment this node's broker applied: older ones arriving late are
    /// ignored, as a broker ignores assignments older than the version it holds.
    assignment: u64,
}

#[derive(Debug, Clone)]
enum Envelope {
    Peer {
        from: ReplicaId,
        to: ReplicaId,
        message: Message<SimBatch>,
    },
    Prepare {
        to: ReplicaId,
        epoch: LeaderEpoch,
    },
    Report {
        from: ReplicaId,
        epoch: LeaderEpoch,
        last_epoch: LeaderEpoch,
        end: u64,
    },
    Lead {
        to: ReplicaId,
        epoch: LeaderEpoch,
        replicas: Vec<ReplicaId>,
        previous: Vec<ReplicaId>,
        version: u64,
    },
    Follow {
        to: ReplicaId,
        epoch: LeaderEpoch,
        leader: ReplicaId,
        version: u64,
    },
    /// Leader → controlplane (its heartbeat): a majority of `replicas` holds every
    /// committed record.
    NewSetReady {
        epoch: LeaderEpoch,
        replicas: Vec<ReplicaId>,
    },
}

impl Envelope {
    fn link(&self) -> Option<(ReplicaId, ReplicaId)> {
        match self {
            Envelope::Peer { from, to, .. } => Some((*from, *to)),
            _ => None,
        }
    }
}

/// Election reports: replica → (epoch of its last durable entry, durable end).
type Reports = BTreeMap<ReplicaId, (LeaderEpoch, u64)>;

/// The controlplane's view of the partition.
#[derive(Debug, Default)]
struct Controlplane {
    epoch: LeaderEpoch,
    leader: Option<ReplicaId>,
    /// The election in progress: its epoch and the reports gathered.
    election: Option<(LeaderEpoch, Reports)>,
    /// The replica set, sorted.
    replicas: Vec<ReplicaId>,
    /// The set being left while the set changes (sorted), empty otherwise.
    previous: Vec<ReplicaId>,
    /// Bumped on every change of leader, epoch or sets.
    version: u64,
}

impl Controlplane {
    /// The epoch of the next election; a simulation never runs out of epochs.
    fn next_epoch(&self) -> LeaderEpoch {
        self.epoch.next().expect("fewer than 2^32 elections")
    }

    /// Members of either set.
    fn members(&self) -> Vec<ReplicaId> {
        let mut all: Vec<ReplicaId> = self
            .replicas
            .iter()
            .chain(&self.previous)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    fn is_member(&self, id: ReplicaId) -> bool {
        self.replicas.contains(&id) || self.previous.contains(&id)
    }

    /// Whether `reporters` include a majority of every set.
    fn quorum(&self, reporters: &BTreeSet<ReplicaId>) -> bool {
        let majority_of = |set: &[ReplicaId]| {
            set.is_empty() || set.iter().filter(|id| reporters.contains(id)).count() > set.len() / 2
        };
        majority_of(&self.replicas) && majority_of(&self.previous)
    }

    /// The set every acknowledged record must be durable on a majority of: the one being
    /// left while the set changes (the new one does not hold everything yet).
    fn durable_set(&self) -> &[ReplicaId] {
        if self.previous.is_empty() {
            &self.replicas
        } else {
            &self.previous
        }
    }
}

/// Probabilities, in thousandths, of the disruptive events.
#[derive(Debug, Clone)]
pub struct Faults {
    pub loss: u64,
    pub duplicate: u64,
    pub crash: u64,
    pub partition: u64,
    pub election: u64,
    /// Replacing one member with a spare node.
    pub change: u64,
}

impl Faults {
    pub fn random(rng: &mut Rng) -> Faults {
        Faults {
            loss: rng.below(150),
            duplicate: rng.below(100),
            crash: rng.below(15),
            partition: rng.below(15),
            election: rng.below(8),
            change: rng.below(8),
        }
    }
}

pub struct Sim {
    seed: u64,
    rng: Rng,
    faults: Faults,
    nodes: Vec<Node>,
    /// Messages in flight, each with the time it arrives.
    network: Vec<(u64, Envelope)>,
    cut: BTreeSet<(ReplicaId, ReplicaId)>,
    controlplane: Controlplane,
    now_ms: u64,
    next_id: u64,
    /// Producer batches awaiting their ack: base → (id, end, leader, epoch).
    pending: BTreeMap<u64, (u64, u64, ReplicaId, LeaderEpoch)>,
    /// Acknowledged to the producer: base → id.
    pub acked: BTreeMap<u64, SimBatch>,
    /// Seen below some replica's high watermark: base → id.
    committed: BTreeMap<u64, u64>,
    /// Epochs each replica led, to check one leader per epoch.
    leaders: BTreeMap<LeaderEpoch, ReplicaId>,
    /// Every batch ever written, by (epoch, base offset): one epoch has one log.
    written: BTreeMap<(LeaderEpoch, u64), u64>,
    /// Below this offset the partition is in object storage (tiered by the leader from its
    /// committed log); replicas may drop their logs below it.
    tiered: u64,
    /// Resets carried out, and prefixes dropped by retention: coverage of the log-start path.
    pub resets: u64,
    pub retained: u64,
    /// Epoch-start markers written by new leaders.
    pub markers: u64,
    /// Replica-set changes started and completed.
    pub changes: u64,
    pub changes_done: u64,
    config: Config,
    pub steps: u64,
    /// The producer sends (off while settling, so the replicas can catch up).
    producing: bool,
    /// `FLOE_SIM_TRACE` set: print every event.
    trace: bool,
}

impl Sim {
    /// `replicas` members and `spares` more nodes that changes of the replica set may bring in.
    pub fn new(seed: u64, replicas: u32, spares: u32) -> Sim {
        let mut rng = Rng::new(seed);
        let faults = Faults::random(&mut rng);
        let config = Config {
            window: 1 + rng.below(8) as u32,
            max_message_bytes: 100 * (1 + rng.below(6) as usize),
            retry_ms: 200,
            heartbeat_ms: 50,
        };
        let nodes = (0..replicas + spares)
            .map(|id| Node {
                replica: Replica::recover(
                    id,
                    config.clone(),
                    LeaderEpoch::ZERO,
                    LogView::empty(0),
                    0,
                    0,
                ),
                disk: Disk::default(),
                up: id < replicas,
                exposed: 0,
                checked_to: 0,
                assignment: 0,
            })
            .collect();
        let controlplane = Controlplane {
            replicas: (0..replicas).collect(),
            ..Controlplane::default()
        };
        Sim {
            seed,
            rng,
            faults,
            nodes,
            network: Vec::new(),
            cut: BTreeSet::new(),
            controlplane,
            now_ms: 0,
            next_id: 1,
            pending: BTreeMap::new(),
            acked: BTreeMap::new(),
            committed: BTreeMap::new(),
            leaders: BTreeMap::new(),
            written: BTreeMap::new(),
            tiered: 0,
            resets: 0,
            retained: 0,
            markers: 0,
            changes: 0,
            changes_done: 0,
            config,
            steps: 0,
            producing: true,
            trace: std::env::var_os("FLOE_SIM_TRACE").is_some(),
        }
    }

    fn ids(&self) -> Vec<ReplicaId> {
        (0..self.nodes.len() as u32).collect()
    }

    /// One random event, then the invariants.
    pub fn step(&mut self, calm: bool) {
        self.steps += 1;
        let roll = self.rng.below(1000);
        let f = self.faults.clone();
        if !calm && roll < f.crash {
            let id = self.rng.below(self.nodes.len() as u64) as ReplicaId;
            self.crash(id);
        } else if !calm && roll < f.crash + f.partition {
            let a = self.rng.below(self.nodes.len() as u64) as ReplicaId;
            let b = self.rng.below(self.nodes.len() as u64) as ReplicaId;
            if a != b && !self.cut.remove(&(a, b)) {
                self.cut.insert((a, b));
            }
        } else if !calm && roll < f.crash + f.partition + f.election {
            self.start_election();
        } else if !calm && roll < f.crash + f.partition + f.election + f.change {
            self.change_replica_set();
        } else if roll < 300 {
            self.deliver_due(calm);
        } else if roll < 450 {
            if self.producing {
                self.produce();
            }
        } else if roll < 600 {
            let id = self.rng.below(self.nodes.len() as u64) as ReplicaId;
            self.sync(id);
        } else if roll < 700 {
            self.now_ms += 1 + self.rng.below(40);
            for id in self.ids() {
                self.tick(id);
            }
        } else if roll < 800 {
            self.controlplane_step();
        } else if roll < 815 {
            self.tier_and_retain();
        } else if roll < 850 {
            // Restart a crashed node.
            let down: Vec<ReplicaId> = self
                .ids()
                .into_iter()
                .filter(|&i| !self.nodes[i as usize].up)
                .collect();
            if !down.is_empty() {
                let id = down[self.rng.below(down.len() as u64) as usize];
                self.restart(id);
            }
        } else {
            self.deliver_due(calm);
        }
        self.check();
    }

    /// Heals every fault and lets the cluster settle; then every acked batch must be on
    /// every replica, and a new batch must be acked.
    pub fn settle(&mut self) {
        self.cut.clear();
        for id in self.controlplane.members() {
            if !self.nodes[id as usize].up {
                self.restart(id);
            }
        }
        let before = self.acked.len();
        for round in 0..40_000 {
            // Produce a little after healing, then stop and let everything catch up: each
            // leader commits what it inherited through its epoch-start marker, without a
            // producer. Produce on until a change of the replica set is complete.
            self.producing =
                round < 500 || self.acked.len() == before || !self.controlplane.previous.is_empty();
            self.step(true);
            if !self.producing
                && self.acked.len() > before
                && self.pending.is_empty()
                && self.controlplane.previous.is_empty()
                && self.all_caught_up()
            {
                self.check_final();
                return;
            }
        }
        for n in &self.nodes {
            eprintln!(
                "replica {}: up {} promised {} leader {:?} end {} synced {} hw {} durable end {}",
                n.replica.id(),
                n.up,
                n.replica.promised_epoch(),
                n.replica.leader(),
                n.replica.log().end,
                n.replica.log().synced,
                n.replica.high_watermark(),
                n.disk.durable.end()
            );
        }
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for (_, e) in &self.network {
            let kind = match e {
                Envelope::Peer { from, to, message } => {
                    let name = format!("{message:?}");
                    let name = name.split([' ', '{']).next().unwrap_or("").to_owned();
                    format!("{from}->{to} {name}")
                }
                other => format!("{other:?}")
                    .split(' ')
                    .next()
                    .unwrap_or("")
                    .to_owned(),
            };
            *kinds.entry(kind).or_default() += 1;
        }
        eprintln!(
            "network: {} messages {kinds:?}; faults {:?}",
            self.network.len(),
            self.faults
        );
        panic!(
            "seed {}: no progress after healing: leader {:?} epoch {}, acked {} → {}, pending {:?}",
            self.seed,
            self.controlplane.leader,
            self.controlplane.epoch,
            before,
            self.acked.len(),
            self.pending.iter().take(5).collect::<Vec<_>>()
        );
    }

    fn all_caught_up(&self) -> bool {
        let Some(leader) = self.controlplane.leader else {
            return false;
        };
        let end = self.nodes[leader as usize].disk.current.end();
        self.controlplane.members().iter().all(|&id| {
            let n = &self.nodes[id as usize];
            n.disk.current.end() == end && n.replica.high_watermark() == end
        })
    }

    fn check_final(&self) {
        let members: Vec<&Node> = self
            .controlplane
            .members()
            .iter()
            .map(|&id| &self.nodes[id as usize])
            .collect();
        let start = members
            .iter()
            .map(|n| n.disk.current.start)
            .max()
            .unwrap_or(0);
        let suffix = |log: &LogData| -> Vec<SimBatch> {
            log.batches
                .iter()
                .filter(|b| b.base >= start)
                .cloned()
                .collect()
        };
        for node in &members {
            for (base, batch) in self.acked.range(node.disk.current.start..) {
                assert_eq!(
                    node.disk.current.batch_at(*base),
                    Some(batch),
                    "seed {}: replica {} lacks acked batch at {base}",
                    self.seed,
                    node.replica.id()
                );
            }
            assert_eq!(
                suffix(&node.disk.current),
                suffix(&members[0].disk.current),
                "seed {}: logs differ",
                self.seed
            );
        }
    }

    /// Puts a message on the network: it arrives after 1–20 ms, or now and then after up to
    /// 300 ms (which reorders it behind later ones).
    fn send(&mut self, envelope: Envelope) {
        let delay = if self.rng.below(20) == 0 {
            1 + self.rng.below(300)
        } else {
            1 + self.rng.below(20)
        };
        self.network.push((self.now_ms + delay, envelope));
    }

    /// Delivers every message that has arrived by now, in random order; a duplicated one is
    /// delivered and also sent again.
    fn deliver_due(&mut self, calm: bool) {
        let now = self.now_ms;
        let (mut due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.network)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.network = later;
        // Fisher–Yates, seeded.
        for i in (1..due.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            due.swap(i, j);
        }
        for (_, envelope) in due {
            if !calm && self.rng.below(1000) < self.faults.duplicate {
                self.send(envelope.clone());
            }
            self.deliver(envelope, calm);
        }
    }

    fn deliver(&mut self, envelope: Envelope, calm: bool) {
        if !calm && self.rng.below(1000) < self.faults.loss {
            return;
        }
        if let Some(link) = envelope.link()
            && self.cut.contains(&link)
        {
            return;
        }
        if self.trace {
            eprintln!("[{}] deliver {envelope:?}", self.steps);
        }
        match envelope {
            Envelope::Peer { from, to, message } => {
                if self.nodes[to as usize].up {
                    let node = &mut self.nodes[to as usize];
                    let out = node.replica.on_message(from, message, &node.disk.current);
                    self.carry_out(to, out);
                }
            }
            Envelope::Prepare { to, epoch } => {
                if self.nodes[to as usize].up {
                    let out = self.nodes[to as usize].replica.prepare(epoch);
                    self.carry_out(to, out);
                }
            }
            Envelope::Report {
                from,
                epoch,
                last_epoch,
                end,
            } => self.on_report(from, epoch, last_epoch, end),
            Envelope::Lead {
                to,
                epoch,
                replicas,
                previous,
                version,
            } => {
                let node = &mut self.nodes[to as usize];
                if node.up && version >= node.assignment {
                    node.assignment = version;
                    let out =
                        node.replica
                            .become_leader(epoch, &replicas, &previous, &node.disk.current);
                    self.carry_out(to, out);
                }
            }
            Envelope::Follow {
                to,
                epoch,
                leader,
                version,
            } => {
                let node = &mut self.nodes[to as usize];
                if node.up && version >= node.assignment {
                    node.assignment = version;
                    let out = node.replica.become_follower(epoch, leader);
                    self.carry_out(to, out);
                }
            }
            Envelope::NewSetReady { epoch, replicas } => self.on_new_set_ready(epoch, &replicas),
        }
    }

    /// Carries out a replica's outputs in order, as a driver must.
    fn carry_out(&mut self, id: ReplicaId, outputs: Vec<Output<SimBatch>>) {
        for output in outputs {
            if self.trace {
                eprintln!("[{}]   {id} → {output:?}", self.steps);
            }
            let seed = self.seed;
            let node = &mut self.nodes[id as usize];
            match output {
                Output::PersistEpoch(epoch) => {
                    assert!(
                        epoch >= node.disk.promised,
                        "seed {seed}: promise went back"
                    );
                    node.disk.promised = epoch;
                }
                Output::Send { to, message } => self.send(Envelope::Peer {
                    from: id,
                    to,
                    message,
                }),
                Output::Write(batches) => {
                    for b in &batches {
                        let first = *self.written.entry((b.epoch, b.base)).or_insert(b.id);
                        assert_eq!(
                            first, b.id,
                            "seed {seed}: two batches at {} in epoch {}",
                            b.base, b.epoch
                        );
                    }
                    node.disk.apply(DiskOp::Write(batches));
                }
                Output::Truncate(to) => {
                    assert!(
                        to >= node.exposed,
                        "seed {seed}: replica {id} truncates to {to} below its high watermark {}",
                        node.exposed
                    );
                    for b in node.disk.current.batches.iter().filter(|b| b.end() > to) {
                        assert!(
                            self.committed.get(&b.base) != Some(&b.id),
                            "seed {seed}: replica {id} truncates committed batch {b:?}"
                        );
                        assert!(
                            self.acked.get(&b.base) != Some(b),
                            "seed {seed}: replica {id} truncates acked batch {b:?}"
                        );
                    }
                    node.checked_to = node.checked_to.min(to);
                    node.disk.apply(DiskOp::Truncate(to));
                }
                Output::Reset { start, base_epoch } => {
                    assert!(
                        start <= self.tiered,
                        "seed {seed}: replica {id} resets to {start}, above the tier's end {}",
                        self.tiered
                    );
                    node.checked_to = 0;
                    node.disk.reset(start, base_epoch);
                    self.resets += 1;
                    self.check_acked_from(0);
                }
                Output::HighWatermark(hw) => {
                    assert!(hw >= node.exposed, "seed {seed}: high watermark went back");
                    node.exposed = hw;
                    if self.rng.below(2) == 0 {
                        node.disk.high_watermark = node.replica.checkpoint_high_watermark();
                    }
                    if node.replica.leader_epoch().is_some() {
                        self.release_acks(id, hw);
                    }
                }
                Output::Report {
                    epoch,
                    last_epoch,
                    end,
                } => self.send(Envelope::Report {
                    from: id,
                    epoch,
                    last_epoch,
                    end,
                }),
                Output::MarkEpochStart { epoch } => {
                    // A batch no producer waits for, written like a producer's.
                    self.markers += 1;
                    let batch = self.lead_append(id, epoch, 1);
                    self.ship_appended(id, batch.end());
                }
                Output::Deposed { .. } => {
                    self.pending.retain(|_, (_, _, leader, _)| *leader != id);
                }
                Output::Refused { epoch } => {
                    if self.controlplane.epoch == epoch {
                        self.controlplane.leader = None;
                        self.start_election();
                    }
                }
            }
        }
    }

    fn release_acks(&mut self, leader: ReplicaId, hw: u64) {
        let done: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, (_, end, l, _))| *l == leader && *end <= hw)
            .map(|(base, _)| *base)
            .collect();
        for base in done {
            let (id, end, _, epoch) = self.pending.remove(&base).expect("pending");
            let batch = SimBatch {
                base,
                count: end - base,
                epoch,
                id,
            };
            assert_eq!(
                self.nodes[leader as usize].disk.current.batch_at(base),
                Some(&batch),
                "seed {}: leader acks a batch it does not hold",
                self.seed
            );
            self.acked.insert(base, batch);
            self.check_acked_from(base);
        }
    }

    fn produce(&mut self) {
        let Some(leader) = self.controlplane.leader else {
            return;
        };
        let node = &mut self.nodes[leader as usize];
        if !node.up {
            return;
        }
        let Some(epoch) = node.replica.leader_epoch() else {
            return;
        };
        let count = 1 + self.rng.below(3);
        let batch = self.lead_append(leader, epoch, count);
        self.pending
            .insert(batch.base, (batch.id, batch.end(), leader, epoch));
        self.ship_appended(leader, batch.end());
    }

    /// Leader `id` of `epoch` appends a new batch of `count` records (not yet shipped).
    fn lead_append(&mut self, id: ReplicaId, epoch: LeaderEpoch, count: u64) -> SimBatch {
        let node = &mut self.nodes[id as usize];
        let base = node.disk.current.end();
        let batch = SimBatch {
            base,
            count,
            epoch,
            id: self.next_id,
        };
        self.next_id += 1;
        let first = *self.written.entry((epoch, base)).or_insert(batch.id);
        assert_eq!(
            first, batch.id,
            "seed {}: two batches at {base} in epoch {epoch}",
            self.seed
        );
        node.disk.apply(DiskOp::Write(vec![batch.clone()]));
        batch
    }

    /// Tells leader `id` its log now ends at `end`, and carries out what it does about it.
    fn ship_appended(&mut self, id: ReplicaId, end: u64) {
        let node = &mut self.nodes[id as usize];
        let out = node.replica.on_appended(end, &node.disk.current);
        self.carry_out(id, out);
    }

    /// The leader tiers part of its committed log; then one replica drops its log below
    /// some batch boundary that is tiered, committed and durable on it.
    fn tier_and_retain(&mut self) {
        if let Some(leader) = self.controlplane.leader {
            let node = &self.nodes[leader as usize];
            if node.up && node.replica.leader_epoch().is_some() {
                let hw = node.replica.high_watermark();
                if let Some(end) = node
                    .disk
                    .current
                    .boundary_in(self.tiered, hw, &mut self.rng)
                {
                    self.tiered = end;
                }
            }
        }
        let id = self.rng.below(self.nodes.len() as u64) as usize;
        let node = &self.nodes[id];
        if !node.up {
            return;
        }
        let limit = self
            .tiered
            .min(node.replica.high_watermark())
            // The synced end as the replica sees it: a truncation lowers it until the next
            // sync, while the disk may still hold the old entries.
            .min(node.replica.log().synced);
        let log = &node.disk.current;
        let Some(start) = log.boundary_in(log.start, limit, &mut self.rng) else {
            return;
        };
        if self.trace {
            eprintln!("[{}] replica {id} drops its log below {start}", self.steps);
        }
        self.retained += 1;
        let node = &mut self.nodes[id];
        node.disk.advance_start(start);
        node.replica.on_log_start(start);
    }

    fn sync(&mut self, id: ReplicaId) {
        let node = &mut self.nodes[id as usize];
        if !node.up {
            return;
        }
        let removed = node.disk.sync();
        let end = node.disk.current.end();
        if let Some(from) = removed {
            self.check_acked_from(from);
        }
        let node = &mut self.nodes[id as usize];
        let out = node.replica.on_synced(end);
        if self.rng.below(2) == 0 {
            node.disk.high_watermark = node.replica.checkpoint_high_watermark();
        }
        self.carry_out(id, out);
    }

    fn tick(&mut self, id: ReplicaId) {
        let now = self.now_ms;
        let node = &mut self.nodes[id as usize];
        if node.up {
            let out = node.replica.tick(now, &node.disk.current);
            self.carry_out(id, out);
        }
    }

    fn crash(&mut self, id: ReplicaId) {
        let node = &mut self.nodes[id as usize];
        if !node.up {
            return;
        }
        node.up = false;
        if self.trace {
            eprintln!("[{}] crash {id}", self.steps);
        }
        let removed = node.disk.crash(&mut self.rng);
        node.checked_to = 0;
        if let Some(from) = removed {
            self.check_acked_from(from);
        }
        self.pending.retain(|_, (_, _, leader, _)| *leader != id);
    }

    fn restart(&mut self, id: ReplicaId) {
        let now = self.now_ms;
        let node = &mut self.nodes[id as usize];
        let config = Config {
            window: 1 + self.rng.below(8) as u32,
            ..Config::default()
        };
        node.replica = Replica::recover(
            id,
            Config {
                retry_ms: 200,
                heartbeat_ms: 50,
                max_message_bytes: 300,
                ..config
            },
            node.disk.promised,
            node.disk.current.view(),
            node.disk.high_watermark,
            now,
        );
        node.up = true;
        node.exposed = node.replica.high_watermark();
        node.assignment = 0;
        // The broker's long poll reconnects: it hears the current assignment.
        if self.controlplane.is_member(id) {
            self.announce_to(id);
        }
    }

    /// The controlplane replaces one member (preferring a crashed one, as it replaces dead
    /// brokers; any other models a drained broker) with a spare node, wiped as a new broker
    /// is, in two steps: an election of a new epoch over both sets (so every leader knows
    /// its followers from the epoch's start, and a broker added again is never mistaken for
    /// its earlier self), then the new set alone once its leader says a majority of it holds
    /// everything committed ([`Sim::on_new_set_ready`]).
    fn change_replica_set(&mut self) {
        let cp = &self.controlplane;
        let Some(leader) = cp.leader else { return };
        if cp.election.is_some() || !cp.previous.is_empty() {
            return;
        }
        let spares: Vec<ReplicaId> = self
            .ids()
            .into_iter()
            .filter(|&id| !cp.is_member(id))
            .collect();
        let candidates: Vec<ReplicaId> = cp
            .replicas
            .iter()
            .copied()
            .filter(|&id| id != leader)
            .collect();
        if spares.is_empty() || candidates.is_empty() {
            return;
        }
        let down: Vec<ReplicaId> = candidates
            .iter()
            .copied()
            .filter(|&id| !self.nodes[id as usize].up)
            .collect();
        let pool = if down.is_empty() { &candidates } else { &down };
        let removed = pool[self.rng.below(pool.len() as u64) as usize];
        let added = spares[self.rng.below(spares.len() as u64) as usize];
        if self.trace {
            eprintln!(
                "[{}] replica set {:?}: {removed} out, {added} in",
                self.steps, cp.replicas
            );
        }
        // A new broker: an empty disk.
        let node = &mut self.nodes[added as usize];
        node.disk = Disk::default();
        node.replica = Replica::recover(
            added,
            self.config.clone(),
            LeaderEpoch::ZERO,
            LogView::empty(0),
            0,
            self.now_ms,
        );
        node.up = true;
        node.exposed = 0;
        node.checked_to = 0;
        node.assignment = 0;
        let cp = &mut self.controlplane;
        cp.previous = cp.replicas.clone();
        cp.replicas.retain(|&id| id != removed);
        cp.replicas.push(added);
        cp.replicas.sort_unstable();
        self.changes += 1;
        self.start_election();
    }

    fn on_new_set_ready(&mut self, epoch: LeaderEpoch, replicas: &[ReplicaId]) {
        let cp = &mut self.controlplane;
        if cp.election.is_some()
            || cp.previous.is_empty()
            || epoch != cp.epoch
            || replicas != cp.replicas.as_slice()
        {
            return;
        }
        if self.trace {
            eprintln!("[{}] replica set {replicas:?} complete", self.steps);
        }
        let removed: Vec<ReplicaId> = cp
            .previous
            .iter()
            .copied()
            .filter(|id| !cp.replicas.contains(id))
            .collect();
        cp.previous.clear();
        // The removed member's broker drops the partition (modelled as a crash, which also
        // fails the acks a leader among them still holds: the producer retries on the new
        // leader).
        for id in removed {
            self.crash(id);
        }
        let cp = &self.controlplane;
        let leader_stays = cp
            .leader
            .is_some_and(|leader| cp.replicas.contains(&leader));
        self.changes_done += 1;
        // The leader's claim, checked: every acked record is durable on a majority of the
        // new set.
        self.check_acked_from(0);
        if leader_stays {
            self.announce();
        } else {
            // A leader from the old set only (it was the most up-to-date in the election
            // over both) hands over: the new set elects among itself.
            self.start_election();
        }
    }

    /// The leader's lease lapsed (or it is partitioned from the controlplane): elect.
    fn start_election(&mut self) {
        if self.trace {
            eprintln!(
                "[{}] election of {}",
                self.steps,
                self.controlplane.next_epoch()
            );
        }
        self.controlplane.epoch = self.controlplane.next_epoch();
        self.controlplane.leader = None;
        self.controlplane.version += 1;
        self.controlplane.election = Some((self.controlplane.epoch, BTreeMap::new()));
        for to in self.controlplane.members() {
            self.send(Envelope::Prepare {
                to,
                epoch: self.controlplane.epoch,
            });
        }
    }

    fn on_report(
        &mut self,
        from: ReplicaId,
        epoch: LeaderEpoch,
        last_epoch: LeaderEpoch,
        end: u64,
    ) {
        if !self.controlplane.is_member(from) {
            return;
        }
        let cp = &mut self.controlplane;
        let Some((electing, reports)) = &mut cp.election else {
            return;
        };
        if *electing != epoch {
            return;
        }
        reports.insert(from, (last_epoch, end));
        let reporters: BTreeSet<ReplicaId> = reports.keys().copied().collect();
        if !cp.quorum(&reporters) {
            return;
        }
        let Some((_, reports)) = &self.controlplane.election else {
            return;
        };
        let (&leader, _) = reports
            .iter()
            .max_by_key(|(id, (last_epoch, end))| {
                // Among equals, a member of the new set, which can go on leading after the
                // change.
                let stays = self.controlplane.replicas.contains(id);
                (*last_epoch, *end, stays, std::cmp::Reverse(**id))
            })
            .expect("a majority reported");
        self.controlplane.election = None;
        self.controlplane.leader = Some(leader);
        self.controlplane.version += 1;
        let previous = self.leaders.insert(epoch, leader);
        assert!(
            previous.is_none(),
            "seed {}: two leaders for epoch {epoch}",
            self.seed
        );
        self.announce();
    }

    fn announce(&mut self) {
        self.controlplane.version += 1;
        for to in self.controlplane.members() {
            self.announce_to(to);
        }
    }

    /// Sends `to` the current assignment, if there is a leader.
    fn announce_to(&mut self, to: ReplicaId) {
        let cp = &self.controlplane;
        let Some(leader) = cp.leader else { return };
        let (epoch, version) = (cp.epoch, cp.version);
        let envelope = if to == leader {
            Envelope::Lead {
                to,
                epoch,
                replicas: cp.replicas.clone(),
                previous: cp.previous.clone(),
                version,
            }
        } else {
            Envelope::Follow {
                to,
                epoch,
                leader,
                version,
            }
        };
        self.send(envelope);
    }

    /// Leases, retries and long polls: elect when the leader is down, ask again for reports,
    /// re-announce.
    fn controlplane_step(&mut self) {
        match (&self.controlplane.election, self.controlplane.leader) {
            (Some((epoch, reports)), _) => {
                let epoch = *epoch;
                let missing: Vec<ReplicaId> = self
                    .controlplane
                    .members()
                    .into_iter()
                    .filter(|id| !reports.contains_key(id))
                    .collect();
                for to in missing {
                    self.send(Envelope::Prepare { to, epoch });
                }
            }
            (None, Some(leader)) if !self.nodes[leader as usize].up => self.start_election(),
            (None, Some(leader)) => {
                // The leader's heartbeat says whether the new set holds everything.
                let node = &self.nodes[leader as usize];
                if let Some(replicas) = node.replica.new_set_holds_committed()
                    && let Some(epoch) = node.replica.leader_epoch()
                {
                    self.send(Envelope::NewSetReady { epoch, replicas });
                }
                if self.rng.below(10) == 0 {
                    self.announce();
                }
            }
            (None, None) => self.start_election(),
        }
    }

    /// No acknowledged batch at or above `from` is lost: each is durable on a majority.
    /// Called whenever a durable log may have lost data from `from` on, and for new acks.
    fn check_acked_from(&self, from: u64) {
        let set = self.controlplane.durable_set();
        let majority = set.len() / 2 + 1;
        for (base, batch) in self.acked.range(from.max(self.tiered)..) {
            let copies = set
                .iter()
                .filter(|&&id| self.nodes[id as usize].disk.durable.batch_at(*base) == Some(batch))
                .count();
            assert!(
                copies >= majority,
                "seed {} step {}: acked batch {batch:?} durable on {copies} replicas",
                self.seed,
                self.steps
            );
        }
    }

    fn check(&mut self) {
        let seed = self.seed;
        // The committed prefix is one: below each replica's high watermark its log agrees
        // with every other's.
        for node in self.nodes.iter_mut().filter(|n| n.up) {
            let hw = node.replica.high_watermark();
            assert!(
                hw <= node.disk.current.end(),
                "seed {seed} step {}: replica {} exposes {hw}, beyond its log end {}",
                self.steps,
                node.replica.id(),
                node.disk.current.end()
            );
            let log = &node.disk.current;
            let first = log.batches.partition_point(|b| b.base < node.checked_to);
            for b in log.batches[first..].iter().take_while(|b| b.end() <= hw) {
                let first = *self.committed.entry(b.base).or_insert(b.id);
                assert_eq!(
                    first,
                    b.id,
                    "seed {seed} step {}: replica {} has batch {} at {} below its high \
                     watermark {hw}, committed was {first}",
                    self.steps,
                    node.replica.id(),
                    b.id,
                    b.base
                );
                if let Some(acked) = self.acked.get(&b.base) {
                    assert_eq!(acked, b, "seed {seed}: acked batch differs from committed");
                }
                node.checked_to = b.end();
            }
            // The state machine's view matches the disk.
            let view = node.replica.log();
            assert_eq!(
                (view.start, view.end),
                (node.disk.current.start, node.disk.current.end()),
                "seed {seed}: replica {} view differs from its disk",
                node.replica.id()
            );
        }
    }
}

//! The checks, as Jepsen makes them of Kafka-compatible brokers, on what is read back
//! against the [`History`]:
//!
//! - **lost**: a record acknowledged at an offset is not there (another record, or none, is);
//! - **duplicated**: a record is stored at two offsets (of one partition or two);
//! - **unknown**: a stored record was never sent, was refused before it was sent, or was
//!   sent to another partition;
//! - **reordered**: one producer's records in a partition are not in its send order;
//! - **changed**: an offset read twice held two different records: committed records must
//!   never change.
//!
//! Each violation is counted once, however many reads show it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::time::{Duration, Instant};

use floe_client::Client;

use crate::history::{Fate, History, RecordId};
use crate::read_back::{PartitionRead, read_back};

/// Violations found, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Violations {
    pub lost: u64,
    pub duplicated: u64,
    pub unknown: u64,
    pub reordered: u64,
    pub changed: u64,
    /// Partitions whose read stalled before the high watermark or the last acknowledged
    /// record (a liveness failure; acknowledged records beyond it count as lost too).
    pub stalled: u64,
}

impl Violations {
    pub fn is_clean(&self) -> bool {
        *self == Violations::default()
    }

    pub fn add(&mut self, other: &Violations) {
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.unknown += other.unknown;
        self.reordered += other.reordered;
        self.changed += other.changed;
        self.stalled += other.stalled;
    }
}

/// One cycle's check.
#[derive(Debug, Default)]
pub struct Check {
    pub records_read: u64,
    pub took: Duration,
    /// The violations this check found first.
    pub violations: Violations,
    /// What they are, record by record (the first few of each kind).
    pub report: String,
}

/// Remembers every record read so far, to check each new read against them all.
pub struct Checker {
    /// Every record read, by partition and offset.
    log: Vec<BTreeMap<u64, RecordId>>,
    /// Where each record was read.
    located: HashMap<RecordId, (u32, u64)>,
    /// Where the last two reads of each partition ended: a cycle reads from the older one,
    /// so every record is read after its own cycle and the next.
    ends: [Vec<u64>; 2],
    /// Violations already counted: (kind, partition, offset).
    counted: HashSet<(&'static str, u32, u64)>,
    acked_twice_counted: usize,
}

/// Lines of the report per kind.
const REPORT_LINES: usize = 10;

impl Checker {
    pub fn new(partitions: u32) -> Checker {
        let zeros = vec![0; partitions as usize];
        Checker {
            log: vec![BTreeMap::new(); partitions as usize],
            located: HashMap::new(),
            ends: [zeros.clone(), zeros],
            counted: HashSet::new(),
            acked_twice_counted: 0,
        }
    }

    /// Reads every partition back (from 0 when `full`) and checks it against `history`.
    pub async fn read_and_check(
        &mut self,
        client: &Client,
        stream: &str,
        history: &std::sync::Mutex<History>,
        full: bool,
        deadline: Duration,
    ) -> Check {
        let started = Instant::now();
        let acked_ends = lock(history).acked_ends(self.log.len() as u32);
        let ranges: Vec<(u64, u64)> = acked_ends
            .iter()
            .enumerate()
            .map(|(p, &end)| (if full { 0 } else { self.ends[0][p] }, end))
            .collect();
        let reads = read_back(client, stream, &ranges, deadline).await;
        let mut check = self.check(&lock(history), &reads);
        check.took = started.elapsed();
        self.ends[0] = std::mem::take(&mut self.ends[1]);
        self.ends[1] = reads.iter().map(|r| r.reached).collect();
        check
    }

    fn check(&mut self, history: &History, reads: &[PartitionRead]) -> Check {
        let mut check = Check::default();
        let mut found = Found::default();
        for read in reads {
            check.records_read += read.records.len() as u64;
            self.check_read(history, read, &mut found);
        }
        for &(partition, offset, first, second) in &history.acked_twice[self.acked_twice_counted..]
        {
            found.add(
                "lost",
                partition,
                offset,
                format!("{first} and {second} were both acknowledged at {offset}"),
            );
        }
        self.acked_twice_counted = history.acked_twice.len();
        for (kind, partition, offset, what) in found.0 {
            if !self.counted.insert((kind, partition, offset)) {
                continue;
            }
            let counter = match kind {
                "lost" => &mut check.violations.lost,
                "duplicated" => &mut check.violations.duplicated,
                "unknown" => &mut check.violations.unknown,
                "reordered" => &mut check.violations.reordered,
                "changed" => &mut check.violations.changed,
                _ => &mut check.violations.stalled,
            };
            *counter += 1;
            if *counter as usize <= REPORT_LINES {
                let _ = writeln!(
                    check.report,
                    "{kind}: partition {partition} offset {offset}: {what}"
                );
            }
        }
        check
    }

    fn check_read(&mut self, history: &History, read: &PartitionRead, found: &mut Found) {
        let p = read.partition;
        let mut last_of_producer: HashMap<u32, (u64, u64)> = HashMap::new();
        for (offset, value) in &read.records {
            let offset = *offset;
            let Some(id) = RecordId::parse(value) else {
                let shown = String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned();
                found.add(
                    "unknown",
                    p,
                    offset,
                    format!("a value never sent: {shown:?}"),
                );
                continue;
            };
            match history.get(&id) {
                None => found.add("unknown", p, offset, format!("{id} was never sent")),
                Some(sent) if sent.partition != p => found.add(
                    "unknown",
                    p,
                    offset,
                    format!("{id} was sent to partition {}", sent.partition),
                ),
                Some(sent) if sent.fate == Fate::NotSent => found.add(
                    "unknown",
                    p,
                    offset,
                    format!("{id} was refused by its producer, never sent"),
                ),
                Some(_) => {}
            }
            if let Some(before) = self.log[p as usize].insert(offset, id)
                && before != id
            {
                found.add(
                    "changed",
                    p,
                    offset,
                    format!("held {before} in an earlier read, now {id}"),
                );
            }
            match self.located.get(&id) {
                Some(&(q, at)) if (q, at) != (p, offset) => found.add(
                    "duplicated",
                    p,
                    offset,
                    format!("{id}, also at partition {q} offset {at}"),
                ),
                Some(_) => {}
                None => {
                    self.located.insert(id, (p, offset));
                }
            }
            if let Some(&(sequence, at)) = last_of_producer.get(&id.producer)
                && sequence >= id.sequence
            {
                found.add(
                    "reordered",
                    p,
                    offset,
                    format!("{id} follows sequence {sequence} of its producer (offset {at})"),
                );
            }
            last_of_producer.insert(id.producer, (id.sequence, offset));
        }
        let read_here: BTreeMap<u64, RecordId> = read
            .records
            .iter()
            .filter_map(|(o, v)| Some((*o, RecordId::parse(v)?)))
            .collect();
        for (offset, id) in history.acked_in(p, read.from..read.to) {
            if read_here.get(&offset) == Some(&id) {
                continue;
            }
            let what = match (read_here.get(&offset), offset >= read.reached) {
                (_, true) => format!(
                    "{id} acknowledged here, not read: {}",
                    read.stalled
                        .as_deref()
                        .unwrap_or("the read ended before it")
                ),
                (Some(other), false) => format!("{id} acknowledged here, {other} found"),
                (None, false) => format!(
                    "{id} acknowledged here, nothing found (it is at {:?})",
                    self.located.get(&id)
                ),
            };
            found.add("lost", p, offset, what);
        }
        if let Some(why) = &read.stalled {
            found.add(
                "stalled",
                p,
                read.reached,
                format!("reading from {} to {} stalled {why}", read.from, read.to),
            );
        }
    }
}

/// Violations of one check, before those counted earlier are dropped.
#[derive(Default)]
struct Found(Vec<(&'static str, u32, u64, String)>);

impl Found {
    fn add(&mut self, kind: &'static str, partition: u32, offset: u64, what: String) {
        self.0.push((kind, partition, offset, what));
    }
}

fn lock(history: &std::sync::Mutex<History>) -> std::sync::MutexGuard<'_, History> {
    history.lock().unwrap_or_else(|e| e.into_inner())
}

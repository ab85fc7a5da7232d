//! What the producers sent and what became of each record: acknowledged at an offset,
//! failed (it may or may not be stored), or never handed to a producer (it must not be).

use std::collections::{BTreeMap, HashMap};

/// A record: the producer that sent it (numbered by the workload) and its place in that
/// producer's send order. Both are in the record's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId {
    pub producer: u32,
    pub sequence: u64,
}

impl RecordId {
    /// The value the record carries: `chaos-{producer}-{sequence}-`, filled up to `bytes`.
    pub fn value(&self, bytes: usize) -> String {
        let mut value = format!("chaos-{}-{}-", self.producer, self.sequence);
        while value.len() < bytes {
            value.push('x');
        }
        value
    }

    /// The record a stored value names, if it is one of ours.
    pub fn parse(value: &[u8]) -> Option<RecordId> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.strip_prefix("chaos-")?.splitn(3, '-');
        let producer = parts.next()?.parse().ok()?;
        let sequence = parts.next()?.parse().ok()?;
        let rest = parts.next()?;
        rest.bytes()
            .all(|b| b == b'x')
            .then_some(RecordId { producer, sequence })
    }
}

impl std::fmt::Display for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chaos-{}-{}", self.producer, self.sequence)
    }
}

/// What became of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Handed to a producer; no answer yet.
    Pending,
    /// Acknowledged at this offset: it must be there, once, for good.
    Acked(u64),
    /// Its delivery failed: it may be stored (once) or not.
    Failed,
    /// The producer refused it before buffering it: it must never be stored.
    NotSent,
}

#[derive(Debug, Clone)]
pub struct Sent {
    pub partition: u32,
    pub fate: Fate,
}

/// Every record sent in the run.
#[derive(Debug, Default)]
pub struct History {
    sent: HashMap<RecordId, Sent>,
    /// Acknowledged records by partition and offset.
    acked: Vec<BTreeMap<u64, RecordId>>,
    /// Two records acknowledged at one offset of one partition: (partition, offset, the
    /// first, the second). One of them is lost whatever the log holds.
    pub acked_twice: Vec<(u32, u64, RecordId, RecordId)>,
    /// This round's (acknowledged, failed) deliveries by producer.
    round: HashMap<u32, (u64, u64)>,
}

impl History {
    /// `id` was handed to a producer for `partition`.
    pub fn sent(&mut self, id: RecordId, partition: u32) {
        self.sent.insert(
            id,
            Sent {
                partition,
                fate: Fate::Pending,
            },
        );
    }

    /// The answer to `id`'s delivery: its offset, or why it failed. A failure whose message
    /// starts `not sent` means the producer never took the record.
    pub fn delivered(&mut self, id: RecordId, result: Result<u64, String>) {
        let Some(sent) = self.sent.get_mut(&id) else {
            return;
        };
        let counts = self.round.entry(id.producer).or_default();
        match result {
            Ok(offset) => {
                counts.0 += 1;
                sent.fate = Fate::Acked(offset);
                let partition = sent.partition as usize;
                if self.acked.len() <= partition {
                    self.acked.resize_with(partition + 1, BTreeMap::new);
                }
                if let Some(other) = self.acked[partition].insert(offset, id)
                    && other != id
                {
                    self.acked_twice.push((sent.partition, offset, other, id));
                }
            }
            Err(why) => {
                counts.1 += 1;
                sent.fate = if why.starts_with("not sent") {
                    Fate::NotSent
                } else {
                    Fate::Failed
                };
            }
        }
    }

    pub fn get(&self, id: &RecordId) -> Option<&Sent> {
        self.sent.get(id)
    }

    /// The records acknowledged in `partition` at offsets in `range`.
    pub fn acked_in(
        &self,
        partition: u32,
        range: std::ops::Range<u64>,
    ) -> impl Iterator<Item = (u64, RecordId)> + '_ {
        self.acked
            .get(partition as usize)
            .into_iter()
            .flat_map(move |acked| acked.range(range.clone()).map(|(o, id)| (*o, *id)))
    }

    /// Per partition, the offset after the last acknowledged record.
    pub fn acked_ends(&self, partitions: u32) -> Vec<u64> {
        (0..partitions as usize)
            .map(|p| {
                self.acked
                    .get(p)
                    .and_then(|a| a.keys().next_back())
                    .map_or(0, |o| o + 1)
            })
            .collect()
    }

    /// This round's (acknowledged, failed) deliveries of `producer`.
    pub fn producer_outcome(&self, producer: u32) -> (u64, u64) {
        self.round.get(&producer).copied().unwrap_or_default()
    }

    pub fn forget_outcomes(&mut self) {
        self.round.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_record() {
        let id = RecordId {
            producer: 7,
            sequence: 12_345,
        };
        let value = id.value(120);
        assert_eq!(value.len(), 120);
        assert_eq!(RecordId::parse(value.as_bytes()), Some(id));
        assert_eq!(RecordId::parse(b"chaos-7-12345-xxy"), None);
        assert_eq!(RecordId::parse(b"other"), None);
    }
}

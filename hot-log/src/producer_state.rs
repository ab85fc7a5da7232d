//! Idempotent producers: per producer id, its epoch and its last few batches, so that a
//! retried batch is recognised and answered with its original offsets.
//!
//! The state is part of the log. It is snapshotted to `{base:020}.producers` (framed, magic
//! `FLPS`) each time a segment is sealed, as of the new segment's base offset; recovery loads
//! the snapshot of the active segment and replays that segment's batches.
//!
//! Snapshot payload: `u64 offset, u32 count, count × producer`, where
//! `producer := i64 id | u16 epoch | i64 last_timestamp | u8 n | n × (i32 first_sequence,
//! i32 last_sequence, u64 base_offset, u64 last_offset)`.

use std::collections::{HashMap, VecDeque};

use floe_wire::{BatchHeader, Offset};

use crate::LogError;
use crate::state_file::PayloadReader;

pub(crate) const PRODUCERS_EXT: &str = "producers";
pub(crate) const PRODUCERS_MAGIC: [u8; 4] = *b"FLPS";
/// Batches remembered per producer: a producer may have this many in flight and still have
/// every retry recognised. Brokers announce it to clients (`max_in_flight_batches` in
/// `HelloAck`). It was 5 before 2026-12-03; snapshots written then still load.
pub const PRODUCER_BATCHES_REMEMBERED: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMeta {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: Offset,
    last_offset: Offset,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Producer {
    epoch: u16,
    last_timestamp: i64,
    batches: VecDeque<BatchMeta>,
}

/// The outcome of checking a batch against the producer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProducerCheck {
    /// Append it.
    Append,
    /// Already in the log at these offsets: do not append, answer with them.
    Duplicate {
        base_offset: Offset,
        last_offset: Offset,
    },
}

/// Every known idempotent producer of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProducerState {
    producers: HashMap<i64, Producer>,
}

impl ProducerState {
    /// Checks a batch from the produce path (the leader). Batches without producer fields
    /// always append.
    pub fn check(&self, header: &BatchHeader) -> Result<ProducerCheck, LogError> {
        if !header.has_producer() {
            return Ok(ProducerCheck::Append);
        }
        let Some(p) = self.producers.get(&header.producer_id) else {
            // A producer's first batch starts its sequence: anything else is a later batch
            // that overtook the first, and appending it would reorder the partition.
            return if header.base_sequence == 0 {
                Ok(ProducerCheck::Append)
            } else {
                Err(LogError::OutOfOrderSequence {
                    producer_id: header.producer_id,
                    expected: 0,
                    found: header.base_sequence,
                })
            };
        };
        let (id, epoch, first) = (
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
        );
        if epoch < p.epoch {
            return Err(LogError::ProducerFenced {
                producer_id: id,
                epoch,
                current: p.epoch,
            });
        }
        if epoch > p.epoch {
            return if first == 0 {
                Ok(ProducerCheck::Append)
            } else {
                Err(LogError::OutOfOrderSequence {
                    producer_id: id,
                    expected: 0,
                    found: first,
                })
            };
        }
        let last = header.last_sequence();
        if let Some(b) = p
            .batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
        {
            return Ok(ProducerCheck::Duplicate {
                base_offset: b.base_offset,
                last_offset: b.last_offset,
            });
        }
        let expected = p
            .batches
            .back()
            .map_or(0, |b| b.last_sequence.saturating_add(1));
        if first == expected {
            Ok(ProducerCheck::Append)
        } else {
            Err(LogError::OutOfOrderSequence {
                producer_id: id,
                expected,
                found: first,
            })
        }
    }

    /// Records a batch that is now in the log (stamped with its offsets).
    pub fn record(&mut self, header: &BatchHeader, producers_max: usize) {
        if !header.has_producer() {
            return;
        }
        let meta = BatchMeta {
            first_sequence: header.base_sequence,
            last_sequence: header.last_sequence(),
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
        };
        let p = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| Producer {
                epoch: header.producer_epoch,
                last_timestamp: header.max_timestamp,
                batches: VecDeque::new(),
            });
        if header.producer_epoch != p.epoch {
            p.epoch = header.producer_epoch;
            p.batches.clear();
        }
        p.last_timestamp = p.last_timestamp.max(header.max_timestamp);
        p.batches.push_back(meta);
        while p.batches.len() > PRODUCER_BATCHES_REMEMBERED {
            p.batches.pop_front();
        }
        if self.producers.len() > producers_max {
            self.forget_least_recent();
        }
    }

    fn forget_least_recent(&mut self) {
        let oldest = self
            .producers
            .iter()
            .min_by_key(|(_, p)| p.last_timestamp)
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.producers.remove(&id);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn encode(&self, offset: Offset) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&offset.get().to_le_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_le_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let p = &self.producers[&id];
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&p.epoch.to_le_bytes());
            out.extend_from_slice(&p.last_timestamp.to_le_bytes());
            out.push(p.batches.len() as u8);
            for b in &p.batches {
                out.extend_from_slice(&b.first_sequence.to_le_bytes());
                out.extend_from_slice(&b.last_sequence.to_le_bytes());
                out.extend_from_slice(&b.base_offset.get().to_le_bytes());
                out.extend_from_slice(&b.last_offset.get().to_le_bytes());
            }
        }
        out
    }

    /// Decodes a snapshot; returns the offset it was taken at and the state.
    pub fn decode(payload: &[u8]) -> Result<(Offset, ProducerState), String> {
        let mut r = PayloadReader::new(payload);
        let offset = Offset::new(r.u64()?);
        let n = r.count(8 + 2 + 8 + 1)?;
        let mut state = ProducerState::default();
        for _ in 0..n {
            let id = r.i64()?;
            let epoch = r.u16()?;
            let last_timestamp = r.i64()?;
            let count = r.u8()? as usize;
            if id < 0 || count > PRODUCER_BATCHES_REMEMBERED {
                return Err(format!("producer {id} with {count} batches is invalid"));
            }
            let mut batches = VecDeque::with_capacity(count);
            for _ in 0..count {
                let meta = BatchMeta {
                    first_sequence: r.i32()?,
                    last_sequence: r.i32()?,
                    base_offset: Offset::new(r.u64()?),
                    last_offset: Offset::new(r.u64()?),
                };
                if meta.last_offset >= offset || meta.last_sequence < meta.first_sequence {
                    return Err(format!(
                        "producer {id}: batch beyond the snapshot or reversed"
                    ));
                }
                batches.push_back(meta);
            }
            let producer = Producer {
                epoch,
                last_timestamp,
                batches,
            };
            if state.producers.insert(id, producer).is_some() {
                return Err(format!("producer {id} appears twice"));
            }
        }
        r.finish()?;
        Ok((offset, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_wire::BatchBuilder;

    fn header(id: i64, epoch: u16, seq: i32, count: u32, base: u64) -> BatchHeader {
        let mut b = BatchBuilder::new(1 << 16);
        b.producer(id, epoch, seq);
        for i in 0..count {
            b.push(1000 + i64::from(i), None, b"v", &[]).expect("push");
        }
        let mut bytes = b.finish().expect("finish").to_vec();
        floe_wire::batch::stamp(&mut bytes, Offset::new(base), floe_wire::LeaderEpoch::ZERO)
            .expect("stamp");
        BatchHeader::parse(&bytes).expect("header")
    }

    #[test]
    fn a_retried_batch_is_a_duplicate_with_its_original_offsets() {
        let mut s = ProducerState::default();
        let first = header(7, 0, 0, 3, 100);
        assert_eq!(s.check(&first).ok(), Some(ProducerCheck::Append));
        s.record(&first, 10);
        let retry = header(7, 0, 0, 3, 555);
        assert_eq!(
            s.check(&retry).ok(),
            Some(ProducerCheck::Duplicate {
                base_offset: Offset::new(100),
                last_offset: Offset::new(102)
            })
        );
        assert_eq!(
            s.check(&header(7, 0, 3, 1, 0)).ok(),
            Some(ProducerCheck::Append)
        );
    }

    #[test]
    fn an_unknown_producer_must_start_at_sequence_zero() {
        let s = ProducerState::default();
        assert!(matches!(
            s.check(&header(9, 0, 3, 1, 0)),
            Err(LogError::OutOfOrderSequence {
                expected: 0,
                found: 3,
                ..
            })
        ));
        assert_eq!(
            s.check(&header(9, 0, 0, 1, 0)).ok(),
            Some(ProducerCheck::Append)
        );
    }

    #[test]
    fn a_sequence_gap_is_refused_with_the_expected_sequence() {
        let mut s = ProducerState::default();
        s.record(&header(7, 0, 0, 2, 0), 10);
        match s.check(&header(7, 0, 5, 1, 0)) {
            Err(LogError::OutOfOrderSequence {
                expected, found, ..
            }) => assert_eq!((expected, found), (2, 5)),
            other => panic!("expected OutOfOrderSequence, got {other:?}"),
        }
    }

    #[test]
    fn an_older_producer_epoch_is_fenced_and_a_newer_one_restarts_at_zero() {
        let mut s = ProducerState::default();
        s.record(&header(7, 3, 0, 1, 0), 10);
        assert!(matches!(
            s.check(&header(7, 2, 1, 1, 0)),
            Err(LogError::ProducerFenced { current: 3, .. })
        ));
        assert_eq!(
            s.check(&header(7, 4, 0, 1, 0)).ok(),
            Some(ProducerCheck::Append)
        );
        assert!(matches!(
            s.check(&header(7, 4, 9, 1, 0)),
            Err(LogError::OutOfOrderSequence { expected: 0, .. })
        ));
    }

    #[test]
    fn only_the_last_batches_are_remembered() {
        let mut s = ProducerState::default();
        let kept = PRODUCER_BATCHES_REMEMBERED as i32;
        for i in 0..kept + 2 {
            s.record(&header(1, 0, i, 1, i as u64), 10);
        }
        // Sequences 0 and 1 fell out of the window: a retry of one is a sequence error, not a
        // duplicate; the oldest one still remembered is a duplicate.
        assert!(matches!(
            s.check(&header(1, 0, 1, 1, 0)),
            Err(LogError::OutOfOrderSequence { .. })
        ));
        assert!(matches!(
            s.check(&header(1, 0, 2, 1, 0)),
            Ok(ProducerCheck::Duplicate { .. })
        ));
    }

    #[test]
    fn the_producer_count_is_bounded() {
        let mut s = ProducerState::default();
        for id in 0..20 {
            s.record(&header(id, 0, 0, 1, id as u64), 8);
        }
        assert_eq!(s.len(), 8);
    }

    #[test]
    fn snapshot_round_trips() {
        let mut s = ProducerState::default();
        s.record(&header(1, 0, 0, 2, 0), 10);
        s.record(&header(2, 5, 10, 1, 2), 10);
        let bytes = s.encode(Offset::new(3));
        let (offset, decoded) = ProducerState::decode(&bytes).expect("decode");
        assert_eq!(offset, Offset::new(3));
        assert_eq!(decoded, s);
        assert!(ProducerState::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn a_full_window_round_trips_and_a_longer_one_is_refused() {
        let mut s = ProducerState::default();
        let kept = PRODUCER_BATCHES_REMEMBERED as i32;
        for i in 0..kept {
            s.record(&header(1, 0, i, 1, i as u64), 10);
        }
        let bytes = s.encode(Offset::new(kept as u64));
        let (_, decoded) = ProducerState::decode(&bytes).expect("decode");
        assert_eq!(decoded, s);
        // One batch more than remembered: the count byte sits after the id, epoch and
        // timestamp that follow the offset and the producer count.
        let mut longer = bytes.clone();
        let count_at = 8 + 4 + 8 + 2 + 8;
        assert_eq!(longer[count_at], kept as u8);
        longer[count_at] += 1;
        longer.extend_from_slice(&[0; 24]);
        let refused = ProducerState::decode(&longer).expect_err("too many batches");
        assert!(
            refused.contains(&format!("with {} batches", kept + 1)),
            "{refused}"
        );
    }
}

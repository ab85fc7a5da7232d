//! Property test against a simple in-memory model: append, read, roll, truncate, retention
//! and reopen (after a clean close, from the crash image) in any order.

mod common;

use std::sync::Arc;

use common::*;
use floe_hot_log::{CrashStorage, Log, LogError, RetentionPolicy, Storage};
use floe_wire::{LeaderEpoch, Offset};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append {
        count: u32,
        value_len: usize,
    },
    Roll,
    /// Truncate to the start of the batch at this fraction of the batches.
    Truncate {
        at: f64,
    },
    Retention {
        keep_bytes: u64,
    },
    Reopen {
        seed: u64,
    },
    Read {
        from: f64,
        max_bytes: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u32..8, 0usize..120).prop_map(|(count, value_len)| Op::Append { count, value_len }),
        1 => Just(Op::Roll),
        1 => (0.0f64..1.0).prop_map(|at| Op::Truncate { at }),
        1 => (0u64..4096).prop_map(|keep_bytes| Op::Retention { keep_bytes }),
        1 => any::<u64>().prop_map(|seed| Op::Reopen { seed }),
        2 => (0.0f64..1.0, 1usize..2048).prop_map(|(from, max_bytes)| Op::Read { from, max_bytes }),
    ]
}

/// The model: batches in order, each (base offset, values), and the first retained batch.
#[derive(Default, Debug)]
struct Model {
    batches: Vec<(u64, Vec<Vec<u8>>)>,
    start: usize,
    next_value: u64,
}

impl Model {
    fn end(&self) -> u64 {
        self.batches.last().map_or(0, |(b, v)| b + v.len() as u64)
    }
    fn start_offset(&self) -> u64 {
        self.batches.get(self.start).map_or(self.end(), |(b, _)| *b)
    }
    fn records_from(&self, from: u64) -> Vec<(u64, Vec<u8>)> {
        self.batches[self.start..]
            .iter()
            .flat_map(|(b, vs)| {
                vs.iter()
                    .enumerate()
                    .map(move |(i, v)| (b + i as u64, v.clone()))
            })
            .filter(|(o, _)| *o >= from)
            .collect()
    }
}

fn open(storage: &CrashStorage) -> Log {
    Log::open(
        Arc::new(storage.clone()) as Arc<dyn Storage>,
        &dir(),
        small_config(),
    )
    .expect("open")
}

fn run(ops: Vec<Op>) {
    let mut storage = CrashStorage::new();
    let mut log = open(&storage);
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Append { count, value_len } => {
                let values: Vec<Vec<u8>> = (0..count)
                    .map(|_| {
                        model.next_value += 1;
                        let mut v = model.next_value.to_le_bytes().to_vec();
                        v.resize(8 + value_len, b'v');
                        v
                    })
                    .collect();
                let mut builder = floe_wire::BatchBuilder::new(1 << 20);
                for v in &values {
                    builder.push(0, None, v, &[]).expect("push");
                }
                let a = log
                    .append(&builder.finish().expect("finish"), LeaderEpoch::new(1))
                    .expect("append");
                assert_eq!(a.base_offset.get(), model.end());
                model.batches.push((a.base_offset.get(), values));
            }
            Op::Roll => log.roll().expect("roll"),
            Op::Truncate { at } => {
                let live = model.batches.len() - model.start;
                if live == 0 {
                    continue;
                }
                let i = model.start + ((at * live as f64) as usize).min(live - 1);
                let to = model.batches[i].0;
                log.truncate(Offset::new(to)).expect("truncate");
                model.batches.truncate(i);
                if model.start > i {
                    model.start = i;
                }
            }
            Op::Retention { keep_bytes } => {
                let policy = RetentionPolicy {
                    bytes_max: Some(keep_bytes),
                    age_max_ms: None,
                };
                let deleted = log.apply_retention(policy, 0, |_| true).expect("retention");
                if let Some(last) = deleted.last() {
                    let new_start = last.next_offset.get();
                    model.start = model.batches.partition_point(|(b, _)| *b < new_start);
                }
            }
            Op::Reopen { seed } => {
                log.close().expect("close");
                drop(log);
                // After a clean close everything is durable: any crash image is the same.
                storage = storage.crash_image().restore(seed);
                log = open(&storage);
            }
            Op::Read { from, max_bytes } => {
                let (start, end) = (model.start_offset(), model.end());
                let from = start + ((end - start) as f64 * from) as u64;
                let read = log
                    .read(Offset::new(from), max_bytes, Offset::new(end))
                    .expect("read");
                if from < end {
                    assert!(
                        !read.bytes.is_empty(),
                        "empty read at {from} of [{start}, {end})"
                    );
                }
                let got: Vec<_> = records(&read.bytes)
                    .into_iter()
                    .filter(|(o, _)| *o >= from)
                    .collect();
                let expected = model.records_from(from);
                assert_eq!(got[..], expected[..got.len()]);
                assert_eq!(
                    read.next_offset.get(),
                    got.last().map_or(from, |(o, _)| o + 1)
                );
            }
        }
        assert_eq!(log.log_end().get(), model.end());
        assert_eq!(log.log_start().get(), model.start_offset());
    }
    assert_eq!(read_all(&log, log.log_start()), model.records_from(0));
    if model.start_offset() > 0 {
        let err = log
            .read(Offset::ZERO, 1, log.log_end())
            .expect_err("below start");
        assert!(matches!(err, LogError::OffsetOutOfRange { .. }));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_log_behaves_like_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops);
    }
}

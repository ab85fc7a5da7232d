//! Property test of the manifest: random commits of contiguous ranges and removals of the
//! oldest segments, with frequent checkpoints; what a fresh reader loads from the bucket
//! always equals the writer's state, and the segments always cover one contiguous range.

mod common;

use floe_tier::PartitionPath;
use floe_tier::manifest::{Change, ManifestLog, ManifestState, TieredSegment};
use floe_wire::LeaderEpoch;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Add this many segments with these record counts.
    Add(Vec<u8>),
    /// Remove this many of the oldest segments (bounded by what exists).
    Remove(u8),
    /// Collect manifest versions below the latest checkpoint.
    Collect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(1u8..50, 1..4).prop_map(Op::Add),
        2 => (1u8..3).prop_map(Op::Remove),
        1 => Just(Op::Collect),
    ]
}

fn segment(base: u64, count: u64, id: u64) -> TieredSegment {
    let name = format!("{base:020}-1-{id:032x}.seg");
    TieredSegment {
        name: floe_tier::SegmentName::parse(&name).expect("valid").0,
        base_offset: base,
        next_offset: base + count,
        object_bytes: count * 100 + 80,
        data_bytes: count * 100,
        record_count: count,
        max_timestamp: base as i64,
        epoch: LeaderEpoch::new(1),
    }
}

fn check_contiguous(state: &ManifestState) {
    for pair in state.segments.windows(2) {
        assert_eq!(pair[0].next_offset, pair[1].base_offset);
    }
    if let Some(last) = state.segments.last() {
        assert_eq!(Some(last.next_offset), state.end_offset);
    }
}

async fn run(ops: Vec<Op>, interval: u64) {
    let s = common::local_store();
    let partition = PartitionPath::new("model", 0).expect("valid");
    let log =
        ManifestLog::new(s.store.clone(), partition.clone()).with_checkpoint_interval(interval);
    let mut state = ManifestState::default();
    let mut next_id = 0;
    let mut time = 1_000;
    for op in ops {
        time += 10;
        let change = match op {
            Op::Add(counts) => {
                let mut base = state.tier_end().get();
                let added = counts
                    .iter()
                    .map(|&c| {
                        next_id += 1;
                        let s = segment(base, u64::from(c), next_id);
                        base += u64::from(c);
                        s
                    })
                    .collect();
                Change {
                    epoch: LeaderEpoch::new(1),
                    committed_at_ms: time,
                    added,
                    removed: Vec::new(),
                }
            }
            Op::Remove(n) => {
                let removed: Vec<_> = state
                    .segments
                    .iter()
                    .take(usize::from(n))
                    .map(|s| s.name.clone())
                    .collect();
                if removed.is_empty() {
                    continue;
                }
                Change {
                    epoch: LeaderEpoch::new(1),
                    committed_at_ms: time,
                    added: Vec::new(),
                    removed,
                }
            }
            Op::Collect => {
                let _deleted = log.collect(i64::MAX / 2, 0).await.expect("collect");
                continue;
            }
        };
        let expected = state.apply(&change).expect("the model's change applies");
        state = log.commit(Some(state), &change).await.expect("commit");
        assert_eq!(state, expected);
        check_contiguous(&state);
        let fresh = ManifestLog::new(s.store.clone(), partition.clone())
            .load()
            .await
            .expect("load");
        assert_eq!(
            fresh, state,
            "replay from the bucket equals the writer's state"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn replay_from_the_bucket_equals_the_committed_state(
        ops in prop::collection::vec(op(), 1..30),
        interval in 1u64..5,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run(ops, interval));
    }
}

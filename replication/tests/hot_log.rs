//! The state machine driven against real `floe-hot-log` logs on disk (fsync included): a
//! leader replicates to two followers, loses an election with an uncommitted tail, and the
//! new epoch's leader makes the old one truncate that tail through the log's own truncation;
//! and a new leader commits the tail it inherited through its epoch-start marker.
//! Messages go through an in-memory queue; the simulator covers loss and reordering.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use floe_hot_log::{FsStorage, Log, LogConfig};
use floe_replication::{
    Config, Message, Output, Replica, ReplicaId, WireBatch, log_view, split_batches,
};
use floe_wire::{BatchBuilder, ControlKind, LeaderEpoch, Offset, RecordBatch};

struct Node {
    log: Log,
    replica: Replica,
    promised: LeaderEpoch,
    high_watermark: u64,
    reports: Vec<(LeaderEpoch, LeaderEpoch, u64)>,
    _dir: tempfile::TempDir,
}

type Network = VecDeque<(ReplicaId, ReplicaId, Message<WireBatch>)>;

fn node(id: ReplicaId) -> Node {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = Log::open(Arc::new(FsStorage), dir.path(), LogConfig::default()).expect("open");
    let replica = Replica::recover(
        id,
        Config::default(),
        LeaderEpoch::ZERO,
        log_view(&log),
        0,
        0,
    );
    Node {
        log,
        replica,
        promised: LeaderEpoch::ZERO,
        high_watermark: 0,
        reports: Vec::new(),
        _dir: dir,
    }
}

fn batch(n: u64) -> Bytes {
    let mut builder = BatchBuilder::new(1 << 16);
    for i in 0..3 {
        builder
            .push(
                1_700_000_000_000,
                None,
                format!("record {n}.{i}").as_bytes(),
                &[],
            )
            .expect("push");
    }
    builder.finish().expect("finish")
}

/// Carries out outputs in order, as a driver must.
fn carry_out(
    nodes: &mut [Node],
    id: ReplicaId,
    outputs: Vec<Output<WireBatch>>,
    net: &mut Network,
) {
    let node = &mut nodes[id as usize];
    let mut more = Vec::new();
    for output in outputs {
        match output {
            Output::PersistEpoch(epoch) => node.promised = epoch,
            Output::Send { to, message } => net.push_back((id, to, message)),
            Output::Write(batches) => {
                for b in batches {
                    node.log
                        .append_replicated(b.bytes())
                        .expect("replicated append");
                }
            }
            Output::Truncate(to) => node.log.truncate(Offset::new(to)).expect("truncate"),
            Output::Reset { start, .. } => panic!("no reset expected (to {start})"),
            Output::HighWatermark(hw) => {
                node.high_watermark = hw;
                let checkpoint = node.replica.checkpoint_high_watermark();
                node.log
                    .store_high_watermark(Offset::new(checkpoint))
                    .expect("checkpoint");
            }
            Output::Report {
                epoch,
                last_epoch,
                end,
            } => node.reports.push((epoch, last_epoch, end)),
            Output::MarkEpochStart { epoch } => {
                let (appended, _) = node
                    .log
                    .append_control(ControlKind::EpochStart, epoch, 1_700_000_000_000)
                    .expect("the epoch-start marker");
                more.extend(
                    node.replica
                        .on_appended(appended.next_offset().get(), &node.log),
                );
            }
            // Producers here wait on no acks: a deposed leader has none to fail.
            Output::Deposed { .. } => {}
            // Every election here is one the voters reported for.
            Output::Refused { epoch } => panic!("no refusal expected (of epoch {epoch})"),
        }
    }
    if !more.is_empty() {
        carry_out(nodes, id, more, net);
    }
}

/// Syncs every log and delivers messages until the network is quiet, then lets a heartbeat
/// interval pass (the leader's heartbeats carry its high watermark); three times. Messages
/// from or to `cut` are dropped.
fn settle(nodes: &mut [Node], net: &mut Network, cut: &[ReplicaId], now_ms: &mut u64) {
    for _ in 0..3 {
        quiet(nodes, net, cut);
        *now_ms += Config::default().heartbeat_ms;
        for id in 0..nodes.len() as ReplicaId {
            let node = &mut nodes[id as usize];
            let out = node.replica.tick(*now_ms, &node.log);
            carry_out(nodes, id, out, net);
        }
    }
    quiet(nodes, net, cut);
}

fn quiet(nodes: &mut [Node], net: &mut Network, cut: &[ReplicaId]) {
    for _ in 0..10_000 {
        for id in 0..nodes.len() as ReplicaId {
            let node = &mut nodes[id as usize];
            let end = node.log.log_end();
            node.log.wait_synced_blocking(end).expect("sync");
            let out = node.replica.on_synced(end.get());
            carry_out(nodes, id, out, net);
        }
        let Some((from, to, message)) = net.pop_front() else {
            return;
        };
        if cut.contains(&to) || cut.contains(&from) {
            continue;
        }
        let node = &mut nodes[to as usize];
        let out = node.replica.on_message(from, message, &node.log);
        carry_out(nodes, to, out, net);
    }
    panic!("the network did not go quiet");
}

fn elect(
    nodes: &mut [Node],
    net: &mut Network,
    epoch: u32,
    leader: ReplicaId,
    voters: &[ReplicaId],
) {
    let epoch = LeaderEpoch::new(epoch);
    for &id in voters {
        let out = nodes[id as usize].replica.prepare(epoch);
        carry_out(nodes, id, out, net);
    }
    let all: Vec<ReplicaId> = (0..nodes.len() as ReplicaId).collect();
    let node = &mut nodes[leader as usize];
    let out = node.replica.become_leader(epoch, &all, &[], &node.log);
    carry_out(nodes, leader, out, net);
    for &id in voters.iter().filter(|&&id| id != leader) {
        let out = nodes[id as usize].replica.become_follower(epoch, leader);
        carry_out(nodes, id, out, net);
    }
}

fn produce(nodes: &mut [Node], net: &mut Network, leader: ReplicaId, n: u64) {
    let node = &mut nodes[leader as usize];
    let epoch = node.replica.leader_epoch().expect("leads");
    let appended = node.log.append(&batch(n), epoch).expect("append");
    let out = node
        .replica
        .on_appended(appended.next_offset().get(), &node.log);
    carry_out(nodes, leader, out, net);
}

fn contents(log: &Log) -> Vec<WireBatch> {
    let read = log
        .read(log.log_start(), usize::MAX, log.log_end())
        .expect("read");
    split_batches(read.bytes).expect("batches")
}

#[test]
fn followers_copy_the_leader_and_truncate_an_uncommitted_tail_in_the_next_epoch() {
    let mut nodes: Vec<Node> = (0..3).map(node).collect();
    let mut net = Network::new();
    let mut now = 0;
    elect(&mut nodes, &mut net, 1, 0, &[0, 1, 2]);
    for n in 0..20 {
        produce(&mut nodes, &mut net, 0, n);
    }
    settle(&mut nodes, &mut net, &[], &mut now);
    let end = nodes[0].log.log_end().get();
    assert_eq!(end, 60, "20 batches of 3 records");
    for node in &nodes {
        assert_eq!(node.high_watermark, end, "committed everywhere");
        assert_eq!(contents(&node.log), contents(&nodes[0].log), "same bytes");
    }

    // The leader appends a tail no follower receives, then loses the next election.
    for n in 20..25 {
        produce(&mut nodes, &mut net, 0, n);
    }
    settle(&mut nodes, &mut net, &[0], &mut now);
    assert_eq!(nodes[0].log.log_end().get(), 75);
    assert_eq!(nodes[0].high_watermark, 60, "the tail is not committed");
    elect(&mut nodes, &mut net, 2, 1, &[1, 2]);
    let reports: Vec<(u32, u32, u64)> = nodes[1]
        .reports
        .iter()
        .map(|&(epoch, last_epoch, end)| (epoch.get(), last_epoch.get(), end))
        .collect();
    assert_eq!(reports, vec![(1, 0, 0), (2, 1, 60)]);
    for n in 100..103 {
        produce(&mut nodes, &mut net, 1, n);
    }
    settle(&mut nodes, &mut net, &[0], &mut now);
    assert_eq!(nodes[1].high_watermark, 69);

    // The old leader hears of epoch 2 and follows: its tail goes, the new batches come.
    let out = nodes[0].replica.become_follower(LeaderEpoch::new(2), 1);
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Deposed { epoch } if *epoch == LeaderEpoch::new(1)))
    );
    carry_out(&mut nodes, 0, out, &mut net);
    produce(&mut nodes, &mut net, 1, 103);
    settle(&mut nodes, &mut net, &[], &mut now);
    for node in &nodes {
        assert_eq!(node.log.log_end().get(), 72);
        assert_eq!(node.high_watermark, 72);
        assert_eq!(contents(&node.log), contents(&nodes[1].log), "same bytes");
        let epochs: Vec<(u32, u64)> = node
            .log
            .epoch_history()
            .entries()
            .iter()
            .map(|e| (e.epoch.get(), e.start_offset.get()))
            .collect();
        assert_eq!(epochs, vec![(1, 0), (2, 60)]);
        assert_eq!(
            node.promised,
            LeaderEpoch::new(2),
            "every replica promised epoch 2"
        );
    }
}

#[test]
fn a_new_leader_commits_the_tail_it_inherited_without_a_producer() {
    let mut nodes: Vec<Node> = (0..3).map(node).collect();
    let mut net = Network::new();
    let mut now = 0;
    elect(&mut nodes, &mut net, 1, 0, &[0, 1, 2]);
    for n in 0..5 {
        produce(&mut nodes, &mut net, 0, n);
    }
    settle(&mut nodes, &mut net, &[], &mut now);
    assert_eq!(nodes[1].high_watermark, 15);

    // Two more batches reach the followers, durably, but their acks never reach the leader:
    // nobody learns that they are held by a majority.
    for n in 5..7 {
        produce(&mut nodes, &mut net, 0, n);
    }
    for _ in 0..1_000 {
        for id in 0..3 {
            let node = &mut nodes[id as usize];
            let end = node.log.log_end();
            node.log.wait_synced_blocking(end).expect("sync");
            let out = node.replica.on_synced(end.get());
            carry_out(&mut nodes, id, out, &mut net);
        }
        let Some((from, to, message)) = net.pop_front() else {
            break;
        };
        if to != 0 {
            let node = &mut nodes[to as usize];
            let out = node.replica.on_message(from, message, &node.log);
            carry_out(&mut nodes, to, out, &mut net);
        }
    }
    for follower in &nodes[1..] {
        assert_eq!(follower.log.log_end().get(), 21);
        assert_eq!(follower.high_watermark, 15, "not known committed");
    }

    // The leader dies. Its successor holds the tail, and no producer writes: the marker of
    // its epoch commits the tail by itself.
    elect(&mut nodes, &mut net, 2, 1, &[1, 2]);
    settle(&mut nodes, &mut net, &[0], &mut now);
    for replica in &nodes[1..] {
        assert_eq!(replica.high_watermark, 22, "the tail and the marker commit");
        assert_eq!(
            contents(&replica.log),
            contents(&nodes[1].log),
            "same bytes"
        );
    }
    let last = contents(&nodes[1].log).pop().expect("batches");
    let marker = RecordBatch::decode(last.bytes().clone()).expect("a valid batch");
    assert_eq!(marker.header().base_offset.get(), 21);
    assert_eq!(marker.header().leader_epoch, LeaderEpoch::new(2));
    assert_eq!(marker.control_kind(), Some(ControlKind::EpochStart));

    // A leader whose log is all committed adds nothing.
    elect(&mut nodes, &mut net, 3, 2, &[1, 2]);
    settle(&mut nodes, &mut net, &[0], &mut now);
    assert_eq!(nodes[2].log.log_end().get(), 22);
}

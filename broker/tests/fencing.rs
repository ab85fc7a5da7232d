//! A broker cut off from its controlplane, with real processes: two `floe-broker serve`
//! processes and a controlplane; an unreplicated stream whose small segments tier within
//! moments. Each broker calls the controlplane through a relay of its own; the partition's
//! broker has its relay cut, so its heartbeats fail while its clients still reach it. The
//! controlplane lets its lease lapse and moves the partition to the other broker, at a new
//! epoch.
//!
//! From then on there must be one writer: the old broker acknowledges nothing sent to it
//! after the move (it stopped before the controlplane could consider its lease lapsed), the
//! new one writes and tiers under the higher epoch, and the tier holds no record of the old
//! broker beyond where the new one's history starts. Without fencing the old broker went on
//! acknowledging, and both tiered at epoch 0 (issue 32).

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Bucket, Cluster, Timing, check_acknowledged, read_from_start};
use floe_client::{Client, PartitionId, Producer, ProducerConfig, ProducerRecord, StreamName};

const STREAM: &str = "fenced";

fn name() -> StreamName {
    StreamName::new(STREAM).expect("name")
}

/// Publishes `count` records of about 1 KiB labelled `label` to partition 0 through
/// `client`; returns the acknowledged ones (offset, value) and how many failed.
async fn publish(
    client: &Client,
    label: &str,
    count: usize,
    timeout: Duration,
) -> (Vec<(u64, String)>, usize) {
    let config = ProducerConfig {
        delivery_timeout: timeout,
        linger: Duration::from_millis(1),
        // Batches well below the stream's 64 KiB segments, so that segments seal and tier.
        max_batch_bytes: 16 * 1024,
        // A producer that knows only the cut-off broker has nowhere else to go once it
        // refuses: it gives up after its retries, quickly.
        retry_backoff_max: Duration::from_millis(250),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client, name(), config)
        .await
        .expect("producer");
    let padding = "x".repeat(1000);
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let value = format!("{label}-{i:06}-{padding}");
        let record = ProducerRecord::new(value.clone()).with_partition(PartitionId::new(0));
        pending.push((value, producer.send(record).await.expect("send")));
    }
    let (mut acked, mut failed) = (Vec::new(), 0);
    for (value, delivery) in pending {
        match delivery.await {
            Ok(offset) => acked.push((offset.get(), value)),
            Err(_) => failed += 1,
        }
    }
    let _ = producer.close().await;
    (acked, failed)
}

/// The partition's tier manifest, read straight from the bucket.
async fn manifest(objects: &Bucket) -> floe_tier::manifest::ManifestState {
    let Bucket::Directory(dir) = objects else {
        panic!("a local bucket");
    };
    let store = floe_tier::TierStore::open(
        &format!("file://{}", dir.display()),
        &floe_tier::S3Settings::default(),
    )
    .expect("the bucket");
    let path = floe_tier::PartitionPath::new(STREAM, 0).expect("a partition path");
    floe_tier::manifest::ManifestLog::new(store, path)
        .load()
        .await
        .expect("the manifest")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_cut_off_from_the_controlplane_stops_writing_before_its_partition_moves() {
    let timing = Timing::default();
    let lease = timing.lease;
    let cluster = Cluster::start_with_links(2, timing).await;
    cluster.create_tiering_stream(STREAM).await;
    let before_move = cluster.partition(STREAM, 0).await.expect("the partition");
    let (old, old_epoch) = (before_move.leader.expect("a leader"), before_move.epoch);
    let old_client = cluster.client(old).await;
    let (acked, failed) = publish(&old_client, "before", 300, Duration::from_secs(10)).await;
    assert_eq!(failed, 0, "a healthy broker acknowledges everything");
    let before_end = acked
        .iter()
        .map(|(offset, _)| offset + 1)
        .max()
        .unwrap_or(0);
    cluster
        .wait_for("the first records tiered", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            (p.tier?.end >= before_end / 2).then_some(())
        })
        .await;

    // Cut the leader off from the controlplane; its clients still reach it, and keep
    // publishing to it alone while the controlplane moves the partition.
    let isolated = cluster.index_of(old);
    cluster.cut_from_controlplane(isolated);
    let cut_at = Instant::now();
    eprintln!("cut broker {old} (epoch {old_epoch}) off from the controlplane");
    let during = {
        let client = old_client.clone();
        tokio::spawn(async move { publish(&client, "during", 300, Duration::from_secs(6)).await })
    };
    let (new, new_epoch) = cluster.leader_after(STREAM, 0, old_epoch).await;
    eprintln!(
        "moved to broker {new} at epoch {new_epoch}, {:?} after the cut (lease {lease:?})",
        cut_at.elapsed()
    );
    assert_ne!(new, old, "the partition stayed on the cut-off broker");
    let (during, _) = during.await.expect("publishing task");
    eprintln!(
        "the cut-off broker acknowledged {} records during the cut",
        during.len()
    );

    // Sent to the old broker once the partition moved: none may be acknowledged.
    let (late, late_failed) = publish(&old_client, "late", 200, Duration::from_secs(3)).await;
    eprintln!(
        "after the move the cut-off broker acknowledged {} records and refused {late_failed}",
        late.len()
    );
    assert!(
        late.is_empty(),
        "the cut-off broker acknowledged {} records sent after its partition moved to broker \
         {new} (epoch {new_epoch}): two writers, first at offset {:?}",
        late.len(),
        late.first().map(|(offset, _)| offset)
    );
    old_client.close().await;

    // The new owner takes writes and tiers them under its epoch.
    let new_client = cluster.client(new).await;
    let (written, failed) = publish(&new_client, "new", 400, Duration::from_secs(10)).await;
    assert_eq!(failed, 0, "the new owner acknowledges everything");
    let new_start = written
        .iter()
        .map(|(offset, _)| *offset)
        .min()
        .expect("acked");
    let new_end = written
        .iter()
        .map(|(offset, _)| offset + 1)
        .max()
        .expect("acked");

    // Heal: the old broker learns that the partition moved; it must not tier over the new
    // owner either.
    cluster.heal_link(isolated);
    cluster
        .wait_for("the new owner to tier its records", async |c: &Cluster| {
            let p = c.partition(STREAM, 0).await?;
            (p.epoch == new_epoch && p.tier?.end >= new_start + 200).then_some(())
        })
        .await;
    // Back in touch, the old broker learns that the partition moved and lets it go (its
    // metadata stopped naming a leader when its lease lapsed; now it lists it no more).
    let old_client = cluster.client(old).await;
    cluster
        .wait_for(
            "the old broker to let the partition go",
            async |_: &Cluster| {
                let info = old_client.stream(&name()).await.ok()?;
                let held = info.partitions.iter().any(|p| p.id == PartitionId::new(0));
                (!held).then_some(())
            },
        )
        .await;
    old_client.close().await;
    let state = manifest(&cluster.objects).await;
    assert!(
        state.epoch >= new_epoch,
        "the manifest's epoch is {}, below the new owner's {new_epoch}",
        state.epoch
    );
    for segment in &state.segments {
        if segment.epoch < new_epoch {
            assert!(
                segment.next_offset <= new_start,
                "segment {} of epoch {} reaches {} in the tier, past where the new owner's \
                 history starts ({new_start})",
                segment.name,
                segment.epoch,
                segment.next_offset
            );
        } else {
            assert_eq!(segment.epoch, new_epoch, "segment {}", segment.name);
        }
    }
    assert!(
        state
            .segments
            .iter()
            .any(|s| s.epoch == new_epoch && s.base_offset >= new_start),
        "the new owner tiered nothing under epoch {new_epoch}"
    );

    // One history: the new owner's records at their offsets, nothing sent late.
    let log = read_from_start(&new_client, STREAM, |records| {
        records
            .last()
            .is_some_and(|(offset, _)| offset + 1 >= new_end)
    })
    .await;
    check_acknowledged(&written, &log);
    assert!(
        !log.iter().any(|(_, value)| value.starts_with("late-")),
        "a record sent after the move is in the partition's history"
    );
    assert_eq!(
        cluster.partition(STREAM, 0).await.map(|p| p.epoch),
        Some(new_epoch),
        "the partition moved again"
    );
    new_client.close().await;
    cluster.shutdown().await;
}

/// Draining a broker moves its unreplicated partition nowhere: the records not yet tiered
/// exist only on that broker, and a new owner would start from the tier's end. Before, the
/// controlplane moved the partition to the other broker at a new epoch, and every
/// acknowledged record of the old broker's active segment was gone. It stays, keeps
/// serving, and moves only if its broker dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_broker_keeps_its_unreplicated_partition_and_every_record() {
    let timing = Timing::default();
    let reconcile = timing.reconcile;
    let cluster = Cluster::start(2, timing).await;
    cluster.create_tiering_stream(STREAM).await;
    let before = cluster.partition(STREAM, 0).await.expect("the partition");
    let (owner, epoch) = (before.leader.expect("a leader"), before.epoch);
    let client = cluster.client(owner).await;
    let (mut acked, failed) = publish(&client, "before", 300, Duration::from_secs(10)).await;
    assert_eq!(failed, 0, "a healthy broker acknowledges everything");

    let drained = cluster.rest.drain_broker(owner).await.expect("drain");
    assert_eq!(drained.state, floe_wire::admin::BrokerState::Draining);
    // Many reconciliation passes, each of which would have moved it.
    tokio::time::sleep(reconcile * 30).await;
    let during = cluster.partition(STREAM, 0).await.expect("the partition");
    assert_eq!(
        (during.leader, during.epoch),
        (Some(owner), epoch),
        "an unreplicated partition moved off a draining broker: {during:?}\n{}",
        cluster.diagnostics()
    );

    // Publishing goes on, and every acknowledged record reads back, once, in order.
    let (more, failed) = publish(&client, "draining", 100, Duration::from_secs(10)).await;
    assert_eq!(
        failed, 0,
        "a draining broker still serves its unreplicated partition"
    );
    acked.extend(more);
    let log = read_from_start(&client, STREAM, |log| log.len() >= acked.len()).await;
    check_acknowledged(&acked, &log);
    client.close().await;
    cluster.shutdown().await;
}

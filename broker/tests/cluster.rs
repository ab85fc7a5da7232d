//! Three real broker processes (`floe-broker serve --controlplane`) and a controlplane on
//! SQLite: the brokers register, a stream's partitions are spread over them, each serves the
//! partition it leads; one broker is SIGKILLed, its lease lapses, it is reported dead and
//! its partition is placed on a live broker under a new epoch, whose new log continues the
//! offsets of the partition's tiered history; restarted, the dead broker registers again
//! under the id kept in its data directory.

mod common;

use std::path::Path;
use std::time::Duration;

use common::cluster::{Cluster, Timing};
use floe_client::{
    Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer,
    ProducerConfig, ProducerRecord, StreamName,
};
use floe_wire::BrokerId;
use floe_wire::admin::{BrokerState, CreateStreamRequest, StreamDescription};

async fn client(endpoint: &str, ca: &Path) -> Client {
    let mut config = ClientConfig::new(endpoint.to_string(), "localhost", ca.to_path_buf());
    config.request_timeout = Duration::from_secs(10);
    Client::connect(config).await.expect("connect to a broker")
}

/// Publishes ten records to `partition` through `endpoint`, one batch each, and reads them
/// back; returns the first one's offset.
async fn publish_and_read(
    endpoint: &str,
    ca: &Path,
    stream: &StreamName,
    partition: u32,
) -> floe_client::Offset {
    let client = client(endpoint, ca).await;
    let producer = Producer::new(&client, stream.clone(), ProducerConfig::default())
        .await
        .expect("a producer");
    let mut first = None;
    for i in 0..10 {
        let record = ProducerRecord::new(format!("p{partition}-{i}"))
            .with_partition(PartitionId::new(partition));
        let offset = producer
            .send(record)
            .await
            .expect("accepted")
            .await
            .expect("acknowledged by the partition's leader");
        first.get_or_insert(offset);
    }
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(partition),
        FetchPosition::Offset(first.expect("an offset")),
        ConsumerConfig::default(),
    );
    for i in 0..10 {
        let record = consumer.next().await.expect("a record");
        assert_eq!(&record.value[..], format!("p{partition}-{i}").as_bytes());
    }
    client.close().await;
    first.expect("an offset")
}

/// The first record of `partition` read through `endpoint`.
async fn first_record(endpoint: &str, ca: &Path, stream: &StreamName, partition: u32) -> Vec<u8> {
    let client = client(endpoint, ca).await;
    let mut consumer = Consumer::new(
        client.clone(),
        stream.clone(),
        PartitionId::new(partition),
        FetchPosition::Earliest,
        ConsumerConfig::default(),
    );
    let value = consumer.next().await.expect("a record").value.to_vec();
    client.close().await;
    value
}

fn endpoint_of(brokers: &[floe_wire::admin::BrokerInfo], id: BrokerId) -> String {
    brokers
        .iter()
        .find(|b| b.broker_id == id)
        .map(|b| b.client_endpoint.to_string())
        .expect("the leader is a known broker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_spread_partitions_and_a_killed_one_is_replaced() {
    let mut cluster = Cluster::start(
        3,
        Timing {
            reconcile: Duration::from_millis(200),
            ..Timing::default()
        },
    )
    .await;
    let rest = &cluster.rest;
    let ca = cluster.certificates.files.ca.clone();

    let stream = StreamName::new("spread").expect("name");
    rest.create_stream(&CreateStreamRequest {
        name: stream.clone(),
        partitions: 3,
        replication_factor: Some(1),
        ack_mode: None,
        // A segment per batch or two: sealed segments reach the tier within the test.
        segment: floe_wire::admin::SegmentSettings {
            bytes: Some(256),
            age_ms: None,
        },
        retention: Default::default(),
    })
    .await
    .expect("create");
    let description: StreamDescription = rest.stream("spread").await.expect("describe");
    let mut leaders: Vec<BrokerId> = description
        .partitions
        .iter()
        .map(|p| p.leader.expect("every partition has a leader"))
        .collect();
    leaders.sort();
    leaders.dedup();
    assert_eq!(
        leaders.len(),
        3,
        "one partition per broker: {description:?}"
    );

    // Each partition is served by its leader; the epochs it reports reach the controlplane.
    let list = rest.brokers().await.expect("brokers").brokers;
    for p in &description.partitions {
        let endpoint = endpoint_of(&list, p.leader.expect("leader"));
        publish_and_read(&endpoint, &ca, &stream, p.partition.get()).await;
    }
    let tiered = cluster
        .wait_for(
            "every leader's report of its records, mostly tiered",
            async |c: &Cluster| {
                let d = c.rest.stream("spread").await.ok()?;
                d.partitions
                    .iter()
                    .all(|p| {
                        p.hot.is_some_and(|h| h.end == 10) && p.tier.is_some_and(|t| t.end >= 5)
                    })
                    .then_some(d.partitions[0].tier.map(|t| t.end))
            },
        )
        .await
        .expect("partition 0's tiered range");

    // SIGKILL the leader of partition 0: its lease lapses and it is reported dead.
    let victim = description.partitions[0].leader.expect("leader");
    let process = cluster.index_of(victim);
    cluster.kill(process);
    cluster
        .wait_for("the killed broker reported dead", async |c: &Cluster| {
            let list = c.rest.brokers().await.ok()?.brokers;
            list.iter()
                .any(|b| b.broker_id == victim && b.state == BrokerState::Dead)
                .then_some(())
        })
        .await;

    // Its partition moves to a live broker under a new epoch, which serves it.
    let moved = cluster
        .wait_for("partition 0 on a live broker", async |c: &Cluster| {
            let p = c.partition("spread", 0).await?;
            (p.leader.is_some_and(|l| l != victim) && p.epoch > description.partitions[0].epoch)
                .then_some(p)
        })
        .await;
    let endpoint = cluster.endpoint(moved.leader.expect("leader")).await;
    // The new leader's log continues where the tiered history ends: no offset is reused, and
    // the history is still readable through it.
    let first = publish_and_read(&endpoint, &ca, &stream, 0).await;
    assert!(
        first.get() >= tiered,
        "offset {first} reused below the tier's end {tiered}"
    );
    assert_eq!(first_record(&endpoint, &ca, &stream, 0).await, b"p0-0");

    // Restarted on its data directory, it comes back under the same id.
    cluster.restart(process);
    cluster
        .wait_for("the restarted broker live again", async |c: &Cluster| {
            let list = c.rest.brokers().await.ok()?.brokers;
            list.iter()
                .any(|b| b.broker_id == victim && b.state == BrokerState::Live)
                .then_some(())
        })
        .await;
    let list = cluster.rest.brokers().await.expect("brokers").brokers;
    assert_eq!(list.len(), 3, "no new broker id: {list:?}");
    cluster.shutdown().await;
}

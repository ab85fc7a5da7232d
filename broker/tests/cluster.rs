//! Three real broker processes (`floe-broker serve --controlplane`) and a controlplane on
//! SQLite: the brokers register, a stream's partitions are spread over them, each serves the
//! partition it leads; one broker is SIGKILLed, its lease lapses, it is reported dead and
//! its partition is placed on a live broker under a new epoch, whose new log continues the
//! offsets of the partition's tiered history; restarted, the dead broker registers again
//! under the id kept in its data directory.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::install_crypto;
use floe_broker::tls::DevCertificates;
use floe_client::rest::Controlplane;
use floe_client::{
    Client, ClientConfig, Consumer, ConsumerConfig, FetchPosition, PartitionId, Producer,
    ProducerConfig, ProducerRecord, StreamName,
};
use floe_wire::BrokerId;
use floe_wire::admin::{BrokerState, CreateStreamRequest, StreamDescription};

const DEADLINE: Duration = Duration::from_secs(30);

/// A `floe-broker serve` process managed by the controlplane; killed on drop.
struct ServeProcess {
    child: Child,
    log: PathBuf,
}

impl ServeProcess {
    fn start(
        dir: &Path,
        certificates: &DevCertificates,
        controlplane: &str,
        objects: &Path,
    ) -> ServeProcess {
        std::fs::create_dir_all(dir).expect("broker directory");
        let log = dir.join("broker.log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_floe-broker"))
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen", "127.0.0.1:0"])
            .arg("--cert")
            .arg(&certificates.server.cert)
            .arg("--key")
            .arg(&certificates.server.key)
            .args(["--controlplane", controlplane])
            .args(["--tier-cache-disk", "0", "--tier-upload-interval", "200ms"])
            .arg("--object-store")
            .arg(format!("file://{}", objects.display()))
            .env("FLOE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn floe-broker serve");
        ServeProcess { child, log }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn wait_for<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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
    install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = floe_controlplane::Config::new(floe_controlplane::Database::Sqlite {
        path: dir.path().join("controlplane.db"),
    });
    config.listen = "127.0.0.1:0".parse().expect("address");
    config.lease = Duration::from_secs(2);
    config.heartbeat_interval = Duration::from_millis(300);
    config.reconcile_interval = Duration::from_millis(200);
    config.default_replication_factor = 1;
    let running = floe_controlplane::Controlplane::start(config)
        .await
        .expect("controlplane");
    let url = format!("http://{}", running.local_addr());
    let rest = Controlplane::new(&url, None).expect("REST client");
    let certificates = DevCertificates::ensure(&dir.path().join("tls")).expect("certificates");
    // One bucket for the cluster.
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).expect("objects directory");
    let start = |i: usize| {
        ServeProcess::start(
            &dir.path().join(format!("b{i}")),
            &certificates,
            &url,
            &objects,
        )
    };
    let mut brokers: Vec<ServeProcess> = (0..3).map(start).collect();
    wait_for("three live brokers", async || {
        let list = rest.brokers().await.ok()?.brokers;
        (list.iter().filter(|b| b.state == BrokerState::Live).count() == 3).then_some(())
    })
    .await;

    let stream = StreamName::new("spread").expect("name");
    rest.create_stream(&CreateStreamRequest {
        name: stream.clone(),
        partitions: 3,
        replication_factor: None,
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
        publish_and_read(&endpoint, &certificates.ca, &stream, p.partition.get()).await;
    }
    let tiered = wait_for(
        "every leader's report of its records, mostly tiered",
        async || {
            let d = rest.stream("spread").await.ok()?;
            d.partitions
                .iter()
                .all(|p| p.hot.is_some_and(|h| h.end == 10) && p.tier.is_some_and(|t| t.end >= 5))
                .then_some(d.partitions[0].tier.map(|t| t.end))
        },
    )
    .await
    .expect("partition 0's tiered range");

    // SIGKILL the leader of partition 0: its lease lapses and it is reported dead.
    let victim = description.partitions[0].leader.expect("leader");
    let victim_index = list
        .iter()
        .position(|b| b.broker_id == victim)
        .expect("victim listed");
    // Brokers register in start order, but ids come from the controlplane: find the process
    // by the endpoint it logged.
    let victim_endpoint = endpoint_of(&list, victim);
    let process = brokers
        .iter()
        .position(|b| b.log().contains(&victim_endpoint))
        .unwrap_or(victim_index);
    brokers[process].kill();
    wait_for("the killed broker reported dead", async || {
        let list = rest.brokers().await.ok()?.brokers;
        list.iter()
            .any(|b| b.broker_id == victim && b.state == BrokerState::Dead)
            .then_some(())
    })
    .await;

    // Its partition moves to a live broker under a new epoch, which serves it.
    let moved = wait_for("partition 0 on a live broker", async || {
        let d = rest.stream("spread").await.ok()?;
        let p = d.partitions[0].clone();
        (p.leader.is_some_and(|l| l != victim) && p.epoch > description.partitions[0].epoch)
            .then_some(p)
    })
    .await;
    let list = rest.brokers().await.expect("brokers").brokers;
    let endpoint = endpoint_of(&list, moved.leader.expect("leader"));
    // The new leader's log continues where the tiered history ends: no offset is reused, and
    // the history is still readable through it.
    let first = publish_and_read(&endpoint, &certificates.ca, &stream, 0).await;
    assert!(
        first.get() >= tiered,
        "offset {first} reused below the tier's end {tiered}"
    );
    assert_eq!(
        first_record(&endpoint, &certificates.ca, &stream, 0).await,
        b"p0-0"
    );

    // Restarted on its data directory, it comes back under the same id.
    brokers[process] = start(process);
    wait_for("the restarted broker live again", async || {
        let list = rest.brokers().await.ok()?.brokers;
        list.iter()
            .any(|b| b.broker_id == victim && b.state == BrokerState::Live)
            .then_some(())
    })
    .await;
    let list = rest.brokers().await.expect("brokers").brokers;
    assert_eq!(list.len(), 3, "no new broker id: {list:?}");
    running.shutdown().await;
}

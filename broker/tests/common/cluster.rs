//! A real cluster on loopback for tests: a controlplane (in this process, SQLite) and
//! `floe-broker serve` processes with peer ports, sharing one local-directory bucket. Brokers
//! can be SIGKILLed and restarted on their data directories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use floe_broker::tls::ClusterCertificates;
use floe_client::rest::Controlplane;
use floe_client::{Client, ClientConfig};
use floe_wire::admin::{BrokerState, CreateStreamRequest, OffsetRange, PartitionDescription};
use floe_wire::{BrokerId, LeaderEpoch};

use super::install_crypto;
use super::link::Link;

/// How long a cluster operation may take before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Lease settings for fast failover in tests.
pub struct Timing {
    pub lease: Duration,
    pub heartbeat: Duration,
    pub reconcile: Duration,
    /// A replicated partition's member on a broker dead this long is replaced.
    pub replace_dead_after: Duration,
    /// How long the peer certificates the controlplane issues are valid.
    pub peer_certificate_lifetime: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease: Duration::from_secs(2),
            heartbeat: Duration::from_millis(300),
            reconcile: Duration::from_millis(100),
            // Tests that kill and restart brokers expect them back in their sets.
            replace_dead_after: Duration::from_secs(3600),
            peer_certificate_lifetime: Duration::from_secs(24 * 3600),
        }
    }
}

/// One `floe-broker read-replica` process; killed on drop.
pub struct ReplicaProcess {
    child: Option<Child>,
    pub id: String,
    /// Where it serves `/metrics`.
    pub metrics: String,
    pub dir: PathBuf,
}

impl ReplicaProcess {
    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("replica.log")).unwrap_or_default()
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the brokers tier: a local directory, or a bucket on an S3-compatible server.
#[derive(Debug, Clone)]
pub enum Bucket {
    Directory(PathBuf),
    /// `url` is `s3://bucket[/prefix]` on the server at `endpoint` (plain HTTP).
    S3 {
        url: String,
        endpoint: String,
    },
}

impl Bucket {
    /// A new bucket on the S3-compatible server `FLOE_TEST_S3_ENDPOINT` names, objects
    /// under `prefix`; `None` when the variable is unset.
    pub async fn s3(name: &str, prefix: &str) -> Option<Bucket> {
        let endpoint = std::env::var("FLOE_TEST_S3_ENDPOINT").ok()?;
        let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
        let response = super::http_request(authority, "PUT", &format!("/{name}")).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        Some(Bucket::S3 {
            url: format!("s3://{name}/{prefix}"),
            endpoint,
        })
    }

    /// The flags that point `floe-broker` at the bucket.
    pub fn args(&self) -> Vec<String> {
        match self {
            Bucket::Directory(dir) => {
                vec!["--object-store".into(), format!("file://{}", dir.display())]
            }
            Bucket::S3 { url, endpoint } => vec![
                "--object-store".into(),
                url.clone(),
                "--s3-endpoint".into(),
                endpoint.clone(),
                "--s3-allow-http".into(),
            ],
        }
    }

    /// The environment that gives `floe-broker` the brokers' (read-write) credentials.
    pub fn env(&self) -> Vec<(String, String)> {
        match self {
            Bucket::Directory(_) => Vec::new(),
            Bucket::S3 { .. } => [
                ("AWS_ACCESS_KEY_ID", "floe-broker-read-write"),
                ("AWS_SECRET_ACCESS_KEY", "floe-test"),
                ("AWS_REGION", "us-east-1"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        }
    }
}

/// Where brokers' peer-port certificates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerCertificates {
    /// The controlplane holds the peer CA's key and issues them after registration.
    Issued,
    /// Each broker is given one naming it (`floe-broker certs --broker-id`): process `i`
    /// is broker `i + 1`.
    Static,
}

/// What one broker process gets beyond the cluster's own settings.
#[derive(Debug, Clone, Default)]
pub struct BrokerSetup {
    /// Its data directory, instead of `b{i}/data` under the cluster's directory: e.g. a
    /// small filesystem the test mounted for it.
    pub data_dir: Option<PathBuf>,
    /// More `floe-broker serve` flags: ones the cluster does not give (a flag given twice
    /// stops the start), such as `--disk-high-water`, which wins over the environment.
    pub args: Vec<String>,
}

/// One `floe-broker serve` process; killed on drop.
pub struct BrokerProcess {
    child: Option<Child>,
    /// Its log (`broker.log`) and, unless its setup names another, its data directory.
    pub dir: PathBuf,
    pub data_dir: PathBuf,
}

impl BrokerProcess {
    fn start(
        dir: &Path,
        ports: (u16, u16, u16),
        certificates: &ClusterCertificates,
        peer_certificate: Option<floe_broker::tls::CertificatePaths>,
        controlplane: &str,
        objects: &Bucket,
        setup: &BrokerSetup,
    ) -> BrokerProcess {
        std::fs::create_dir_all(dir).expect("broker directory");
        let data_dir = setup.data_dir.clone().unwrap_or_else(|| dir.join("data"));
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("broker.log"))
            .expect("log file");
        let log_filter = std::env::var("FLOE_TEST_BROKER_LOG").unwrap_or_else(|_| "info".into());
        let mut command = Command::new(super::broker_program());
        command.arg("serve");
        if let Some(peer) = peer_certificate {
            command
                .arg("--peer-cert")
                .arg(peer.cert)
                .arg("--peer-key")
                .arg(peer.key);
        }
        let child = command
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", ports.0))
            .arg("--peer-listen")
            .arg(format!("127.0.0.1:{}", ports.1))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", ports.2))
            .arg("--cert")
            .arg(&certificates.files.server.cert)
            .arg("--key")
            .arg(&certificates.files.server.key)
            .arg("--peer-ca")
            .arg(&certificates.files.ca)
            .args(["--controlplane", controlplane])
            // The cluster's controlplane runs without authentication too; authentication
            // is tested on its own (`auth.rs`).
            .arg("--insecure-no-auth")
            .args(["--tier-cache-disk", "0", "--tier-upload-interval", "200ms"])
            .args(objects.args())
            .args(&setup.args)
            .envs(objects.env())
            .env("FLOE_LOG", log_filter)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn floe-broker serve");
        BrokerProcess {
            child: Some(child),
            dir: dir.to_path_buf(),
            data_dir,
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// "killed", "exited" (not yet reaped) or "running", from the process table.
    pub fn state(&self) -> &'static str {
        let Some(child) = &self.child else {
            return "killed";
        };
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        match stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().chars().next())
        {
            Some(Some('Z' | 'X')) | None => "exited",
            _ => "running",
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
    }

    /// The id the controlplane gave this broker, once it registered.
    pub fn broker_id(&self) -> Option<BrokerId> {
        let bytes = std::fs::read(self.data_dir.join("broker.json")).ok()?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let id = value.get("broker_id")?.as_u64()?;
        Some(BrokerId::new(u32::try_from(id).ok()?))
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A controlplane and `n` brokers.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    controlplane: Option<floe_controlplane::Running>,
    pub rest: Controlplane,
    pub url: String,
    pub certificates: ClusterCertificates,
    peer_certificates: PeerCertificates,
    pub objects: Bucket,
    pub brokers: Vec<BrokerProcess>,
    /// Each broker process's own settings, by index.
    setups: Vec<BrokerSetup>,
    /// Each broker's client, peer and metrics ports, kept across restarts as a deployment
    /// keeps them.
    ports: Vec<(u16, u16, u16)>,
    /// Each broker's relay to the controlplane, when the cluster was started with them
    /// ([`Cluster::start_with_links`]); empty otherwise: brokers call the controlplane directly.
    links: Vec<Link>,
}

/// A TCP port free at the moment.
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A UDP port free at the moment.
fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// Starts the controlplane and `n` brokers and waits until all hold a lease.
    pub async fn start(n: usize, timing: Timing) -> Cluster {
        Cluster::start_inner(n, timing, None, PeerCertificates::Issued, None, false).await
    }

    /// [`Cluster::start`] with each broker calling the controlplane through a relay of its
    /// own, so that a test can cut one broker off from the controlplane while its clients
    /// and peers still reach it ([`Cluster::cut_from_controlplane`]).
    pub async fn start_with_links(n: usize, timing: Timing) -> Cluster {
        Cluster::start_inner(n, timing, None, PeerCertificates::Issued, None, true).await
    }

    /// [`Cluster::start`] with the brokers tiering to `bucket` rather than a directory.
    pub async fn start_on_bucket(n: usize, timing: Timing, bucket: Bucket) -> Cluster {
        Cluster::start_with_setup(n, timing, bucket, Vec::new()).await
    }

    /// [`Cluster::start_on_bucket`] with broker process `i` started with `setups[i]` (the
    /// defaults for those it does not reach).
    pub async fn start_with_setup(
        n: usize,
        timing: Timing,
        bucket: Bucket,
        setups: Vec<BrokerSetup>,
    ) -> Cluster {
        Cluster::start_inner_with(
            n,
            timing,
            None,
            PeerCertificates::Issued,
            Some(bucket),
            setups,
            false,
        )
        .await
    }

    /// [`Cluster::start`] with peer certificates from `source`.
    pub async fn start_with_peer_certificates(
        n: usize,
        timing: Timing,
        source: PeerCertificates,
    ) -> Cluster {
        Cluster::start_inner(n, timing, None, source, None, false).await
    }

    /// [`Cluster::start`] with the controlplane's autoscaler running read replicas as
    /// `floe-broker read-replica` child processes (the local driver), deciding every `interval`.
    pub async fn start_autoscaled(n: usize, timing: Timing, interval: Duration) -> Cluster {
        Cluster::start_inner(
            n,
            timing,
            Some(interval),
            PeerCertificates::Issued,
            None,
            false,
        )
        .await
    }

    async fn start_inner(
        n: usize,
        timing: Timing,
        autoscale: Option<Duration>,
        peer_certificates: PeerCertificates,
        bucket: Option<Bucket>,
        links: bool,
    ) -> Cluster {
        Cluster::start_inner_with(
            n,
            timing,
            autoscale,
            peer_certificates,
            bucket,
            Vec::new(),
            links,
        )
        .await
    }

    async fn start_inner_with(
        n: usize,
        timing: Timing,
        autoscale: Option<Duration>,
        peer_certificates: PeerCertificates,
        bucket: Option<Bucket>,
        mut setups: Vec<BrokerSetup>,
        links: bool,
    ) -> Cluster {
        install_crypto();
        setups.resize_with(n, BrokerSetup::default);
        let dir = tempfile::tempdir().expect("tempdir");
        let certificates =
            ClusterCertificates::ensure(&dir.path().join("tls")).expect("certificates");
        let objects = bucket.unwrap_or_else(|| {
            let objects = dir.path().join("objects");
            std::fs::create_dir_all(&objects).expect("objects directory");
            Bucket::Directory(objects)
        });
        let mut config = floe_controlplane::Config::new(floe_controlplane::Database::Sqlite {
            path: dir.path().join("controlplane.db"),
        });
        config.listen = "127.0.0.1:0".parse().expect("address");
        config.lease = timing.lease;
        config.heartbeat_interval = timing.heartbeat;
        config.reconcile_interval = timing.reconcile;
        config.replace_dead_after = timing.replace_dead_after;
        config.peer_certificate_lifetime = timing.peer_certificate_lifetime;
        if peer_certificates == PeerCertificates::Issued {
            let ca = floe_controlplane::peer_ca::PeerCa::load(
                &certificates.files.ca,
                &certificates.ca_key,
            )
            .expect("the peer CA");
            config.peer_ca = Some(std::sync::Arc::new(ca));
        }
        if let Some(interval) = autoscale {
            let path = |p: &Path| p.display().to_string();
            config.autoscale_interval = interval;
            let mut args: Vec<String> = vec![
                "read-replica".into(),
                "--insecure-no-auth".into(),
                "--data-dir".into(),
                path(&dir.path().join("replicas")),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--cert".into(),
                path(&certificates.files.server.cert),
                "--key".into(),
                path(&certificates.files.server.key),
                "--broker-ca".into(),
                path(&certificates.files.ca),
                "--tier-cache-disk".into(),
                "0".into(),
            ];
            args.extend(objects.args());
            let mut env = objects.env();
            env.push((
                "FLOE_LOG".into(),
                std::env::var("FLOE_TEST_BROKER_LOG").unwrap_or_else(|_| "warn".into()),
            ));
            config.read_replicas = floe_controlplane::ReadReplicaDriverConfig::Local {
                program: super::broker_program(),
                args,
                env,
            };
        }
        let controlplane = floe_controlplane::Controlplane::start(config)
            .await
            .expect("controlplane");
        let url = format!("http://{}", controlplane.local_addr());
        let rest = Controlplane::new(&url, None).expect("REST client");
        let mut relays = Vec::new();
        if links {
            for _ in 0..n {
                relays.push(Link::start(controlplane.local_addr()).await);
            }
        }
        let mut cluster = Cluster {
            controlplane: Some(controlplane),
            rest,
            url,
            certificates,
            peer_certificates,
            objects,
            brokers: Vec::new(),
            setups,
            ports: (0..n)
                .map(|_| (free_port(), free_port(), free_tcp_port()))
                .collect(),
            links: relays,
            dir,
        };
        for i in 0..n {
            let broker = cluster.spawn(i);
            cluster.brokers.push(broker);
        }
        cluster
            .wait_for("every broker live", async |c: &Cluster| {
                let list = c.rest.brokers().await.ok()?.brokers;
                // Live in the controlplane, and each process has stored its id (it does so
                // just after registering), so tests can map ids to processes at once.
                let live = list.iter().filter(|b| b.state == BrokerState::Live).count();
                let known = c.brokers.iter().all(|b| b.broker_id().is_some());
                (live == n && known).then_some(())
            })
            .await;
        cluster
    }

    fn spawn(&self, i: usize) -> BrokerProcess {
        let peer_certificate = match self.peer_certificates {
            PeerCertificates::Issued => None,
            PeerCertificates::Static => {
                let id = BrokerId::new(u32::try_from(i + 1).expect("a broker id"));
                Some(
                    self.certificates
                        .peer_certificate(id)
                        .expect("a peer certificate"),
                )
            }
        };
        BrokerProcess::start(
            &self.dir.path().join(format!("b{i}")),
            self.ports[i],
            &self.certificates,
            peer_certificate,
            &self.controlplane_url(i),
            &self.objects,
            &self.setups[i],
        )
    }

    /// Where broker process `i` calls the controlplane: its relay, if it has one.
    fn controlplane_url(&self, i: usize) -> String {
        self.links
            .get(i)
            .map_or_else(|| self.url.clone(), Link::url)
    }

    /// Cuts broker process `i` off from the controlplane: its calls hang, while its clients
    /// and peers still reach it. Needs [`Cluster::start_with_links`].
    pub fn cut_from_controlplane(&self, i: usize) {
        self.links[i].cut();
    }

    /// Ends [`Cluster::cut_from_controlplane`].
    pub fn heal_link(&self, i: usize) {
        self.links[i].heal();
    }

    /// SIGKILLs broker process `i`.
    pub fn kill(&mut self, i: usize) {
        self.brokers[i].kill();
    }

    /// Starts broker process `i` again on its data directory.
    pub fn restart(&mut self, i: usize) {
        self.brokers[i].kill();
        self.brokers[i] = self.spawn(i);
    }

    /// Starts broker process `i` again on its data directory with `peer_certificate` as its
    /// own peer certificate.
    pub fn restart_with_peer_certificate(
        &mut self,
        i: usize,
        peer_certificate: floe_broker::tls::CertificatePaths,
    ) {
        self.brokers[i].kill();
        self.brokers[i] = BrokerProcess::start(
            &self.dir.path().join(format!("b{i}")),
            self.ports[i],
            &self.certificates,
            Some(peer_certificate),
            &self.controlplane_url(i),
            &self.objects,
            &self.setups[i],
        );
    }

    /// The UDP port of broker process `i`'s peer port (its replication traffic, both ways).
    pub fn peer_port(&self, i: usize) -> u16 {
        self.ports[i].1
    }

    /// The process index of broker `id`.
    pub fn index_of(&self, id: BrokerId) -> usize {
        self.brokers
            .iter()
            .position(|b| b.broker_id() == Some(id))
            .expect("a broker process with that id")
    }

    /// Each broker process's state and the end of its log, for a failed wait: the test's
    /// directory, logs included, is gone once it fails.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, broker) in self.brokers.iter().enumerate() {
            let log = broker.log();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            out.push_str(&format!(
                "--- broker {i} (ports {:?}): {}, id {:?}; last log lines:\n",
                self.ports[i],
                broker.state(),
                broker.broker_id()
            ));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Polls `probe` every 50 ms until it answers, failing the test after [`DEADLINE`].
    pub async fn wait_for<T>(
        &self,
        what: &str,
        mut probe: impl AsyncFnMut(&Cluster) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(value) = probe(self).await {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The partition as the controlplane describes it.
    pub async fn partition(&self, stream: &str, partition: u32) -> Option<PartitionDescription> {
        let description = self.rest.stream(stream).await.ok()?;
        description
            .partitions
            .into_iter()
            .find(|p| p.partition.get() == partition)
    }

    /// Creates `name`, one partition replicated on three brokers with the default settings,
    /// and waits for its first leader; returns it and its epoch.
    pub async fn create_replicated(&self, name: &str) -> (BrokerId, LeaderEpoch) {
        let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
            "name": name, "partitions": 1, "replication_factor": 3,
        }))
        .expect("request");
        self.rest.create_stream(&request).await.expect("create");
        self.leader_after(name, 0, LeaderEpoch::ZERO).await
    }

    /// Waits for a leader of `partition` in an epoch above `after`.
    pub async fn leader_after(
        &self,
        stream: &str,
        partition: u32,
        after: LeaderEpoch,
    ) -> (BrokerId, LeaderEpoch) {
        self.wait_for("a leader", async |c: &Cluster| {
            let p = c.partition(stream, partition).await?;
            let leader = p.leader?;
            (p.epoch > after).then_some((leader, p.epoch))
        })
        .await
    }

    /// Where clients reach broker `id`.
    pub async fn endpoint(&self, id: BrokerId) -> String {
        let list = self.rest.brokers().await.expect("brokers").brokers;
        list.iter()
            .find(|b| b.broker_id == id)
            .map(|b| b.client_endpoint.to_string())
            .expect("a known broker")
    }

    /// A client of broker `id`.
    pub async fn client(&self, id: BrokerId) -> Client {
        let mut config = ClientConfig::new(
            self.endpoint(id).await,
            "localhost",
            self.certificates.files.ca.clone(),
        );
        config.request_timeout = Duration::from_secs(5);
        config.reconnect_attempts = 0;
        Client::connect(config).await.expect("connect to a broker")
    }

    /// Every broker process's client address, comma-separated: a client's `endpoint` that
    /// finds any partition's leader.
    pub fn client_endpoints(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.0))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Where broker process `i` serves `/metrics`.
    pub fn metrics_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i].2)
    }

    /// The controlplane's HTTP address, `host:port`.
    pub fn controlplane_addr(&self) -> String {
        self.url.trim_start_matches("http://").to_owned()
    }

    /// Starts a read replica process registered as `id`, serving on a fixed port, reading
    /// the brokers' bucket with their credentials.
    pub fn start_replica(&self, id: &str) -> ReplicaProcess {
        self.start_replica_with(id, &self.objects.args(), &self.objects.env())
    }

    /// [`Cluster::start_replica`] with `objects` as its object-storage flags and `env` added
    /// to its environment.
    pub fn start_replica_with(
        &self,
        id: &str,
        objects: &[String],
        env: &[(String, String)],
    ) -> ReplicaProcess {
        let dir = self.dir.path().join(format!("replica-{id}"));
        std::fs::create_dir_all(&dir).expect("replica directory");
        let (port, metrics) = (free_port(), free_tcp_port());
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("replica.log"))
            .expect("log file");
        let log_filter = std::env::var("FLOE_TEST_BROKER_LOG").unwrap_or_else(|_| "info".into());
        let child = Command::new(super::broker_program())
            .arg("read-replica")
            .arg("--insecure-no-auth")
            .args(["--controlplane", &self.url, "--replica-id", id])
            .arg("--data-dir")
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .arg("--cert")
            .arg(&self.certificates.files.server.cert)
            .arg("--key")
            .arg(&self.certificates.files.server.key)
            .arg("--broker-ca")
            .arg(&self.certificates.files.ca)
            .args(["--tier-cache-disk", "0"])
            .args(objects)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("FLOE_LOG", log_filter)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn floe-broker read-replica");
        ReplicaProcess {
            child: Some(child),
            id: id.to_owned(),
            metrics: format!("127.0.0.1:{metrics}"),
            dir,
        }
    }

    /// A client given every broker of the cluster, as an application is: it finds each
    /// partition's leader itself and follows it when it moves.
    pub async fn cluster_client(&self) -> Client {
        Client::connect(self.cluster_config())
            .await
            .expect("connect to the cluster")
    }

    /// [`Cluster::cluster_client`] that also knows the controlplane: its consumers read
    /// from read replicas while any are live.
    pub async fn reading_client(&self) -> Client {
        let mut config = self.cluster_config();
        config.controlplane = Some(self.url.clone());
        Client::connect(config)
            .await
            .expect("connect to the cluster")
    }

    fn cluster_config(&self) -> ClientConfig {
        let endpoints: Vec<String> = self
            .ports
            .iter()
            .map(|(client, _, _)| format!("127.0.0.1:{client}"))
            .collect();
        let mut config = ClientConfig::new(
            endpoints.join(","),
            "localhost",
            self.certificates.files.ca.clone(),
        );
        config.request_timeout = Duration::from_secs(5);
        config
    }

    /// Creates a one-partition, unreplicated stream whose history soon leaves the broker's
    /// disk for the tier (64 KiB segments, 128 KiB of local retention), and waits for its
    /// leader.
    pub async fn create_tiering_stream(&self, name: &str) {
        let request: CreateStreamRequest = serde_json::from_value(serde_json::json!({
            "name": name, "partitions": 1, "replication_factor": 1,
            "segment": {"bytes": 64 * 1024},
            "retention": {"local_bytes": 128 * 1024},
        }))
        .expect("request");
        self.rest.create_stream(&request).await.expect("create");
        let (leader, _) = self.leader_after(name, 0, LeaderEpoch::ZERO).await;
        // The controlplane names the leader before the broker has applied the assignment
        // (it learns it from its long-poll): wait until it serves the stream.
        let client = self.client(leader).await;
        let stream = floe_wire::StreamName::new(name).expect("name");
        self.wait_for("the leader to serve the stream", async |_: &Cluster| {
            client.stream(&stream).await.ok()
        })
        .await;
        client.close().await;
    }

    /// Waits until the tier of `name`'s partition 0 reaches `end` and its hot log no longer
    /// starts at 0; returns the tiered range.
    pub async fn wait_tiered(&self, name: &str, end: u64) -> OffsetRange {
        self.wait_for("history tiered", async |c: &Cluster| {
            let p = c.partition(name, 0).await?;
            let (tier, hot) = (p.tier?, p.hot?);
            (tier.end >= end && hot.start > 0).then_some(tier)
        })
        .await
    }

    pub async fn shutdown(mut self) {
        for broker in &mut self.brokers {
            broker.kill();
        }
        if let Some(controlplane) = self.controlplane.take() {
            controlplane.shutdown().await;
        }
    }
}

/// Every record of `stream`'s partition 0 from offset 0 (tier and hot log alike) as
/// (offset, value), until `enough` holds or a poll finds nothing more.
pub async fn read_from_start(
    client: &Client,
    stream: &str,
    enough: impl Fn(&[(u64, String)]) -> bool,
) -> Vec<(u64, String)> {
    let mut consumer = floe_client::Consumer::new(
        client.clone(),
        floe_client::StreamName::new(stream).expect("name"),
        floe_client::PartitionId::new(0),
        floe_client::FetchPosition::Offset(floe_client::Offset::new(0)),
        floe_client::ConsumerConfig::default(),
    );
    let mut records = Vec::new();
    let mut last_progress = std::time::Instant::now();
    while !enough(&records) {
        match consumer.poll(Duration::from_secs(5)).await {
            Ok(Some(record)) => {
                last_progress = std::time::Instant::now();
                records.push((
                    record.offset.get(),
                    String::from_utf8_lossy(&record.value).into_owned(),
                ));
            }
            // A wait that came back empty ends the read only after 30 s without a record:
            // on a loaded machine one fetch may, and the check that follows tells what is
            // missing.
            Ok(None) if last_progress.elapsed() < Duration::from_secs(30) => {
                eprintln!(
                    "reading back: no record within 5 s after {} records; reading on",
                    records.len()
                );
            }
            Ok(None) => break,
            Err(e) => panic!("reading back: {e}"),
        }
    }
    records
}

/// Checks a history read back with [`read_from_start`]: offsets strictly increasing (so
/// none twice), and every acknowledged (offset, value) there at its offset.
pub fn check_acknowledged(acked: &[(u64, String)], log: &[(u64, String)]) {
    assert!(
        log.windows(2).all(|w| w[0].0 < w[1].0),
        "out of order or repeated"
    );
    let by_offset: std::collections::BTreeMap<u64, &String> =
        log.iter().map(|(o, v)| (*o, v)).collect();
    for (offset, value) in acked {
        assert_eq!(
            by_offset.get(offset).copied(),
            Some(value),
            "acknowledged record {value} at {offset} is missing or different"
        );
    }
}

//! The nemesis: one fault per cycle, drawn from a seeded random stream (the kind, the
//! broker it hits, how long it holds), injected while the producers run, then healed.

use std::time::Duration;

use floe_wire::BrokerId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::cluster::Cluster;
use crate::common::moto::Moto;
use crate::common::port_block::PortBlock;
use crate::common::small_disk::SmallDisk;
use crate::common::{http_get, metric};
use crate::{SMALL_DISK_BROKER, STREAM};

/// The producers run this long before the fault, and this long after it heals, in every
/// cycle.
const LEAD_IN: Duration = Duration::from_millis(300);
const LEAD_OUT: Duration = Duration::from_millis(500);
/// A fault holds for a random time in this range (milliseconds): some shorter than the
/// lease (no election), some longer.
const HOLD_MS: std::ops::Range<u64> = 300..3_500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL a broker; start it again on its data when the fault heals.
    Kill,
    /// SIGSTOP the object store; SIGCONT it when the fault heals.
    Freeze,
    /// Drop what reaches a broker's peer port (and, mostly, what leaves it) with nftables.
    Cut,
    /// Fill the filesystem of the broker on the small disk; free it when the fault heals.
    Fill,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Freeze => "freeze",
            FaultKind::Cut => "cut",
            FaultKind::Fill => "fill",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    /// The broker process it hits (for kill, cut and fill).
    pub broker: usize,
    pub hold: Duration,
    /// A cut drops only what reaches the port: the broker is heard, and hears nothing.
    pub one_way: bool,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hold = self.hold.as_secs_f64();
        match self.kind {
            FaultKind::Kill => write!(f, "kill broker {} for {hold:.1} s", self.broker),
            FaultKind::Freeze => write!(f, "freeze the object store for {hold:.1} s"),
            FaultKind::Cut if self.one_way => {
                write!(
                    f,
                    "cut what reaches broker {}'s peer port for {hold:.1} s",
                    self.broker
                )
            }
            FaultKind::Cut => write!(f, "cut broker {}'s peer port for {hold:.1} s", self.broker),
            FaultKind::Fill => write!(f, "fill broker {}'s disk for {hold:.1} s", self.broker),
        }
    }
}

/// What a fault did, beyond its description.
#[derive(Debug, Default)]
pub struct Effect {
    /// Appended to the cycle's line: which partitions the broker led, what a full disk
    /// refused.
    pub note: String,
    /// Publishes the broker with the full disk refused meanwhile.
    pub disk_full_refusals: u64,
    /// The partitions the broker hit led when the fault began.
    pub led: Vec<u32>,
}

pub struct Nemesis {
    rng: StdRng,
    kinds: Vec<FaultKind>,
}

impl Nemesis {
    pub fn new(seed: u64, kinds: Vec<FaultKind>) -> Nemesis {
        Nemesis {
            rng: StdRng::seed_from_u64(seed),
            kinds,
        }
    }

    /// The next fault. Every draw is made whatever the kind, so that a seed gives the same
    /// sequence of faults whichever kinds this machine can inject.
    pub fn next_fault(&mut self) -> Fault {
        let kind = self.kinds[self.rng.random_range(0..self.kinds.len())];
        let broker = self.rng.random_range(0..3);
        let hold = Duration::from_millis(self.rng.random_range(HOLD_MS));
        let one_way = self.rng.random_bool(0.3);
        Fault {
            kind,
            broker: if kind == FaultKind::Fill {
                SMALL_DISK_BROKER
            } else {
                broker
            },
            hold,
            one_way,
        }
    }

    /// Lets the producers run, injects `fault`, holds it, heals it, and lets them run on.
    pub async fn inject(
        &mut self,
        fault: &Fault,
        cluster: &mut Cluster,
        moto: &Moto,
        disk: Option<&SmallDisk>,
    ) -> Effect {
        tokio::time::sleep(LEAD_IN).await;
        let mut effect = Effect::default();
        if let Some((id, led)) = led_by(cluster, fault).await {
            effect.note = format!(" (id {id}, leading partitions {led:?})");
            effect.led = led;
        }
        match fault.kind {
            FaultKind::Kill => {
                cluster.kill(fault.broker);
                tokio::time::sleep(fault.hold).await;
                cluster.restart(fault.broker);
            }
            FaultKind::Freeze => {
                let _frozen = Frozen::new(moto);
                tokio::time::sleep(fault.hold).await;
            }
            FaultKind::Cut => {
                let port = cluster.peer_port(fault.broker);
                let _block = if fault.one_way {
                    PortBlock::udp_to(port)
                } else {
                    PortBlock::udp(port)
                };
                tokio::time::sleep(fault.hold).await;
            }
            FaultKind::Fill => {
                let disk = disk.expect("the fill fault runs only with a small disk");
                fill(cluster, disk, fault, &mut effect).await;
            }
        }
        tokio::time::sleep(LEAD_OUT).await;
        effect
    }
}

/// Fills the small disk for the fault's hold, watching the broker's own account of it.
async fn fill(cluster: &Cluster, disk: &SmallDisk, fault: &Fault, effect: &mut Effect) {
    let metrics = cluster.metrics_addr(fault.broker);
    // Publishes refused, and replicas paused, for the full disk.
    let counts = async || {
        let scraped = http_get(&metrics, "/metrics").await;
        (
            metric(
                &scraped,
                "floe_publish_refused_batches_total{code=\"DiskHighWater\"}",
            ) as u64,
            metric(&scraped, "floe_replica_disk_full_pauses_total") as u64,
        )
    };
    let before = counts().await;
    let ballast = disk.fill();
    let started = tokio::time::Instant::now();
    let mut marked = false;
    while started.elapsed() < fault.hold {
        tokio::time::sleep(Duration::from_millis(100)).await;
        marked |= metric(
            &http_get(&metrics, "/metrics").await,
            "floe_disk_high_water",
        ) > 0.0;
    }
    let bytes = ballast.bytes;
    drop(ballast);
    // The replicas' pauses end a moment after the ballast goes; count those too.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = counts().await;
    effect.disk_full_refusals = after.0.saturating_sub(before.0);
    effect.note.push_str(&format!(
        "; {} MiB of ballast, high-water mark {}, {} publishes refused, {} replica pauses",
        bytes >> 20,
        if marked { "reached" } else { "not seen" },
        effect.disk_full_refusals,
        after.1.saturating_sub(before.1),
    ));
}

/// The id of broker process `fault.broker` and the partitions it leads now (none for a
/// fault that hits no broker).
async fn led_by(cluster: &Cluster, fault: &Fault) -> Option<(BrokerId, Vec<u32>)> {
    if fault.kind == FaultKind::Freeze {
        return None;
    }
    let id = cluster.brokers[fault.broker].broker_id()?;
    let description = cluster.rest.stream(STREAM).await.ok()?;
    let led = description
        .partitions
        .iter()
        .filter(|p| p.leader == Some(id))
        .map(|p| p.partition.get())
        .collect();
    Some((id, led))
}

/// The object store, stopped until drop.
struct Frozen<'a>(&'a Moto);

impl<'a> Frozen<'a> {
    fn new(moto: &'a Moto) -> Frozen<'a> {
        moto.signal("-STOP");
        Frozen(moto)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.signal("-CONT");
    }
}

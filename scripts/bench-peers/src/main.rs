//! `floe-bench-peers`: the other half of Floe's peer benchmarks (`scripts/bench-peers.sh`).
//!
//! - `nats`: publishes to a NATS JetStream stream the workload `floe bench publish` sends to
//!   Floe (record size; closed loop with a bounded number of acknowledgements in flight, or
//!   open loop on a fixed schedule measured from each record's intended send time, with the
//!   same schedule and warm-up code) and prints the same JSON shape.
//! - `limits`: the machine's own limits, measured in the same run: 1 MiB appends with
//!   `fdatasync`, the latency of a 4 KiB append with `fdatasync`, and a 1 KiB request's round
//!   trip over QUIC on loopback. A durable acknowledgement cannot beat the last two added up.
//!
//! Built apart from Floe's workspace, so that its build and lints never compile the NATS
//! client.

mod figures;
mod limits;
mod nats;
// The very schedule and warm-up cutoff `floe bench` uses, so both sides pace alike.
#[allow(dead_code)]
#[path = "../../../cli/src/bench/schedule.rs"]
mod schedule;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "floe-bench-peers", about = "Floe's peer benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Publish to NATS JetStream like `floe bench publish`.
    Nats(nats::NatsBench),
    /// Measure the machine's fdatasync and loopback QUIC limits.
    Limits(limits::Limits),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Both TLS stacks here use ring; install it so that rustls never has to guess.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Nats(args) => nats::run(args).await,
            Command::Limits(args) => limits::run(args).await,
        }
    })
}

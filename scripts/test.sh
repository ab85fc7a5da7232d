#!/usr/bin/env bash
# Runs Floe's whole test suite on a fresh machine, installing first whatever the tests need
# (an S3-compatible test server and schemathesis in .venv, PostgreSQL, cargo-fuzz, and
# nftables when run as root).
# Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

echo "== S3-compatible test server (at ${SECONDS}s) =="
FLOE_TEST_S3_ENDPOINT=$(scripts/moto.sh)
export FLOE_TEST_S3_ENDPOINT
# Tests that must pause object storage start a private server of their own.
export FLOE_TEST_MOTO_SERVER="$PWD/.venv/bin/moto_server"
trap 'kill "$(cat .venv/moto.pid)" 2>/dev/null || true' EXIT
echo "serving on $FLOE_TEST_S3_ENDPOINT"

echo "== PostgreSQL test server (at ${SECONDS}s) =="
FLOE_TEST_POSTGRES_URL=$(scripts/postgres.sh)
export FLOE_TEST_POSTGRES_URL
trap 'kill "$(cat .venv/moto.pid)" 2>/dev/null || true; scripts/postgres.sh stop' EXIT
echo "serving on $FLOE_TEST_POSTGRES_URL"

# Test brokers refuse publishes past a size of partition logs far above what any test
# writes, not past a share of this machine's filesystem: a test's outcome must not depend on
# how full the build machine's disk happens to be. (The test of the mark sets its own.)
export FLOE_DISK_HIGH_WATER="${FLOE_DISK_HIGH_WATER:-64GiB}"

# The network-partition test and the fault-injection harness (broker/tests/chaos/) cut a
# broker's peer port with nftables: root only. The harness and broker/tests/full_disk.rs
# also mount a small tmpfs to fill (root only; they say so and leave it out otherwise).
if [ "$(id -u)" = 0 ] && command -v nft >/dev/null && nft list tables >/dev/null 2>&1; then
  export FLOE_TEST_NFT=1
else
  echo "note: not root or no usable nft: broker/tests/network_partition.rs will skip, and broker/tests/chaos/ will cut no ports"
fi

echo "== cargo test --no-run (workspace build) (at ${SECONDS}s) =="
# End-to-end tests run the real binaries (cli/tests/cli.rs finds floe-broker next to
# floe). Building the tests builds every package's binaries too, in the test profile; a
# separate `cargo build` would compile the workspace a second time in the dev profile.
cargo test --workspace --locked --no-run

echo "== cargo test (workspace) (at ${SECONDS}s) =="
cargo test --workspace --locked

echo "== controlplane's autoscaling-group driver against moto (at ${SECONDS}s) =="
# The aws-asg feature is off in the workspace build (the AWS SDK is heavy to compile); this
# also leaves target/debug/floe-controlplane built with it, for the deployment test.
cargo test -p floe-controlplane --features aws-asg --locked --test aws_asg

echo "== release bundle: scripts/package.sh of stand-in binaries (at ${SECONDS}s) =="
# No release build: the bundle's contents and package.sh's refusals, and the version lines
# of the binaries just built.
deploy/check-bundle.sh

echo "== deployment: Terraform against moto, units, cloud-init, alerts, dashboard (at ${SECONDS}s) =="
terraform/tests/run.sh

echo "== REST API fuzzing (schemathesis, ${FLOE_API_FUZZ_SECONDS:=90}s) (at ${SECONDS}s) =="
FLOE_API_FUZZ_SECONDS="$FLOE_API_FUZZ_SECONDS" scripts/api-fuzz.sh

if [ -d fuzz/fuzz_targets ]; then
  echo "== fuzz smoke (${FUZZ_SECONDS:=10}s per target) (at ${SECONDS}s) =="
  CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} FUZZ_SECONDS="$FUZZ_SECONDS" scripts/fuzz-smoke.sh
fi
echo "== done (at ${SECONDS}s) =="

#!/usr/bin/env bash
# Runs Floe's whole test suite on a fresh machine, installing first whatever the tests need.
# Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

echo "== cargo build (workspace binaries) =="
# End-to-end tests run the real binaries: client/tests/cli.rs finds floe-broker next to floe.
cargo build --workspace --bins --locked

echo "== cargo test (workspace) =="
cargo test --workspace --locked

if [ -d fuzz/fuzz_targets ]; then
  echo "== fuzz smoke (${FUZZ_SECONDS:=15}s per target) =="
  FUZZ_SECONDS="$FUZZ_SECONDS" scripts/fuzz-smoke.sh
fi

#!/usr/bin/env bash
# Fuzz smoke run: every target under fuzz/fuzz_targets for FUZZ_SECONDS seconds each (default
# 20), starting from the committed seeds in fuzz/seeds/<target>/ plus whatever corpus earlier
# runs left in fuzz/corpus/<target>/. Exits non-zero on the first crash, leak or timeout; the
# failing input is kept in fuzz/artifacts/<target>/.
#
# Usage: scripts/fuzz-smoke.sh            FUZZ_SECONDS=120 scripts/fuzz-smoke.sh
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2
fuzz_seconds=${FUZZ_SECONDS:-20}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# cargo-fuzz passes unstable rustc flags (-Zsanitizer=address and friends); the stable
# toolchain accepts them with RUSTC_BOOTSTRAP. One build job leaves a core for other work.
export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

if [[ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
  echo "fuzz-smoke: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

shopt -s nullglob
targets=(fuzz/fuzz_targets/*.rs)
if ((${#targets[@]} == 0)); then
  echo "fuzz-smoke: no fuzz targets under fuzz/fuzz_targets" >&2
  exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

for path in "${targets[@]}"; do
  target=$(basename "$path" .rs)
  seeds=fuzz/seeds/$target
  corpus=fuzz/corpus/$target
  if [[ ! -d "$seeds" ]]; then
    echo "fuzz-smoke: $target has no seed inputs in $seeds" >&2
    exit 1
  fi
  mkdir -p "$corpus"
  echo "fuzz-smoke: $target for ${fuzz_seconds}s"
  # New inputs go to the first directory (the gitignored corpus); the seeds are only read.
  if ! cargo fuzz run "$target" "$corpus" "$seeds" -- \
    -max_total_time="$fuzz_seconds" -timeout=10 -print_final_stats=1 2>&1 | tee "$log"; then
    echo "fuzz-smoke: $target FAILED; reproduce with:" >&2
    echo "  RUSTC_BOOTSTRAP=1 cargo fuzz run $target fuzz/artifacts/$target/<input>" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  echo "fuzz-smoke: $target passed: ${runs:-?} executions in ${fuzz_seconds}s"
done

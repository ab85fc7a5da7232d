#!/usr/bin/env bash
# Checks that every metric the Grafana dashboard (deploy/grafana/*.json) and the alert rules
# (deploy/prometheus/*.yml) name is exported by a running Floe: starts `floe-broker dev`
# (a broker and its embedded controlplane) and a read replica beside it, scrapes the
# broker's metrics port, the controlplane's /metrics (on its REST port) and the replica's
# metrics port, and compares names.
#
#   FLOE_BIN_DIR=target/debug deploy/check-metrics.sh
#
# Before scraping, a little work makes the labelled families show samples: a stream is
# created, published to and consumed from, and a consumer asks for a stream that does not
# exist. A metric counts as exported when a scrape shows a sample of it or declares its
# family (`# TYPE`): a counter family `x` exports `x_total`, a histogram `x_bucket`, `x_sum`
# and `x_count`. A few labelled families cannot show a sample in a one-broker `dev` run
# (replication lag needs a second broker, request durations an upload, refusals a full
# disk); for those the check accepts the family's registration in the source
# (broker/src/metrics.rs, controlplane/src/metrics.rs) and lists them, so that a renamed
# metric still fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${FLOE_BIN_DIR:-${CARGO_TARGET_DIR:-target}/debug}
broker=$bin_dir/floe-broker floe=$bin_dir/floe
[ -x "$broker" ] && [ -x "$floe" ] || { echo "no $broker or $floe: build the workspace first" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metrics_port=$(free_port) controlplane_port=$(free_port) replica_metrics_port=$(free_port)

# Waits until URL answers 200 (60 s at most).
wait_for() {
  for _ in $(seq 1 600); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$1 never answered" >&2
  return 1
}

env -u FLOE_OBJECT_STORE FLOE_LOG=warn "$broker" dev --data-dir "$work/dev" --listen 127.0.0.1:0 \
  --metrics-listen "127.0.0.1:$metrics_port" --controlplane-listen "127.0.0.1:$controlplane_port" \
  --profile "$work/profile.json" --read-replicas 1 --max-read-replicas 2 >"$work/dev.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$metrics_port/metrics" || { cat "$work/dev.log"; exit 1; }
wait_for "http://127.0.0.1:$controlplane_port/metrics" || { cat "$work/dev.log"; exit 1; }

tls=$work/dev/tls
# dev's read-replica token, which its controlplane knows.
FLOE_READ_REPLICA_TOKEN=$(cat "$work/dev/tokens/read-replica") FLOE_LOG=warn "$broker" replica --controlplane "http://127.0.0.1:$controlplane_port" \
  --data-dir "$work/replica" --listen 127.0.0.1:0 --metrics-listen "127.0.0.1:$replica_metrics_port" \
  --cert "$tls/broker.pem" --key "$tls/broker.key" --broker-ca "$tls/ca.pem" \
  --object-store "file://$work/dev/objects/" >"$work/replica.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$replica_metrics_port/metrics" || { cat "$work/replica.log"; exit 1; }

export FLOE_PROFILE=$work/profile.json
"$floe" stream create metrics-check --partitions 1 >/dev/null
printf 'one\ntwo\n' | "$floe" publish metrics-check >/dev/null
"$floe" consume metrics-check --from earliest --count 2 >/dev/null
"$floe" consume no-such-stream --from earliest --count 1 >/dev/null 2>&1 || true

curl -fsS "http://127.0.0.1:$metrics_port/metrics" >"$work/broker.txt"
curl -fsS "http://127.0.0.1:$controlplane_port/metrics" >"$work/controlplane.txt"
curl -fsS "http://127.0.0.1:$replica_metrics_port/metrics" >"$work/replica.txt"

python3 - "$work" deploy/grafana/*.json deploy/prometheus/*.yml <<'EOF'
import json, re, sys

work, *sources = sys.argv[1:]

def exported(path):
    names = set()
    for line in open(path):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            names.add(name)
            names.update({"counter": [name + "_total"],
                          "histogram": [name + s for s in ("_bucket", "_sum", "_count")],
                          "gaugehistogram": [name + s for s in ("_bucket", "_gsum", "_gcount")],
                          "summary": [name + s for s in ("_sum", "_count")],
                          "info": [name + "_info"]}.get(kind, []))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names

scraped = {role: exported(f"{work}/{role}.txt") for role in ("broker", "controlplane", "replica")}
everywhere = set().union(*scraped.values())

def expressions(path):
    if path.endswith(".json"):
        found = []
        def walk(node):
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in ("expr", "definition") and isinstance(value, str):
                        found.append(value)
                    elif key == "query" and isinstance(value, dict) and "query" in value:
                        found.append(value["query"])
                    else:
                        walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)
        walk(json.load(open(path)))
        return found
    # Alert rules: the whole file (expressions, and the metrics descriptions point to).
    return [open(path).read()]

registered = open("broker/src/metrics.rs").read() + open("controlplane/src/metrics.rs").read()

def declared(name):
    family = re.sub(r"_(total|bucket|sum|count)$", "", name.removeprefix("floe_"))
    return f'"{family}"' in registered

missing = []
only_declared = set()
checked = set()
for source in sources:
    for expr in expressions(source):
        # Metric names are floe_* identifiers not followed by `=` (label matchers) or `(`.
        for name in re.findall(r"\b(floe_[a-z0-9_]+)\b(?!\s*[=(!~])", expr):
            checked.add(name)
            if name in everywhere:
                continue
            if declared(name):
                only_declared.add(name)
            else:
                missing.append((source, name))

print(f"checked {len(checked)} metric names from {len(sources)} files against "
      + ", ".join(f"{role} ({len(names)} series names)" for role, names in scraped.items()))
for name in sorted(only_declared):
    print(f"note: {name} showed no sample in this run; its family is registered in the source")
for source, name in sorted(set(missing)):
    print(f"MISSING {name} (named in {source})")
sys.exit(1 if missing else 0)
EOF

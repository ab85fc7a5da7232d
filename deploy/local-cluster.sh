#!/usr/bin/env bash
# A Floe cluster on this machine, for trying replication and failover by hand: a controlplane
# (SQLite, its API over TLS) and N brokers (default 3) with peer ports, sharing one
# local-directory bucket, with a development CA whose key the controlplane holds, to issue each
# broker the peer certificate naming it. Everything lives under a directory (default ./floe-cluster); logs are
# <dir>/controlplane.log and <dir>/b<i>/broker.log. Ctrl-C stops the whole cluster.
#
#   deploy/local-cluster.sh [N] [DIR]
#
# Then, for example:
#   export FLOE_TOKEN=$(cat floe-cluster/tokens/admin)         # the cluster's administrator
#   floe --controlplane https://127.0.0.1:7300 --endpoint 127.0.0.1:7100 --ca-cert floe-cluster/tls/ca.pem \
#     stream create orders --partitions 3 --replication-factor 3
#   curl -s --cacert floe-cluster/tls/ca.pem -H "Authorization: Bearer $FLOE_TOKEN" https://127.0.0.1:7300/v1/streams/orders
#   kill -9 <pid of a leader>                                   # and watch a new one elected
set -euo pipefail
brokers=${1:-3}
dir=$(realpath -m "${2:-floe-cluster}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
controlplane_addr=${FLOE_CONTROLPLANE_LISTEN:-127.0.0.1:7300}

cargo build --release --manifest-path "$root/Cargo.toml" -p floe-broker -p floe-controlplane -p floe-cli --bins
bin="${CARGO_TARGET_DIR:-$root/target}/release"
mkdir -p "$dir/objects"
"$bin/floe-broker" certs --dir "$dir/tls" >/dev/null
# The administrator's token and the one brokers call the controlplane with (docs/security.md).
(umask 077 && mkdir -p "$dir/tokens")
for token in admin broker; do
  [ -s "$dir/tokens/$token" ] || (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/tokens/$token")
done

pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

FLOE_ADMIN_TOKEN_FILE="$dir/tokens/admin" FLOE_BROKER_TOKEN_FILE="$dir/tokens/broker" \
  "$bin/floe-controlplane" --data-dir "$dir" --listen "$controlplane_addr" \
  --tls-cert "$dir/tls/broker.pem" --tls-key "$dir/tls/broker.key" \
  --peer-ca "$dir/tls/ca.pem" --peer-ca-key-file "$dir/tls/ca.key" \
  --lease-ms "${FLOE_LEASE_MS:-3000}" >"$dir/controlplane.out" 2>"$dir/controlplane.log" &
pids+=($!)
for i in $(seq 0 $((brokers - 1))); do
  mkdir -p "$dir/b$i"
  "$bin/floe-broker" serve --data-dir "$dir/b$i/data" \
    --listen "127.0.0.1:$((7100 + i))" --peer-listen "127.0.0.1:$((7200 + i))" \
    --metrics-listen "127.0.0.1:$((7180 + i))" \
    --cert "$dir/tls/broker.pem" --key "$dir/tls/broker.key" --peer-ca "$dir/tls/ca.pem" \
    --controlplane "https://$controlplane_addr" --controlplane-ca "$dir/tls/ca.pem" \
    --token-file "$dir/tokens/broker" \
    --object-store "file://$dir/objects" 2>"$dir/b$i/broker.log" &
  pids+=($!)
  echo "broker $i: pid $!, clients 127.0.0.1:$((7100 + i)), peers 127.0.0.1:$((7200 + i)), metrics http://127.0.0.1:$((7180 + i))/metrics"
done
echo "controlplane: https://$controlplane_addr/v1 (pid ${pids[0]}); CA for clients: $dir/tls/ca.pem; administrator's token: $dir/tokens/admin"
echo "Ctrl-C stops the cluster."
wait

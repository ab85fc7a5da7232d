#!/usr/bin/env bash
# Starts a throwaway PostgreSQL for the controlplane's tests and prints its URL on stdout.
# Installs the server with apt-get first if it is missing. Idempotent: a second call finds
# the server running and prints the same URL.
#
#   export FLOE_TEST_POSTGRES_URL=$(scripts/postgres.sh)
#   scripts/postgres.sh stop
#
# The cluster lives in $FLOE_TEST_POSTGRES_DIR (default /tmp/floe-postgres-PORT), trusts
# local connections, runs without fsync (test data only) and listens on 127.0.0.1 at
# $FLOE_TEST_POSTGRES_PORT (default 55432). initdb refuses to run as root, so as root the
# server runs as the `postgres` user.
set -euo pipefail
cd "$(dirname "$0")/.."

port=${FLOE_TEST_POSTGRES_PORT:-55432}
data=${FLOE_TEST_POSTGRES_DIR:-/tmp/floe-postgres-$port}
url="postgres://postgres@127.0.0.1:$port/postgres"

find_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

bindir=$(find_bindir)
if [ -z "$bindir" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bindir=$(find_bindir)
  fi
  if [ -z "$bindir" ]; then
    echo "please install PostgreSQL (Debian: apt-get install postgresql)" >&2
    exit 1
  fi
fi

# Runs a server command as the user that owns the cluster.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-start}" = stop ]; then
  if [ -f "$data/PG_VERSION" ]; then
    as_owner "$bindir/pg_ctl" -D "$data" -m immediate stop >&2 || true
  fi
  exit 0
fi

if [ ! -f "$data/PG_VERSION" ]; then
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown postgres: "$data"
  as_owner "$bindir/initdb" -D "$data" -U postgres -A trust --no-sync >&2
fi

if ! as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  as_owner "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w \
    -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
    start >&2
fi

echo "$url"

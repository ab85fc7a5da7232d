#!/usr/bin/env bash
# Starts a local S3-compatible server for the tier's tests and prints its endpoint
# (http://127.0.0.1:PORT) on stdout. Installs it into .venv first, idempotently.
#
#   export FLOE_TEST_S3_ENDPOINT=$(scripts/moto.sh)
#
# The server runs in the background; its pid is written to .venv/moto.pid and its log to
# .venv/moto.log. Stop it with: kill "$(cat .venv/moto.pid)".
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/moto_server ]; then
  python3 -m venv .venv >&2
  .venv/bin/pip install --quiet 'moto[server]' >&2
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/moto_server -H 127.0.0.1 -p "$port" >.venv/moto.log 2>&1 &
echo $! >.venv/moto.pid

endpoint="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  if python3 -c "import urllib.request; urllib.request.urlopen('$endpoint/')" 2>/dev/null; then
    echo "$endpoint"
    exit 0
  fi
  sleep 0.1
done
echo "the server did not answer on $endpoint; see .venv/moto.log" >&2
exit 1

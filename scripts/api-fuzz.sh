#!/usr/bin/env bash
# Fuzzes the controlplane's REST API from its own OpenAPI document with schemathesis: a real
# `floe-controlplane` on a temporary SQLite database, every operation, bounded in time
# (FLOE_API_FUZZ_SECONDS, default 90). Fails on any 5xx, any undocumented status, any
# response that does not match its schema. Installs schemathesis into .venv first,
# idempotently.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned, so that a new release of the fuzzer cannot turn CI red without a change here.
schemathesis_version=4.31.1
if ! .venv/bin/schemathesis --version 2>/dev/null | grep -q "$schemathesis_version"; then
  [ -x .venv/bin/pip ] || python3 -m venv .venv >&2
  .venv/bin/pip install --quiet "schemathesis==$schemathesis_version" >&2
fi

bin=${FLOE_CONTROLPLANE_BIN:-${CARGO_TARGET_DIR:-target}/debug/floe-controlplane}
if [ ! -x "$bin" ]; then
  cargo build -p floe-controlplane --bin floe-controlplane
fi

dir=$(mktemp -d)
# Short long-polls: the fuzzer sends after_version and would otherwise wait 30 s a call.
# The fuzzer calls as the administrator, so that it reaches every handler.
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
FLOE_ADMIN_TOKEN=$token "$bin" --listen 127.0.0.1:0 --data-dir "$dir" --long-poll-max-ms 100 \
  --insecure-plain-http \
  >"$dir/stdout" 2>"$dir/stderr" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT

base=
for _ in $(seq 1 100); do
  base=$(sed -n 's/^floe-controlplane listening on //p' "$dir/stdout")
  [ -n "$base" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/stderr" >&2; exit 1; }
  sleep 0.1
done
[ -n "$base" ] || { echo "floe-controlplane did not start; see $dir/stderr" >&2; exit 1; }

# One worker: with two, Python 3.11's `ast` module, which hypothesis uses to describe its
# strategies, failed from concurrent threads ("AST constructor recursion depth mismatch"),
# reported as schemathesis runtime errors.
status=0
.venv/bin/schemathesis run "$base/v1/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing \
  --max-time "${FLOE_API_FUZZ_SECONDS:-90}" \
  --request-timeout 30 \
  --workers 1 || status=$?
if grep -q -i panicked "$dir/stderr"; then
  echo "floe-controlplane panicked during the fuzz run:" >&2
  grep -i -A5 panicked "$dir/stderr" >&2
  status=1
fi
exit "$status"

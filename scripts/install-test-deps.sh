#!/usr/bin/env bash
# Installs what Floe's tests need beyond the Rust toolchain. Idempotent.
# - python3 with venv, for the S3-compatible test server (scripts/moto.sh installs it);
# - a C++ compiler, for cargo-fuzz's sanitizer runtime (scripts/fuzz-smoke.sh installs
#   cargo-fuzz itself);
# - nftables when running as root, for the network-partition test;
# - for the deployment test (terraform/tests/run.sh): promtool (Debian's prometheus package),
#   cloud-init (for `cloud-init schema`), and moto, boto3 and checkov in .venv. Terraform and
#   its AWS provider cannot be installed here; that test skips without them.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }

missing=()
command -v python3 >/dev/null || missing+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v c++ >/dev/null || missing+=(g++)
# nftables cuts a broker's peer port in the network-partition test; that needs root, so it
# is installed only where the tests can use it.
if [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null; then
  missing+=(nftables)
fi
command -v promtool >/dev/null || missing+=(prometheus)
command -v cloud-init >/dev/null || missing+=(cloud-init)
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
  else
    echo "please install: ${missing[*]}" >&2
    exit 1
  fi
fi

# Python tools of the deployment test, beside the S3-compatible server scripts/moto.sh uses.
if [ ! -x .venv/bin/checkov ] || ! .venv/bin/python -c 'import boto3, moto' 2>/dev/null; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install --quiet 'moto[server]' boto3 checkov
fi

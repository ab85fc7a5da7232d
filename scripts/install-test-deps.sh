#!/usr/bin/env bash
# Installs what Floe's tests need beyond the Rust toolchain. Idempotent.
# - python3 with venv, for the S3-compatible test server (scripts/moto.sh installs it);
# - a C++ compiler, for cargo-fuzz's sanitizer runtime (scripts/fuzz-smoke.sh installs
#   cargo-fuzz itself);
# - nftables when running as root, for the network-partition test.
set -euo pipefail
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
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
  else
    echo "please install: ${missing[*]}" >&2
    exit 1
  fi
fi

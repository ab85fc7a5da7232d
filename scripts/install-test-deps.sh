#!/usr/bin/env bash
# Installs what Floe's tests need beyond the Rust toolchain. Idempotent.
# Today the suite needs only cargo; the fuzz smoke installs cargo-fuzz itself.
set -euo pipefail
command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }

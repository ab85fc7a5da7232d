#!/usr/bin/env bash
# Checks deploy/systemd: `systemd-analyze verify` must be clean, and prints each unit's
# `systemd-analyze security` exposure (offline, from the unit files). Runs in a throwaway
# root holding the units, placeholder binaries and systemd's own units, so that it needs
# neither an installed Floe nor a running systemd.
set -euo pipefail
cd "$(dirname "$0")/systemd"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc/systemd/system" "$root/opt/floe/current/bin" "$root/etc/floe" "$root/usr/lib/systemd"
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp ./*.service "$root/etc/systemd/system/"
for binary in floe-broker floe-controlplane floe; do
  printf '#!/bin/sh\n' >"$root/opt/floe/current/bin/$binary"
  chmod +x "$root/opt/floe/current/bin/$binary"
done
: >"$root/etc/floe/floe.env"
units=(*.service)
# verify prints nothing when every unit is clean; any output is a finding.
findings=$(systemd-analyze verify --root="$root" "${units[@]}" 2>&1) || true
if [ -n "$findings" ]; then
  echo "$findings"
  exit 1
fi
echo "systemd-analyze verify: clean (${units[*]})"
for unit in "${units[@]}"; do
  systemd-analyze security --offline=true --root="$root" "$unit" 2>&1 | tail -n 1
done

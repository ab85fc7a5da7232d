#!/usr/bin/env bash
# Checks scripts/package.sh without a release build: bundles stand-in binaries (scripts that
# print a version line) and checks the bundle's contents, that its VERSION names the
# binaries' commit, that it is reproducible, and that binaries naming another version or
# mixed commits are refused. With FLOE_BIN_DIR (or CARGO_TARGET_DIR/debug, target/debug),
# also checks that the real binaries there print the version line package.sh requires.
#
#   FLOE_BIN_DIR=target/debug deploy/check-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
case "$(uname -m)" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=arm64 ;;
esac
binaries=(floe floe-broker floe-controlplane)
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }

# stand_ins DIR VERSION COMMIT: the three binaries as scripts printing their version line.
stand_ins() {
  mkdir -p "$1"
  for binary in "${binaries[@]}"; do
    printf '#!/bin/sh\necho "%s %s (commit %s)"\n' "$binary" "$2" "$3" >"$1/$binary"
    chmod +x "$1/$binary"
  done
}

# --- a bundle of stand-ins --------------------------------------------------------------------
stand_ins "$work/bin" "$version" 0123456789ab
scripts/package.sh --bin-dir "$work/bin" --version 9.9.9-check --out "$work/out" >"$work/package.log" 2>&1 ||
  { cat "$work/package.log"; fail "package.sh --bin-dir refused the stand-ins"; exit 1; }
name="floe-9.9.9-check-$arch-linux"
bundle="$work/out/$name.tar.gz"
[ "$(head -n 1 "$work/package.log")" = "$bundle" ] || fail "package.sh did not print the bundle's path first"
sha=$(sha256sum "$bundle" | cut -d' ' -f1)
grep -qx "sha256 $sha" "$work/package.log" && ok "package.sh prints the bundle's SHA-256" ||
  fail "package.sh printed $(tail -n 1 "$work/package.log"), not the SHA-256 $sha"

expected=$(
  printf '%s\n' "$name/" "$name/VERSION" "$name/bin/" "$name/docs/" "$name/docs/deploy-aws.md" "$name/systemd/"
  for binary in "${binaries[@]}"; do echo "$name/bin/$binary"; done
  for unit in deploy/systemd/*.service; do echo "$name/systemd/$(basename "$unit")"; done
)
listed=$(tar -tzf "$bundle" | sort)
if [ "$listed" = "$(sort <<<"$expected")" ]; then
  ok "the bundle holds the three binaries, $(find deploy/systemd -name '*.service' | wc -l) units, the guide and VERSION, under $name/"
else
  fail "the bundle's contents:"; diff <(sort <<<"$expected") <(echo "$listed") || true
fi
tar -tvzf "$bundle" | awk '$2 != "0/0" { bad = 1 } END { exit bad }' && ok "every entry is owned by 0/0" ||
  fail "entries not owned by 0/0"

mkdir "$work/unpacked"
tar -xzf "$bundle" -C "$work/unpacked"
[ "$(cat "$work/unpacked/$name/VERSION")" = "$(printf 'version=9.9.9-check\ncommit=0123456789ab')" ] &&
  ok "VERSION names the version and the binaries' commit" ||
  fail "VERSION is $(tr '\n' ' ' <"$work/unpacked/$name/VERSION")"
for binary in "${binaries[@]}"; do
  [ -x "$work/unpacked/$name/bin/$binary" ] &&
    [ "$("$work/unpacked/$name/bin/$binary" --version)" = "$binary $version (commit 0123456789ab)" ] ||
    fail "bin/$binary is not the binary given, executable"
done
for unit in deploy/systemd/*.service; do
  cmp -s "$unit" "$work/unpacked/$name/systemd/$(basename "$unit")" || fail "systemd/$(basename "$unit") differs from $unit"
done

scripts/package.sh --bin-dir "$work/bin" --version 9.9.9-check --out "$work/again" >/dev/null 2>&1
[ "$(sha256sum <"$work/again/$name.tar.gz")" = "$(sha256sum <"$bundle")" ] &&
  ok "a second bundle of the same binaries is byte for byte the same" || fail "the bundle is not reproducible"

# --- binaries package.sh must refuse ----------------------------------------------------------
# refused NAME EXPECTED_MESSAGE WHAT: package.sh must refuse the stand-ins in $work/NAME.
refused() {
  if scripts/package.sh --bin-dir "$work/$1" --out "$work/refused-$1" >"$work/$1.log" 2>&1; then
    fail "package.sh bundled $3"
  elif ! grep -qF "$2" "$work/$1.log"; then
    fail "no clear message for $3: $(cat "$work/$1.log")"
  elif [ -n "$(ls -A "$work/refused-$1" 2>/dev/null)" ]; then
    fail "package.sh refused $3 but wrote a bundle"
  else
    ok "$3 are refused"
  fi
}
stand_ins "$work/old" 0.0.1 0123456789ab
refused old "not \`floe-broker $version (commit …)\`" "binaries of another version"
stand_ins "$work/mixed" "$version" 0123456789ab
printf '#!/bin/sh\necho "floe %s (commit ba9876543210)"\n' "$version" >"$work/mixed/floe"
refused mixed "built from commit ba9876543210" "binaries of two commits"

# --- the real binaries' version lines ----------------------------------------------------------
bin_dir=${FLOE_BIN_DIR:-${CARGO_TARGET_DIR:-target}/debug}
for binary in "${binaries[@]}"; do
  [ -x "$bin_dir/$binary" ] || { echo "note: no $bin_dir/$binary; its version line is not checked"; continue; }
  line=$("$bin_dir/$binary" --version)
  [[ "$line" =~ ^"$binary $version (commit "[0-9a-z]+")"$ ]] && ok "$bin_dir/$binary --version: $line" ||
    fail "$bin_dir/$binary --version says \`$line\`, which package.sh would refuse"
done

exit $((failures > 0))

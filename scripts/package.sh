#!/usr/bin/env bash
# Builds Floe's release bundle: the three binaries (floe-broker, floe-controlplane with the
# aws-asg driver, floe), the systemd units, the AWS deployment guide and a VERSION file, as
#   dist/floe-<version>-<arch>-linux.tar.gz
# and prints its SHA-256 (Terraform's release_sha256). Machines install it at first boot from
# s3://<bucket>/releases/ (--upload <bucket>) or from the URL in release_url.
#
#   scripts/package.sh [--version V] [--out DIR] [--upload BUCKET] [--no-build]
#
# The version defaults to the workspace's, with the commit appended when the tree has
# uncommitted changes. Binaries are picked by name from a `cargo build --release --bins` of
# the whole workspace, so it does not matter which package holds which binary.
set -euo pipefail
cd "$(dirname "$0")/.."

version="" out=dist upload="" build=1
while (($#)); do
  case "$1" in
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --upload) upload=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -z "$version" ]; then
  version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
  if [ -n "$(git status --porcelain 2>/dev/null)" ]; then version="$version+$commit.dirty"; fi
fi
case "$(uname -m)" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac
target_dir=${CARGO_TARGET_DIR:-target}

if ((build)); then
  # The commit is compiled into floe_build_info.
  FLOE_BUILD_COMMIT=$commit cargo build --release --locked --workspace --bins \
    --features floe-controlplane/aws-asg
fi

name="floe-$version-$arch-linux"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin" "$stage/$name/systemd" "$stage/$name/docs"
for binary in floe-broker floe-controlplane floe; do
  [ -x "$target_dir/release/$binary" ] || { echo "no $target_dir/release/$binary" >&2; exit 1; }
  install -m 0755 "$target_dir/release/$binary" "$stage/$name/bin/"
done
install -m 0644 deploy/systemd/*.service "$stage/$name/systemd/"
install -m 0644 docs/deploy-aws.md "$stage/$name/docs/"
printf 'version=%s\ncommit=%s\n' "$version" "$commit" >"$stage/$name/VERSION"

mkdir -p "$out"
bundle="$out/$name.tar.gz"
# Reproducible: fixed owner, order and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00Z' \
  -C "$stage" -czf "$bundle" "$name"
sha=$(sha256sum "$bundle" | cut -d' ' -f1)
echo "$bundle"
echo "sha256 $sha"

if [ -n "$upload" ]; then
  aws s3 cp --only-show-errors "$bundle" "s3://$upload/releases/$name.tar.gz"
  echo "uploaded to s3://$upload/releases/$name.tar.gz"
fi

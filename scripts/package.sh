#!/usr/bin/env bash
# Builds Floe's release bundle: the three binaries (floe-broker, floe-controlplane with the
# aws-asg driver, floe), the systemd units, the AWS deployment guide and a VERSION file, as
#   dist/floe-<version>-<arch>-linux.tar.gz
# and prints its SHA-256 (Terraform's release_sha256). Machines install it at first boot from
# s3://<bucket>/releases/ (--upload <bucket>) or from the URL in release_url.
#
#   scripts/package.sh [--version V] [--out DIR] [--upload BUCKET] [--no-build | --bin-dir DIR]
#
# The version defaults to the workspace's, with the commit appended when tracked files have
# uncommitted changes. Binaries are picked by name from a `cargo build --release --bins` of
# the whole workspace, so it does not matter which package holds which binary; --no-build
# bundles what target/release already holds, --bin-dir DIR the binaries in DIR (a debug
# build, for deploy/check-bundle.sh). Each binary's `--version` must name the workspace's
# version and the same commit, which VERSION records: the commit built here, unless the
# binaries come from elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

version="" out=dist upload="" build=1 bin_dir=""
while (($#)); do
  case "$1" in
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --upload) upload=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --bin-dir) bin_dir=$2; build=0; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
workspace_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
if [ -z "$version" ]; then
  version=$workspace_version
  # Untracked files (a previous bundle in dist/, scratch files) do not change the build.
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    version="$version+$commit.dirty"
  fi
fi
case "$(uname -m)" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac
target_dir=${CARGO_TARGET_DIR:-target}

if ((build)); then
  # The commit is compiled into floe_build_info and `--version`.
  FLOE_BUILD_COMMIT=$commit cargo build --release --locked --workspace --bins \
    --features floe-controlplane/aws-asg
fi
bin_dir=${bin_dir:-$target_dir/release}

# Every binary must say the workspace's version and one commit: a binary left over from
# another build is refused rather than shipped under this version.
binaries_commit=""
for binary in floe-broker floe-controlplane floe; do
  [ -x "$bin_dir/$binary" ] || { echo "no $bin_dir/$binary" >&2; exit 1; }
  line=$("$bin_dir/$binary" --version)
  named=${line#"$binary $workspace_version (commit "}
  named=${named%")"}
  if [ "$line" != "$binary $workspace_version (commit $named)" ] || [ -z "$named" ]; then
    echo "$bin_dir/$binary --version says \`$line\`, not \`$binary $workspace_version (commit …)\`" >&2
    exit 1
  fi
  if [ -n "$binaries_commit" ] && [ "$named" != "$binaries_commit" ]; then
    echo "$bin_dir/$binary was built from commit $named, the others from $binaries_commit" >&2
    exit 1
  fi
  binaries_commit=$named
done
if ((build)) && [ "$binaries_commit" != "$commit" ]; then
  echo "built at commit $commit, but the binaries name $binaries_commit" >&2
  exit 1
fi

name="floe-$version-$arch-linux"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin" "$stage/$name/systemd" "$stage/$name/docs"
for binary in floe-broker floe-controlplane floe; do
  install -m 0755 "$bin_dir/$binary" "$stage/$name/bin/"
done
install -m 0644 deploy/systemd/*.service "$stage/$name/systemd/"
install -m 0644 docs/deploy-aws.md "$stage/$name/docs/"
printf 'version=%s\ncommit=%s\n' "$version" "$binaries_commit" >"$stage/$name/VERSION"

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

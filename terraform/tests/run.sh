#!/usr/bin/env bash
# Tests the AWS deployment offline, in under three minutes:
#   - `terraform fmt -check`, `validate` and checkov (no failed check but the skips written,
#     with their reasons, in the code);
#   - `terraform apply` of a copy of terraform/examples/aws against a private moto server
#     (the provider pointed at it by a generated *_override.tf), then checks of what was
#     created (terraform/tests/check_created.py): bucket, IAM (read replicas cannot put or
#     delete), groups, security groups, database, load balancers, user data;
#   - the controlplane's aws-asg driver scales the read-replica group Terraform created, with
#     credentials that reach it through the AWS SDK's chain (a shared credentials file), and
#     refuses to start without credentials or with a wrong group name;
#   - `terraform destroy`;
#   - beside the apply: `cloud-init schema` of the rendered user data, `systemd-analyze
#     verify` and `security` of deploy/systemd, `promtool check rules`, and
#     deploy/check-metrics.sh (every metric the dashboard and rules name is exported).
#
# Needs terraform and the hashicorp/aws provider in a local plugin mirror (skips without
# them), .venv with moto, boto3 and checkov (scripts/install-test-deps.sh), promtool and
# cloud-init (same), and the built binaries: floe-controlplane with the aws-asg feature and
# floe-broker, in $FLOE_BIN_DIR (default: target/debug or $CARGO_TARGET_DIR/debug).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
started=$SECONDS
say() { echo "[terraform test ${SECONDS}s] $*"; }

terraform_bin=$(command -v terraform || true)
mirror=""
for candidate in /opt/tf-plugins /usr/share/terraform/plugins /usr/local/share/terraform/plugins \
  "$HOME/.terraform.d/plugins" "$HOME/.local/share/terraform/plugins"; do
  if [ -d "$candidate/registry.terraform.io/hashicorp/aws" ]; then mirror=$candidate; break; fi
done
if [ -z "$mirror" ]; then
  mirror=$(find / -maxdepth 6 -type d -path '*/registry.terraform.io/hashicorp/aws' 2>/dev/null | head -n 1 || true)
  mirror=${mirror%/registry.terraform.io/hashicorp/aws}
fi
if [ -z "$terraform_bin" ] || [ -z "$mirror" ]; then
  echo "note: skipping the Terraform test: needs terraform on PATH (found: ${terraform_bin:-none})" \
    "and a plugin mirror holding registry.terraform.io/hashicorp/aws (found: ${mirror:-none});" \
    "neither can be downloaded here"
  exit 0
fi

venv=$root/.venv/bin
bin_dir=${FLOE_BIN_DIR:-${CARGO_TARGET_DIR:-$root/target}/debug}
for tool in "$venv/python" "$venv/moto_server" "$venv/checkov" "$bin_dir/floe-controlplane" "$bin_dir/floe-broker"; do
  [ -x "$tool" ] || { echo "missing $tool (scripts/install-test-deps.sh, cargo build)" >&2; exit 1; }
done
for tool in promtool cloud-init systemd-analyze; do
  command -v "$tool" >/dev/null || { echo "missing $tool (scripts/install-test-deps.sh)" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# No user CLI configuration: only the mirror.
: >"$work/terraformrc"
export TF_CLI_CONFIG_FILE=$work/terraformrc TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1

# --- static checks, in the background while Terraform runs ----------------------------
say "static checks start in the background"
(
  cd "$root/terraform"
  "$venv/checkov" --quiet --compact --framework terraform --download-external-modules false --skip-download \
    --skip-path tests -d . >"$work/checkov.log" 2>&1
) &
checkov_pid=$!
(deploy/check-units.sh >"$work/units.log" 2>&1) &
units_pid=$!
(promtool check rules deploy/prometheus/*.yml >"$work/promtool.log" 2>&1) &
promtool_pid=$!
(terraform fmt -recursive -check terraform >"$work/fmt.log" 2>&1) &
fmt_pid=$!
(FLOE_BIN_DIR=$bin_dir deploy/check-metrics.sh >"$work/metrics.log" 2>&1) &
metrics_pid=$!
pids+=("$checkov_pid" "$units_pid" "$promtool_pid" "$metrics_pid" "$fmt_pid")

# --- moto ---------------------------------------------------------------------------------
port=$("$venv/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
"$venv/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
pids+=($!)

# --- validate, apply -------------------------------------------------------------------
mkdir -p "$work/tree"
cp -r terraform deploy "$work/tree/"
example=$work/tree/terraform/examples/aws
sed "s#\${endpoint}#$endpoint#g" terraform/tests/override.tf.tftpl >"$example/moto_override.tf"
cd "$example"
terraform init -backend=false -input=false -plugin-dir "$mirror" >"$work/init.log"
say "terraform validate"
terraform validate -no-color
# moto started meanwhile.
for _ in $(seq 1 100); do
  "$venv/python" -c "import urllib.request; urllib.request.urlopen('$endpoint/')" 2>/dev/null && break
  sleep 0.1
done
say "terraform apply (moto at $endpoint)"
apply_started=$SECONDS
terraform apply -auto-approve -input=false -no-color -parallelism=30 \
  -var-file="$root/terraform/tests/moto.tfvars.json" >"$work/apply.log" 2>&1 ||
  { tail -n 40 "$work/apply.log"; exit 1; }
say "applied in $((SECONDS - apply_started))s"
destroy() {
  say "terraform destroy"
  local destroy_started=$SECONDS
  # The state is what apply just wrote: no refresh.
  terraform destroy -auto-approve -input=false -no-color -parallelism=30 -refresh=false \
    -var-file="$root/terraform/tests/moto.tfvars.json" >"$work/destroy.log" 2>&1 ||
    { tail -n 40 "$work/destroy.log"; return 1; }
  say "destroyed in $((SECONDS - destroy_started))s"
}

status=0
terraform output -json >"$work/outputs.json"

say "checking what was created"
"$venv/python" "$root/terraform/tests/check_created.py" "$endpoint" "$work/outputs.json" \
  "$root/terraform/tests/moto.tfvars.json" "$work/user-data" || status=1

# The driver's test runs beside the schema checks (after the checks of what exists: it
# changes the group's desired capacity).
say "the controlplane's driver scales the read-replica group (in the background)"
"$root/terraform/tests/scale_group.sh" "$endpoint" "$(terraform output -raw read_replica_group)" \
  "$bin_dir/floe-controlplane" "$work/scale" >"$work/scale.log" 2>&1 &
scale_pid=$!
pids+=("$scale_pid")

say "cloud-init schema of the rendered user data"
for file in "$work"/user-data/*.yaml; do
  if cloud-init schema --config-file "$file" >"$work/cloud-init.log" 2>&1; then
    echo "ok   $(cat "$work/cloud-init.log")"
  else
    echo "FAIL cloud-init schema $(basename "$file")"; cat "$work/cloud-init.log"; status=1
  fi
done

if wait "$scale_pid"; then cat "$work/scale.log"; else cat "$work/scale.log"; status=1; fi

destroy || status=1

# --- collect the background checks -------------------------------------------------------
check() {
  local name=$1 pid=$2 log=$3
  if wait "$pid"; then say "ok   $name"; else say "FAIL $name"; cat "$log"; status=1; fi
}
check "terraform fmt -check" "$fmt_pid" "$work/fmt.log"
check checkov "$checkov_pid" "$work/checkov.log"
check "systemd units" "$units_pid" "$work/units.log"
cat "$work/units.log"
check "promtool check rules" "$promtool_pid" "$work/promtool.log"
check "dashboard and alert metrics are exported" "$metrics_pid" "$work/metrics.log"
cat "$work/metrics.log"

say "done in $((SECONDS - started))s (status $status)"
exit "$status"

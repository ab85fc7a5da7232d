#!/usr/bin/env bash
# Tests the AWS deployment offline, in under three minutes:
#   - `terraform apply` of a copy of terraform/examples/aws against a private moto server
#     (the provider pointed at it by terraform/tests/moto_override.tf, copied beside the
#     example, and AWS_ENDPOINT_URL), then checks of what was created
#     (terraform/tests/check_created.py): bucket, IAM (read replicas cannot put or delete),
#     groups, security groups, database, load balancers, user data;
#   - the controlplane's aws-asg driver scales the read-replica group Terraform created, with
#     credentials that reach it through the AWS SDK's chain (a shared credentials file), and
#     refuses to start without credentials or with a wrong group name;
#   - `terraform destroy`;
#   - beside the apply: `terraform validate`, `fmt -check` and checkov (no failed check but
#     the skips written, with their reasons, in the code), `systemd-analyze verify` and
#     `security` of deploy/systemd, `promtool check rules`, and deploy/check-metrics.sh (every
#     metric the dashboard and rules name is exported); beside the destroy, `cloud-init
#     schema` of the rendered user data, and each --config file in it checked by the binary
#     its unit runs (`--check-config`, terraform/tests/check_config_files.py).
#
# Needs terraform and the hashicorp/aws provider in a local plugin mirror (skips without
# them), .venv with moto, boto3 and checkov (scripts/install-test-deps.sh), promtool and
# cloud-init (same), and the built binaries: floe-controlplane with the aws-asg feature,
# floe-broker and floe, in $FLOE_BIN_DIR (default: target/debug or $CARGO_TARGET_DIR/debug).
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
for tool in "$venv/python" "$venv/moto_server" "$venv/checkov" "$bin_dir/floe-controlplane" "$bin_dir/floe-broker" \
  "$bin_dir/floe"; do
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
# Terraform and the provider allocate heavily while loading the provider's schema, at every
# command: collecting garbage less often saves about 1 s of CPU a command (for some memory).
export GOGC=400

# Where the time goes: the provider waits a fixed 80 s for a new database to be available
# and 60 s for a deleted one to be gone, and 10 s after creating the VPC before the database
# can be created; every terraform command spends seconds starting the provider. So what does
# not need the applied resources runs beside those waits, while a command's planning has the
# two cores to itself.

# --- moto and a copy of the example ------------------------------------------------------
port=$("$venv/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
"$venv/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
pids+=($!)
mkdir -p "$work/tree"
cp -r terraform deploy "$work/tree/"
example=$work/tree/terraform/examples/aws
cp terraform/tests/moto_override.tf "$example/"
cd "$example"
# The provider finds moto through AWS_ENDPOINT_URL (see moto_override.tf), set for terraform
# alone: the other programs here are given the endpoint explicitly.
tf() { AWS_ENDPOINT_URL=$endpoint terraform "$@"; }
say "terraform init (moto starts meanwhile)"
terraform init -backend=false -input=false -plugin-dir "$mirror" >"$work/init.log"
"$venv/python" - "$endpoint" <<'PYTHON' || { cat "$work/moto.log"; exit 1; }
import sys, time, urllib.request
deadline = time.monotonic() + 30
while True:
    try:
        urllib.request.urlopen(sys.argv[1] + "/")
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"moto did not answer at {sys.argv[1]} within 30 s")
        time.sleep(0.1)
PYTHON
# moto loads a service on its first request; EC2's takes seconds, and the plan's first read
# is of EC2. Load it (and SSM, for the AMI parameter) while terraform starts the provider.
warm() {
  curl -fsS -o /dev/null -H "Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/$1/aws4_request, SignedHeaders=host, Signature=0" \
    "${@:2}" "$endpoint/"
}
(
  warm ec2 --data 'Action=DescribeAvailabilityZones&Version=2016-11-15'
  warm ssm -H 'X-Amz-Target: AmazonSSM.GetParameter' -H 'Content-Type: application/x-amz-json-1.1' \
    --data '{"Name":"/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"}'
) >"$work/warm.log" 2>&1 &
pids+=($!)

# --- apply, and beside its waits the checks that need nothing from it --------------------
say "terraform apply (moto at $endpoint)"
apply_started=$SECONDS
: >"$work/apply.log"
tf apply -auto-approve -input=false -no-color -parallelism=30 \
  -var-file="$root/terraform/tests/moto.tfvars.json" >"$work/apply.log" 2>&1 &
apply_pid=$!
pids+=("$apply_pid")
# Once the database is being created the apply mostly sleeps (80 s, in the provider): the
# static checks start then, so that they take no CPU from the planning or from moto's first
# burst of requests, which are on the way to the database.
until grep -q 'aws_db_instance\.[a-z_]*: Creating\.\.\.' "$work/apply.log"; do
  kill -0 "$apply_pid" 2>/dev/null || break
  sleep 0.2
done
say "static checks start beside the apply"
(terraform validate -no-color >"$work/validate.log" 2>&1) &
validate_pid=$!
(terraform fmt -recursive -check "$root/terraform" >"$work/fmt.log" 2>&1) &
fmt_pid=$!
(
  cd "$root/terraform"
  "$venv/checkov" --quiet --compact --framework terraform --download-external-modules false --skip-download \
    --skip-path tests -d . >"$work/checkov.log" 2>&1
) &
checkov_pid=$!
(cd "$root" && deploy/check-units.sh >"$work/units.log" 2>&1) &
units_pid=$!
(cd "$root" && promtool check rules deploy/prometheus/*.yml >"$work/promtool.log" 2>&1) &
promtool_pid=$!
(cd "$root" && FLOE_BIN_DIR=$bin_dir deploy/check-metrics.sh >"$work/metrics.log" 2>&1) &
metrics_pid=$!
pids+=("$validate_pid" "$fmt_pid" "$checkov_pid" "$units_pid" "$promtool_pid" "$metrics_pid")

wait "$apply_pid" || { tail -n 40 "$work/apply.log"; exit 1; }
say "applied in $((SECONDS - apply_started))s"

# --- what was created, while the destroy plans ---------------------------------------------
status=0
terraform output -json >"$work/outputs.json"
group=$("$venv/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["read_replica_group"]["value"])' \
  "$work/outputs.json")
# terraform destroy plans (seconds of starting the provider) and then asks for approval on
# its standard input, a pipe that gets "yes" only once the checks below are done: nothing is
# destroyed before. The plan reads only the state apply wrote (no refresh); the checks change
# nothing Terraform manages but the group's desired capacity, which it ignores.
say "terraform destroy plans, waiting for approval"
mkfifo "$work/approval"
tf destroy -refresh=false -no-color -parallelism=30 -var-file="$root/terraform/tests/moto.tfvars.json" \
  <"$work/approval" >"$work/destroy.log" 2>&1 &
destroy_pid=$!
pids+=("$destroy_pid")
exec {approval}>"$work/approval"

say "checking what was created"
"$venv/python" "$root/terraform/tests/check_created.py" "$endpoint" "$work/outputs.json" \
  "$root/terraform/tests/moto.tfvars.json" "$work/user-data" || status=1

# After the checks of what exists: the driver's test changes the group's desired capacity
# (and sets it back to 0, so that destroy does not wait for instances).
say "the controlplane's driver scales the read-replica group"
"$root/terraform/tests/scale_group.sh" "$endpoint" "$group" "$bin_dir/floe-controlplane" \
  "$work/scale" >"$work/scale.log" 2>&1 || status=1
cat "$work/scale.log"

say "terraform destroy approved"
destroy_started=$SECONDS
# (In a subshell: should terraform have exited already, the write's SIGPIPE ends only that.)
(echo yes >&"$approval") 2>/dev/null || true
exec {approval}>&-

# The user data check_created.py saved is checked beside the destroy.
say "cloud-init schema of the rendered user data"
for file in "$work"/user-data/*.yaml; do
  if cloud-init schema --config-file "$file" >"$work/cloud-init.log" 2>&1; then
    echo "ok   $(cat "$work/cloud-init.log")"
  else
    echo "FAIL cloud-init schema $(basename "$file")"; cat "$work/cloud-init.log"; status=1
  fi
done

# The --config files in it, beside the destroy too: each role's unit runs its binary on them.
say "the binaries accept the --config files of the rendered user data"
"$venv/python" "$root/terraform/tests/check_config_files.py" "$work/user-data" "$root/deploy/systemd" \
  "$bin_dir" "$work/config" || status=1

if wait "$destroy_pid" && grep -q '^Destroy complete!' "$work/destroy.log"; then
  say "destroyed in $((SECONDS - destroy_started))s after approval"
else
  tail -n 40 "$work/destroy.log"; status=1
fi

# --- collect the background checks -------------------------------------------------------
check() {
  local name=$1 pid=$2 log=$3
  if wait "$pid"; then say "ok   $name"; else say "FAIL $name"; cat "$log"; status=1; fi
}
check "terraform validate" "$validate_pid" "$work/validate.log"
check "terraform fmt -check" "$fmt_pid" "$work/fmt.log"
check checkov "$checkov_pid" "$work/checkov.log"
check "systemd units" "$units_pid" "$work/units.log"
cat "$work/units.log"
check "promtool check rules" "$promtool_pid" "$work/promtool.log"
check "dashboard and alert metrics are exported" "$metrics_pid" "$work/metrics.log"
cat "$work/metrics.log"

say "done in $((SECONDS - started))s (status $status)"
exit "$status"

#!/usr/bin/env bash
# The controlplane's aws-asg driver against the read-replica group Terraform created on moto:
#   scale_group.sh ENDPOINT GROUP FLOE_CONTROLPLANE WORKDIR
# Credentials reach the driver only through the AWS SDK's chain: a shared credentials file
# and a profile (no AWS_* keys in the environment, instance metadata off). Checks that
#   1. a group that does not exist stops the start, with a message naming it;
#   2. no credentials at all stop the start, with a message saying so;
#   3. a scaling policy of at least two replicas sets the group's desired capacity to 2.
set -euo pipefail
endpoint=$1 group=$2 controlplane=$3 work=$4
python=$(dirname "$0")/../../.venv/bin/python
mkdir -p "$work"
cat >"$work/credentials" <<'EOF'
[floe-test]
aws_access_key_id = test
aws_secret_access_key = test
EOF
cat >"$work/config" <<'EOF'
[profile floe-test]
region = us-east-1
EOF
: >"$work/empty"

# Runs the controlplane with only what the SDK chain needs; $credentials picks the file, and
# $limit how long it may run (0: no limit). It execs, so that a `run ... &` leaves in $! the
# process that passes a signal on to the controlplane (and not a subshell whose death would
# leave the controlplane running): call it in a subshell or in the background.
limit=0
run() {
  local name=$1
  shift
  exec timeout "$limit" env -i PATH="$PATH" HOME="$work" \
    AWS_SHARED_CREDENTIALS_FILE="$credentials" AWS_CONFIG_FILE="$work/config" \
    AWS_PROFILE=floe-test AWS_EC2_METADATA_DISABLED=true \
    FLOE_AWS_ENDPOINT_URL="$endpoint" FLOE_LOG=info FLOE_ADMIN_TOKEN=test-token \
    "$controlplane" --data-dir "$work/$name" --listen 127.0.0.1:0 --insecure-plain-http \
    --autoscale-interval-ms 200 "$@"
}

fail() { echo "FAIL $*"; exit 1; }

# 1. A wrong group name.
credentials=$work/credentials limit=60
code=0
(run missing --aws-autoscaling-group no-such-group) >"$work/missing.out" 2>"$work/missing.err" || code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] || fail "the controlplane started with a group that does not exist"
grep -q "no autoscaling group named \`no-such-group\`" "$work/missing.err" ||
  { cat "$work/missing.err"; fail "no clear message for a missing group"; }
echo "ok   a missing group stops the start: $(grep -o 'no autoscaling group named[^"]*' "$work/missing.err" | head -n 1)"

# 2. No credentials anywhere in the chain.
credentials=$work/empty
code=0
(run nocreds --aws-autoscaling-group "$group") >"$work/nocreds.out" 2>"$work/nocreds.err" || code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] || fail "the controlplane started without credentials"
grep -q "no AWS credentials" "$work/nocreds.err" ||
  { cat "$work/nocreds.err"; fail "no clear message for missing credentials"; }
echo "ok   no credentials stop the start"

# 3. Scaling through the shared profile.
credentials=$work/credentials limit=0
run scale --aws-autoscaling-group "$group" >"$work/scale.out" 2>"$work/scale.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
address=""
for _ in $(seq 1 300); do
  address=$(sed -n 's#^floe-controlplane listening on http://##p' "$work/scale.out")
  [ -n "$address" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/scale.err"; fail "the controlplane exited"; }
  sleep 0.1
done
[ -n "$address" ] || fail "the controlplane never listened"
curl -fsS -X PUT -H 'Authorization: Bearer test-token' -H 'Content-Type: application/json' \
  --data '{"min_replicas":2,"max_replicas":4,"target_bytes_per_second":104857600,"target_consumers":1000,"hysteresis_percent":20,"scale_up_cooldown_ms":0,"scale_down_cooldown_ms":0}' \
  "http://$address/v1/scaling-policy" >/dev/null
"$python" - "$endpoint" "$group" <<'EOF' || { cat "$work/scale.err"; fail "the group was not scaled"; }
import sys, time, boto3
endpoint, group = sys.argv[1:3]
autoscaling = boto3.client("autoscaling", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="test", aws_secret_access_key="test")
deadline = time.monotonic() + 30
while True:
    desired = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]["DesiredCapacity"]
    if desired == 2:
        print(f"ok   the controlplane set {group}'s desired capacity to {desired} (DescribeAutoScalingGroups)")
        # Back to empty, so that destroy does not wait for the instances moto launched.
        autoscaling.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=0)
        break
    if time.monotonic() > deadline:
        print(f"FAIL desired capacity is {desired}, not 2, after 30 s")
        sys.exit(1)
    time.sleep(0.2)
EOF
kill -TERM "$pid"
wait "$pid" || true

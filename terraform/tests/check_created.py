"""Checks what `terraform apply` of terraform/examples/aws created on a moto server.

Usage: check_created.py ENDPOINT OUTPUTS_JSON TFVARS_JSON USER_DATA_DIR

Reads the example's outputs (`terraform output -json`) and test variables, asks the server
what exists, and fails (exit 1) with one line per broken expectation. Writes every rendered
cloud-init user data it finds into USER_DATA_DIR for `cloud-init schema`.

IAM is checked by evaluating the roles' policy documents: moto has no policy simulator. The
evaluator below follows IAM's rules for what it supports (Allow/Deny, Action/Resource with
wildcards); conditions can only narrow an Allow, so ignoring them can only make the check
stricter for "must not be allowed" expectations.
"""

import base64
import fnmatch
import json
import os
import sys
import urllib.parse

import boto3

endpoint, outputs_path, tfvars_path, user_data_dir = sys.argv[1:5]
outputs = {k: v["value"] for k, v in json.load(open(outputs_path)).items()}
tfvars = json.load(open(tfvars_path))
session = boto3.session.Session(
    aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
)


def client(name):
    return session.client(name, endpoint_url=endpoint)


failures = []


def expect(condition, what):
    if not condition:
        failures.append(what)
    print(("ok   " if condition else "FAIL ") + what)


# --- bucket -------------------------------------------------------------------------------
s3 = client("s3")
bucket = outputs["bucket"]
block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
expect(all(block.values()) and len(block) == 4, f"bucket {bucket} blocks all public access")
rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
expect(
    rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms"),
    "bucket is encrypted by default",
)
lifecycle = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
expect(
    any(r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation") for r in lifecycle),
    "incomplete multipart uploads are aborted",
)
policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
expect(
    any(
        st["Effect"] == "Deny"
        and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") in ("false", ["false"])
        for st in policy["Statement"]
    ),
    "bucket policy refuses plain HTTP",
)

# --- IAM ----------------------------------------------------------------------------------
iam = client("iam")


def statements(role):
    found = []
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        if isinstance(doc, str):
            doc = json.loads(urllib.parse.unquote(doc))
        found.extend(doc["Statement"])
    for attached in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]:
        found.append({"Effect": "Allow", "Action": "*", "Resource": "*", "attached": attached})
    return found


def as_list(value):
    return value if isinstance(value, list) else [value]


def allowed(role_statements, action, resource):
    def matches(st):
        return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(st["Action"])) and any(
            fnmatch.fnmatchcase(resource, r) for r in as_list(st["Resource"])
        )

    if any(st["Effect"] == "Deny" and matches(st) for st in role_statements):
        return False
    return any(st["Effect"] == "Allow" and matches(st) for st in role_statements)


roles = {key: arn.split("/")[-1] for key, arn in outputs["role_arns"].items()}
policies = {key: statements(name) for key, name in roles.items()}
objects = f"arn:aws:s3:::{bucket}/floe/some-stream/0/segments/x.seg"
for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
    expect(not allowed(policies["read_replica"], action, objects), f"read replicas may not {action}")
    expect(allowed(policies["broker"], action, objects), f"brokers may {action} under the prefix")
expect(allowed(policies["read_replica"], "s3:GetObject", objects), "read replicas may GetObject")
expect(
    allowed(policies["read_replica"], "s3:ListBucket", f"arn:aws:s3:::{bucket}"),
    "read replicas may ListBucket (prefix-conditioned)",
)
expect(
    not allowed(policies["broker"], "s3:PutObject", f"arn:aws:s3:::{bucket}/releases/x.tar.gz"),
    "brokers may not overwrite release bundles",
)
for role in roles:
    expect(
        not any(a.get("attached") for a in policies[role]), f"{role} role has no attached managed policy (enable_ssm=false)"
    )

autoscaling = client("autoscaling")
groups = {
    g["AutoScalingGroupName"]: g
    for g in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
}
replicas = groups[outputs["read_replica_group"]]
controlplanes = groups[f"{tfvars['name']}-controlplane"]
cp = policies["controlplane"]
for action in ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"):
    expect(allowed(cp, action, replicas["AutoScalingGroupARN"]), f"controlplanes may {action} on the read replicas")
    expect(not allowed(cp, action, controlplanes["AutoScalingGroupARN"]), f"controlplanes may not {action} on other groups")
expect(allowed(cp, "autoscaling:DescribeAutoScalingGroups", "*"), "controlplanes may describe groups")
for role in ("broker", "read_replica"):
    expect(
        not allowed(policies[role], "autoscaling:SetDesiredCapacity", replicas["AutoScalingGroupARN"]),
        f"{role} may not scale",
    )

peer_ca_secret = outputs["peer_ca_secret_arn"]
expect(allowed(cp, "secretsmanager:GetSecretValue", peer_ca_secret), "controlplanes may read the peer CA's key")
for role in ("broker", "read_replica"):
    expect(
        not allowed(policies[role], "secretsmanager:GetSecretValue", peer_ca_secret),
        f"{role} may not read the peer CA's key (it could pose as any broker)",
    )

# --- groups -------------------------------------------------------------------------------
expect(replicas["MinSize"] == 0, "read replica group's minimum is 0")
expect(replicas["MaxSize"] == 8, "read replica group's maximum is read_replica_max (8)")
expect(replicas["DesiredCapacity"] == 0, "read replica group starts empty")
expect(
    (controlplanes["MinSize"], controlplanes["MaxSize"], controlplanes["DesiredCapacity"]) == (2, 2, 2),
    "two controlplanes",
)

# --- security groups ----------------------------------------------------------------------
ec2 = client("ec2")
described = ec2.describe_security_groups(
    Filters=[{"Name": "tag:floe:cluster", "Values": [tfvars["name"]]}]
)["SecurityGroups"]
by_name = {g["GroupName"].removeprefix(tfvars["name"] + "-"): g for g in described}
id_to_name = {g["GroupId"]: n for n, g in by_name.items()}


def ingress(name):
    rules = set()
    for perm in by_name[name]["IpPermissions"]:
        port = (perm["IpProtocol"], perm.get("FromPort"), perm.get("ToPort"))
        for r in perm.get("IpRanges", []):
            rules.add((*port, r["CidrIp"]))
        for r in perm.get("UserIdGroupPairs", []):
            rules.add((*port, "sg:" + id_to_name.get(r["GroupId"], r["GroupId"])))
    return rules


clients = tfvars["client_cidrs"]
operators = tfvars["operator_cidrs"]
monitoring = tfvars["monitoring_cidrs"]
expected = {
    "broker": {("udp", 7100, 7100, c) for c in clients}
    | {("udp", 7100, 7100, "sg:read-replica"), ("udp", 7200, 7200, "sg:broker")}
    | {("tcp", 7180, 7180, c) for c in monitoring}
    | {("tcp", 7180, 7180, "sg:lb-internal"), ("tcp", 7180, 7180, "sg:lb-public")},
    "read-replica": {("udp", 7150, 7150, c) for c in clients} | {("tcp", 7180, 7180, c) for c in monitoring},
    "controlplane": {("tcp", 7300, 7300, c) for c in monitoring}
    | {("tcp", 7300, 7300, "sg:" + g) for g in ("broker", "read-replica", "lb-internal", "lb-public")},
    "database": {("tcp", 5432, 5432, "sg:controlplane")},
    "lb-internal": {("tcp", 7300, 7300, c) for c in operators}
    | {("udp", 7100, 7100, c) for c in clients}
    | {("tcp", 7300, 7300, "sg:broker"), ("tcp", 7300, 7300, "sg:read-replica")},
    "lb-public": {("tcp", 7300, 7300, c) for c in operators} | {("udp", 7100, 7100, c) for c in clients},
}
for name, rules in expected.items():
    actual = ingress(name)
    expect(actual == rules, f"security group {name} admits exactly what it should"
           + ("" if actual == rules else f": extra {sorted(actual - rules)}, missing {sorted(rules - actual)}"))
open_world = [n for n in by_name if any(r[3] == "0.0.0.0/0" for r in ingress(n))]
expect(not open_world, f"no security group admits 0.0.0.0/0 ({open_world})")

# --- database, machines, load balancers ---------------------------------------------------
rds = client("rds")
db = rds.describe_db_instances(DBInstanceIdentifier=f"{tfvars['name']}-metadata")["DBInstances"][0]
expect(db["StorageEncrypted"], "database storage is encrypted")
expect(db["MultiAZ"], "database is Multi-AZ by default")
expect(not db["PubliclyAccessible"], "database is not publicly accessible")
expect("MasterUserSecret" in db, "database password is managed by RDS (Secrets Manager)")

instances = [
    i
    for r in ec2.describe_instances(Filters=[{"Name": "tag:floe:role", "Values": ["broker"]}])["Reservations"]
    for i in r["Instances"]
    if i["State"]["Name"] != "terminated"
]
expect(len(instances) == 3, "three brokers")
expect(all(i["MetadataOptions"]["HttpTokens"] == "required" for i in instances), "brokers require IMDSv2")
volumes = ec2.describe_volumes(Filters=[{"Name": "tag:floe:broker", "Values": ["0", "1", "2"]}])["Volumes"]
expect(
    len(volumes) == 3 and all(v["Encrypted"] and v["VolumeType"] == "gp3" for v in volumes),
    "three encrypted gp3 data volumes",
)
attached = {a["InstanceId"] for v in volumes for a in v.get("Attachments", [])}
expect(attached == {i["InstanceId"] for i in instances}, "each broker has its data volume attached")

elb = client("elbv2")
balancers = elb.describe_load_balancers()["LoadBalancers"]
for lb in balancers:
    listeners = {(l["Protocol"], l["Port"]) for l in elb.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]}
    expect(listeners == {("UDP", 7100), ("TCP", 7300)}, f"load balancer {lb['LoadBalancerName']} listens on UDP 7100 and TCP 7300")

# --- rendered user data, for cloud-init schema --------------------------------------------
os.makedirs(user_data_dir, exist_ok=True)
for i in instances:
    data = ec2.describe_instance_attribute(InstanceId=i["InstanceId"], Attribute="userData")["UserData"].get("Value")
    if data:
        open(os.path.join(user_data_dir, f"broker-{i['InstanceId']}.yaml"), "wb").write(base64.b64decode(data))
for template in ec2.describe_launch_templates()["LaunchTemplates"]:
    version = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])["LaunchTemplateVersions"][0]
    data = version["LaunchTemplateData"].get("UserData")
    if data:
        open(os.path.join(user_data_dir, f"{template['LaunchTemplateName']}.yaml"), "wb").write(base64.b64decode(data))
rendered = os.listdir(user_data_dir)
expect(len(rendered) >= 5, f"user data rendered for brokers, controlplanes and read replicas ({len(rendered)} files)")

profile = json.loads(outputs["client_profile"])
expect(
    set(profile) == {"endpoint", "server_name", "ca_cert", "controlplane"} and profile["endpoint"].endswith(":7100"),
    "the client profile output is a profile `floe` reads",
)

if failures:
    print(f"{len(failures)} expectation(s) failed", file=sys.stderr)
    sys.exit(1)

"""Checks the --config files the module's machines write, with the built binaries.

    check_config_files.py USER_DATA_DIR SYSTEMD_DIR BIN_DIR WORK_DIR

For each cloud-init user data file in USER_DATA_DIR (saved by check_created.py): takes the
files it writes under /etc/floe/, finds the systemd unit its role starts (in SYSTEMD_DIR),
and runs that unit's ExecStart with `--check-config` appended: the binary from BIN_DIR, the
files from WORK_DIR in place of /etc/floe/, the environment the unit would have
(/etc/floe/floe.env as written, stand-ins for what floe-bootstrap adds: the secrets and
what only the machine knows). A key the binary does not take, a value its flag refuses, or
a unit whose command does not name the file fails the check.
"""

import os
import shlex
import subprocess
import sys

import yaml

user_data_dir, systemd_dir, bin_dir, work_dir = sys.argv[1:5]

UNITS = {
    "broker": "floe-broker.service",
    "read-replica": "floe-replica.service",
    "controlplane": "floe-controlplane.service",
}
# What floe-bootstrap writes at boot: stand-ins of the same shape.
MACHINE = {
    "broker": {"FLOE_BROKER_TOKEN": "stand-in"},
    "read-replica": {
        "FLOE_READ_REPLICA_TOKEN": "stand-in",
        "FLOE_REPLICA_ID": "i-0123456789abcdef0",
        "FLOE_ADVERTISE": "203.0.113.7:7150",
    },
    "controlplane": {
        "FLOE_ADMIN_TOKEN": "stand-in",
        "FLOE_BROKER_TOKEN": "stand-in",
        "FLOE_READ_REPLICA_TOKEN": "stand-in",
        "FLOE_DATABASE_URL": "postgres://floe:stand-in@db.internal:5432/floe",
    },
}

failures = 0
checked = set()


def environment_file(text):
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def exec_start(unit):
    with open(os.path.join(systemd_dir, unit)) as f:
        for line in f:
            if line.startswith("ExecStart="):
                return shlex.split(line.removeprefix("ExecStart=").strip())
    sys.exit(f"{unit} has no ExecStart")


for name in sorted(os.listdir(user_data_dir)):
    with open(os.path.join(user_data_dir, name)) as f:
        user_data = yaml.safe_load(f)
    files = {entry["path"]: entry["content"] for entry in user_data["write_files"]}
    role = environment_file(files["/etc/floe/bootstrap.env"])["FLOE_ROLE"]
    etc = os.path.join(work_dir, name.removesuffix(".yaml"), "etc", "floe")
    os.makedirs(etc, exist_ok=True)
    for path, content in files.items():
        if path.startswith("/etc/floe/"):
            with open(os.path.join(etc, path.removeprefix("/etc/floe/")), "w") as f:
                f.write(content)
    command = exec_start(UNITS[role])
    configs = [a for a in command if a.startswith("/etc/floe/") and a.endswith(".toml")]
    if len(configs) != 1 or configs[0] not in files:
        print(f"FAIL {name}: {UNITS[role]} runs {' '.join(command)}, which names no --config file "
              f"this machine writes ({sorted(p for p in files if p.endswith('.toml'))})")
        failures += 1
        continue
    command = [
        a.replace("/opt/floe/current/bin/", bin_dir + "/").replace("/etc/floe/", etc + "/")
        for a in command
    ] + ["--check-config"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update(environment_file(files["/etc/floe/floe.env"]))
    env.update(MACHINE[role])
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    if run.returncode == 0 and "are valid" in run.stdout:
        print(f"ok   {name}: {os.path.basename(command[0])} accepts {configs[0]}")
        checked.add(role)
    else:
        print(f"FAIL {name}: {' '.join(command)} exited {run.returncode}:\n{run.stdout}{run.stderr}")
        failures += 1

if checked != set(UNITS):
    print(f"FAIL config files checked for {sorted(checked)}; every role needs one: {sorted(UNITS)}")
    failures += 1
sys.exit(1 if failures else 0)

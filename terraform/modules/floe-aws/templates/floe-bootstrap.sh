#!/usr/bin/env bash
# First boot of a Floe machine (run by cloud-init; safe to run again). Reads
# /etc/floe/bootstrap.env, then:
#   1. creates the `floe` system user;
#   2. brokers: waits for the data volume, formats it if it is blank, mounts it on /var/lib/floe;
#   3. installs the release bundle (S3 or https) into /opt/floe/<version>, checks its SHA-256;
#   4. waits until the operator has filled the bootstrap secret, writes the TLS files and the
#      admin token;
#   5. adds what only this machine knows (instance id, addresses; the database URL on a
#      controlplane) to the process environment;
#   6. enables and starts the role's systemd unit.
# Needs the AWS CLI and python3 (both in Amazon Linux 2023).
set -euo pipefail
umask 027
# shellcheck disable=SC1091
. /etc/floe/bootstrap.env
export AWS_REGION AWS_DEFAULT_REGION="$AWS_REGION"

log() { echo "floe-bootstrap: $*" >&2; }

imds() {
  local token
  token=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' http://169.254.169.254/latest/api/token)
  curl -fsS -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

# Retries "$@" with a growing pause, up to about ten minutes.
retry() {
  local pause=2
  for _ in $(seq 1 40); do
    if "$@"; then return 0; fi
    sleep "$pause"
    pause=$((pause < 30 ? pause * 2 : 30))
  done
  return 1
}

create_user() {
  getent group floe >/dev/null || groupadd --system floe
  id floe >/dev/null 2>&1 || useradd --system --gid floe --home-dir /var/lib/floe --no-create-home --shell /sbin/nologin floe
  install -d -m 0750 -o root -g floe /etc/floe /etc/floe/tls
}

# The broker's data volume: attached by Terraform after the instance starts, so wait for it.
mount_data_volume() {
  [ -n "$FLOE_DATA_VOLUME" ] || return 0
  local device="/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_${FLOE_DATA_VOLUME//-/}"
  log "waiting for the data volume $FLOE_DATA_VOLUME"
  retry test -b "$device" || { log "the data volume $FLOE_DATA_VOLUME never appeared"; exit 1; }
  # A blank volume (a new broker, or one whose volume was lost) is formatted; a volume with
  # a filesystem is never touched: it holds this broker's log.
  if ! blkid "$device" >/dev/null 2>&1; then
    log "formatting the new data volume"
    mkfs.xfs -L floe-data "$device"
  fi
  local uuid
  uuid=$(blkid -s UUID -o value "$device")
  install -d -m 0750 /var/lib/floe
  grep -q "UUID=$uuid" /etc/fstab || echo "UUID=$uuid /var/lib/floe xfs defaults,noatime,nofail,x-systemd.device-timeout=5min 0 2" >>/etc/fstab
  mountpoint -q /var/lib/floe || mount /var/lib/floe
}

install_release() {
  local bundle=/var/cache/floe/release.tar.gz
  install -d -m 0755 /var/cache/floe /opt/floe
  case "$FLOE_RELEASE_SOURCE" in
    s3://*) retry aws s3 cp --only-show-errors "$FLOE_RELEASE_SOURCE" "$bundle" ;;
    https://*) retry curl -fsSL --proto '=https' -o "$bundle" "$FLOE_RELEASE_SOURCE" ;;
    *) log "unsupported release source $FLOE_RELEASE_SOURCE"; exit 1 ;;
  esac
  if [ -n "$FLOE_RELEASE_SHA256" ]; then
    echo "$FLOE_RELEASE_SHA256  $bundle" | sha256sum --check --quiet || { log "the release bundle's SHA-256 does not match"; exit 1; }
  fi
  local top version
  # sed reads the whole listing: `head -n 1` would end the pipe early, tar would die of
  # SIGPIPE, and pipefail would stop the boot here.
  top=$(tar -tzf "$bundle" | sed -n '1s#/.*##p')
  tar -xzf "$bundle" -C /opt/floe
  version=$(sed -n "s/^version=//p" "/opt/floe/$top/VERSION")
  ln -sfn "/opt/floe/$top" /opt/floe/current
  install -m 0644 /opt/floe/current/systemd/*.service /etc/systemd/system/
  for binary in floe-broker floe-controlplane floe; do
    ln -sfn "/opt/floe/current/bin/$binary" "/usr/local/bin/$binary"
  done
  log "installed Floe $version"
}

# A field of a JSON secret on stdin. A missing or empty field stops the boot with its name:
# an empty value would otherwise surface later as an unclear refusal to start.
secret_field() {
  python3 -c '
import json, sys
value = json.load(sys.stdin).get(sys.argv[1])
if not value:
    sys.exit(f"floe-bootstrap: the secret has no {sys.argv[1]}: run deploy/cluster-tls.sh again")
print(value, end="")' "$1"
}

# The operator fills the secret after `terraform apply` (deploy/cluster-tls.sh); until then
# this waits, and the machine is not ready.
fetch_bootstrap_secret() {
  local secret=""
  log "waiting for the bootstrap secret $FLOE_BOOTSTRAP_SECRET"
  while ! secret=$(aws secretsmanager get-secret-value --secret-id "$FLOE_BOOTSTRAP_SECRET" --query SecretString --output text 2>/dev/null); do
    sleep 15
  done
  secret_field ca_pem <<<"$secret" >/etc/floe/tls/ca.pem
  secret_field cert_pem <<<"$secret" >/etc/floe/tls/cluster.pem
  secret_field key_pem <<<"$secret" >/etc/floe/tls/cluster.key
  secret_field peer_ca_pem <<<"$secret" >/etc/floe/tls/peer-ca.pem
  # Controlplanes only: the peer CA's key, to issue brokers their peer certificates.
  if [ -n "${FLOE_PEER_CA_SECRET:-}" ]; then
    local peer_ca=""
    log "waiting for the peer CA secret $FLOE_PEER_CA_SECRET"
    while ! peer_ca=$(aws secretsmanager get-secret-value --secret-id "$FLOE_PEER_CA_SECRET" --query SecretString --output text 2>/dev/null); do
      sleep 15
    done
    secret_field peer_ca_key_pem <<<"$peer_ca" >/etc/floe/tls/peer-ca.key
  fi
  chown root:floe /etc/floe/tls/*
  chmod 0640 /etc/floe/tls/*
  chmod 0644 /etc/floe/tls/ca.pem /etc/floe/tls/cluster.pem /etc/floe/tls/peer-ca.pem
  # Each role gets the tokens it needs: the controlplane all three (it checks them), a broker
  # its own, a read replica its own. Nothing else on the machine holds the admin token.
  # (Each token is read into a variable first: a failed read then stops the boot.)
  local admin broker replica
  case "$FLOE_ROLE" in
    controlplane)
      admin=$(secret_field admin_token <<<"$secret")
      broker=$(secret_field broker_token <<<"$secret")
      replica=$(secret_field read_replica_token <<<"$secret")
      printf 'FLOE_ADMIN_TOKEN=%s\nFLOE_BROKER_TOKEN=%s\nFLOE_READ_REPLICA_TOKEN=%s\n' \
        "$admin" "$broker" "$replica" >/etc/floe/secrets.env ;;
    broker)
      broker=$(secret_field broker_token <<<"$secret")
      printf 'FLOE_BROKER_TOKEN=%s\n' "$broker" >/etc/floe/secrets.env ;;
    read-replica)
      replica=$(secret_field read_replica_token <<<"$secret")
      printf 'FLOE_READ_REPLICA_TOKEN=%s\n' "$replica" >/etc/floe/secrets.env ;;
  esac
  chown root:floe /etc/floe/secrets.env
  chmod 0640 /etc/floe/secrets.env
}

# The metadata database's address and its RDS-managed master password, read at every boot:
# RDS rotates the password. The instance may still be creating when this machine boots.
database_url() {
  local instance address port secret_arn secret user password
  instance=$(retry aws rds describe-db-instances --db-instance-identifier "$FLOE_DATABASE_INSTANCE" \
    --query 'DBInstances[0].[Endpoint.Address, Endpoint.Port, MasterUserSecret.SecretArn]' --output text)
  read -r address port secret_arn <<<"$instance"
  [ "$address" != None ] || { log "the database $FLOE_DATABASE_INSTANCE has no address yet"; exit 1; }
  secret=$(retry aws secretsmanager get-secret-value --secret-id "$secret_arn" --query SecretString --output text)
  user=$(secret_field username <<<"$secret")
  password=$(python3 -c 'import json, sys, urllib.parse; print(urllib.parse.quote(json.load(sys.stdin)["password"], safe=""), end="")' <<<"$secret")
  printf 'FLOE_DATABASE_URL=postgres://%s:%s@%s:%s/floe\n' "$user" "$password" "$address" "$port" >>/etc/floe/secrets.env
}

# Settings only this machine knows, replaced on every run.
machine_environment() {
  local env=/etc/floe/floe.env
  sed -i '/^# machine:/,$d' "$env"
  echo "# machine: written by floe-bootstrap" >>"$env"
  case "$FLOE_ROLE" in
    read-replica)
      local address
      address=$(imds public-ipv4 2>/dev/null || imds local-ipv4)
      echo "FLOE_REPLICA_ID=$(imds instance-id)" >>"$env"
      echo "FLOE_ADVERTISE=$address:$FLOE_ADVERTISE_PORT" >>"$env"
      ;;
    controlplane)
      database_url
      ;;
  esac
}

main() {
  create_user
  mount_data_volume
  install -d -m 0750 -o floe -g floe /var/lib/floe
  install_release
  fetch_bootstrap_secret
  machine_environment
  local unit
  case "$FLOE_ROLE" in
    broker) unit=floe-broker.service ;;
    read-replica) unit=floe-replica.service ;;
    controlplane) unit=floe-controlplane.service ;;
    *) log "unknown role $FLOE_ROLE"; exit 1 ;;
  esac
  systemctl daemon-reload
  systemctl enable --now "$unit"
  log "started $unit"
}

main "$@"

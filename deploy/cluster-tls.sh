#!/usr/bin/env bash
# Creates a Floe cluster's TLS material and admin token, and stores them in the cluster's
# bootstrap secret (Terraform output bootstrap_secret_arn), where every machine reads them at
# boot, and the peer CA's key in the secret only controlplanes read (peer_ca_secret_arn). Run
# once per cluster, on an operator's machine, after `terraform apply`:
#
#   deploy/cluster-tls.sh --dir floe-tls --name '*.floe.floe.internal' --name floe.floe.internal \
#     --secret-id "$(terraform output -raw bootstrap_secret_arn)" \
#     --peer-ca-secret-id "$(terraform output -raw peer_ca_secret_arn)"
#
# Writes into --dir: ca.pem and ca.key (the cluster CA: keep ca.key offline, it never goes
# to a machine), cluster.pem and cluster.key (the certificate every broker and read replica
# presents to clients, for the names given), peer-ca.pem and peer-ca.key (the peer CA: the
# controlplanes hold its key and sign each broker a short-lived certificate naming its broker
# id for the peer port, see docs/security.md), and the tokens admin-token, broker-token and
# read-replica-token. Existing files are kept, so a second run only stores the secrets again.
# Needs openssl, python3 and, with --secret-id or --peer-ca-secret-id, the AWS CLI.
set -euo pipefail

dir=floe-tls secret="" peer_ca_secret="" names=() days=825
while (($#)); do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --name) names+=("$2"); shift 2 ;;
    --secret-id) secret=$2; shift 2 ;;
    --peer-ca-secret-id) peer_ca_secret=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#names[@]})) || { echo "give the certificate's names with --name (terraform output certificate_names)" >&2; exit 2; }
mkdir -p "$dir"
chmod 0700 "$dir"
cd "$dir"
umask 077

if [ ! -f ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -keyout ca.key -out ca.pem -subj "/CN=Floe cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
if [ ! -f peer-ca.key ]; then
  # PKCS#8 (openssl's default for -newkey), which the controlplane reads.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -keyout peer-ca.key -out peer-ca.pem -subj "/CN=Floe peer CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
if [ ! -f cluster.key ]; then
  san=$(printf 'DNS:%s,' "${names[@]}")
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout cluster.key.pkcs8 -out cluster.csr -subj "/CN=${names[0]}" 2>/dev/null
  # The broker reads PKCS#8 keys.
  mv cluster.key.pkcs8 cluster.key
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' \
    "${san%,}" >cluster.ext
  openssl x509 -req -in cluster.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile cluster.ext -out cluster.pem 2>/dev/null
  rm -f cluster.csr cluster.ext ca.srl
fi
# The first administrator's token (a cluster-admin), and the tokens brokers and read
# replicas call the controlplane (and the brokers) with; see docs/security.md.
for token in admin-token broker-token read-replica-token; do
  [ -f "$token" ] || openssl rand -hex 32 >"$token"
done
chmod 0644 ca.pem cluster.pem peer-ca.pem
echo "wrote $(pwd)/{ca.pem,ca.key,cluster.pem,cluster.key,peer-ca.pem,peer-ca.key,admin-token,broker-token,read-replica-token}"

if [ -n "$secret" ]; then
  python3 - >secret.json <<'PY'
import json
print(json.dumps({
    "ca_pem": open("ca.pem").read(),
    "cert_pem": open("cluster.pem").read(),
    "key_pem": open("cluster.key").read(),
    "peer_ca_pem": open("peer-ca.pem").read(),
    "admin_token": open("admin-token").read().strip(),
    "broker_token": open("broker-token").read().strip(),
    "read_replica_token": open("read-replica-token").read().strip(),
}))
PY
  aws secretsmanager put-secret-value --secret-id "$secret" --secret-string file://secret.json >/dev/null
  rm -f secret.json
  echo "stored in $secret"
fi

if [ -n "$peer_ca_secret" ]; then
  python3 - >peer-ca-secret.json <<'PY'
import json
print(json.dumps({"peer_ca_key_pem": open("peer-ca.key").read()}))
PY
  aws secretsmanager put-secret-value --secret-id "$peer_ca_secret" --secret-string file://peer-ca-secret.json >/dev/null
  rm -f peer-ca-secret.json
  echo "stored the peer CA's key in $peer_ca_secret"
fi

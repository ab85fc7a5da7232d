# The cluster's bootstrap secret: the CA certificate, the cluster certificate and its key
# (covering *.<name>.<internal_domain>), and the controlplane's admin token, as one JSON
# object. Terraform creates only the empty secret, so that no key ever sits in its state; the
# operator fills it once with deploy/cluster-tls.sh, and every machine reads it at boot
# (waiting until it is filled). The cluster CA's own key never leaves the operator. The secret
# also holds the peer CA's certificate (peer_ca_pem), which brokers trust on the peer port.

resource "aws_secretsmanager_secret" "bootstrap" {
  #checkov:skip=CKV2_AWS_57:The operator owns this material (deploy/cluster-tls.sh); rotating it means a new certificate and a rolling restart, not a Lambda.
  #checkov:skip=CKV_AWS_149:Encrypted with the account's aws/secretsmanager key; a customer-managed key adds cost without narrowing who can read it (the IAM policies do that).
  name_prefix             = "${var.name}-bootstrap-"
  description             = "Floe ${var.name}: CA and cluster certificate, key, peer CA certificate, tokens (JSON: ca_pem, cert_pem, key_pem, peer_ca_pem, admin_token, broker_token, read_replica_token)"
  recovery_window_in_days = 7
  tags                    = local.tags
}

# The peer CA's key, which only the controlplanes read: they sign each broker a short-lived
# certificate naming its broker id for the peer port (docs/security.md, "Peer port
# identity"). Apart from the bootstrap secret, which every machine reads, so that a broker
# cannot mint another broker's identity. Filled by deploy/cluster-tls.sh like the other.
resource "aws_secretsmanager_secret" "peer_ca" {
  #checkov:skip=CKV2_AWS_57:The operator owns this key (deploy/cluster-tls.sh); rotating it is a CA rotation (docs/security.md), not a Lambda.
  #checkov:skip=CKV_AWS_149:Encrypted with the account's aws/secretsmanager key; a customer-managed key adds cost without narrowing who can read it (the IAM policies do that).
  name_prefix             = "${var.name}-peer-ca-"
  description             = "Floe ${var.name}: the peer CA's private key, for the controlplanes only (JSON: peer_ca_key_pem)"
  recovery_window_in_days = 7
  tags                    = local.tags
}

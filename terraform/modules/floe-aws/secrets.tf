# The cluster's bootstrap secret: the CA certificate, the cluster certificate and its key
# (covering *.<name>.<internal_domain>), and the controlplane's admin token, as one JSON
# object. Terraform creates only the empty secret, so that no key ever sits in its state; the
# operator fills it once with deploy/cluster-tls.sh, and every machine reads it at boot
# (waiting until it is filled). The CA's own key never leaves the operator.

resource "aws_secretsmanager_secret" "bootstrap" {
  #checkov:skip=CKV2_AWS_57:The operator owns this material (deploy/cluster-tls.sh); rotating it means a new certificate and a rolling restart, not a Lambda.
  #checkov:skip=CKV_AWS_149:Encrypted with the account's aws/secretsmanager key; a customer-managed key adds cost without narrowing who can read it (the IAM policies do that).
  name_prefix             = "${var.name}-bootstrap-"
  description             = "Floe ${var.name}: CA and cluster certificate, key, admin token (JSON: ca_pem, cert_pem, key_pem, admin_token)"
  recovery_window_in_days = 7
  tags                    = local.tags
}

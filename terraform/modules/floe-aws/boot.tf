# What every machine's first boot needs: where the release bundle is, the bootstrap secret
# (and on controlplanes the peer CA's key),
# and the environment its Floe process runs with (rendered into cloud-init user data by
# templates/cloud-init.yaml.tftpl; the per-role parts are in brokers.tf, controlplane.tf and
# read_replicas.tf).

locals {
  boot_common = {
    name              = var.name
    region            = local.region
    release_source    = local.release_source
    release_sha256    = var.release_sha256 == null ? "" : var.release_sha256
    bootstrap_secret  = aws_secretsmanager_secret.bootstrap.arn
    peer_ca_secret    = ""
    data_volume       = ""
    database_instance = ""
    advertise_port    = 0
    bootstrap_script  = file("${path.module}/templates/floe-bootstrap.sh")
  }

  # Settings every process reads (unknown variables are ignored by the others).
  env_common = {
    FLOE_LOG_FORMAT   = var.log_format
    FLOE_LOG          = "info"
    FLOE_TLS_CERT     = "/etc/floe/tls/cluster.pem"
    FLOE_TLS_KEY      = "/etc/floe/tls/cluster.key"
    FLOE_CONTROLPLANE = local.controlplane_url
    # Brokers and read replicas trust the controlplane's certificate by the cluster CA.
    FLOE_CONTROLPLANE_CA = "/etc/floe/tls/ca.pem"
    AWS_REGION           = local.region
  }
}

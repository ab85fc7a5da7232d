# What every machine's first boot needs: where the release bundle is, the bootstrap secret
# (and on controlplanes the peer CA's key),
# and the --config file and environment its Floe process runs with (rendered into cloud-init
# user data by templates/cloud-init.yaml.tftpl and templates/config.toml.tftpl; the per-role
# parts are in brokers.tf, controlplane.tf and read_replicas.tf).

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

  # The environment of every process: what is not a flag (the log filter, the AWS SDK's
  # region). Settings that are flags go into the process's --config file.
  env_common = {
    FLOE_LOG   = "info"
    AWS_REGION = local.region
  }

  # Keys of every process's --config file (templates/config.toml.tftpl; the keys each
  # binary accepts are checked against the built binaries by terraform/tests/run.sh).
  config_common = {
    log-format = var.log_format
  }

  # Brokers and read replicas: their client certificate, and the controlplane they register
  # with, trusted by the cluster CA.
  config_server = merge(local.config_common, {
    cert            = "/etc/floe/tls/cluster.pem"
    key             = "/etc/floe/tls/cluster.key"
    controlplane    = local.controlplane_url
    controlplane-ca = "/etc/floe/tls/ca.pem"
  })
}

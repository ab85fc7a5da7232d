# Names, addresses and the machine image shared by the rest of the module.

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

data "aws_vpc" "this" {
  id = var.vpc_id
}

data "aws_subnet" "selected" {
  count = length(var.subnet_ids)
  id    = var.subnet_ids[count.index]
}

# The latest Amazon Linux 2023 unless an image is named.
data "aws_ssm_parameter" "al2023" {
  count = var.ami_id == null ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.architecture}"
}

locals {
  account_id = data.aws_caller_identity.current.account_id
  region     = data.aws_region.current.name
  partition  = data.aws_partition.current.partition

  ami_id      = var.ami_id != null ? var.ami_id : nonsensitive(data.aws_ssm_parameter.al2023[0].value)
  bucket_name = var.bucket_name != null ? var.bucket_name : "${var.name}-tier-${local.account_id}-${local.region}"

  # Every machine of the cluster is named in this private zone; the cluster certificate covers
  # *.<zone> (see docs/deploy-aws.md, "Certificates").
  zone_name   = "${var.name}.${var.internal_domain}"
  server_name = "brokers.${local.zone_name}"

  controlplane_host = "controlplane.${local.zone_name}"
  # The controlplane serves its API over TLS with the cluster certificate (`tls-cert`).
  controlplane_url = "https://${local.controlplane_host}:${local.ports.controlplane}"

  ports = {
    client       = var.ports.client
    read_replica = var.ports.read_replica
    peer         = var.ports.peer
    metrics      = var.ports.metrics
    controlplane = var.ports.controlplane
  }

  release_key    = "releases/floe-${var.release_version}-${var.architecture}-linux.tar.gz"
  release_source = var.release_url != null ? var.release_url : "s3://${local.bucket_name}/${local.release_key}"

  tags = merge({ "floe:cluster" = var.name }, var.tags)
}

# Brokers: fixed instances, each with an identity that outlives it.
#
# A broker is its data: the partition logs on its volume and the broker id the controlplane
# gave it, kept in the data directory. Each broker i therefore owns, independently of any
# instance:
# - a name, broker-<i>.<zone>: the peer address the other brokers replicate to (the record
#   follows the instance's private address);
# - with public_access, an Elastic IP: the address it advertises to clients;
# - a gp3 data volume in its zone.
# The instance itself is replaceable: `terraform apply -replace` of one broker (a rolling
# upgrade, a new machine image) starts a new instance in the same zone, moves the Elastic IP
# and the volume to it, and the broker comes back as itself with its log. EC2's automatic
# recovery keeps the same instance (and so all of the above) on a failed host. A one-instance
# autoscaling group per broker would replace a terminated instance by itself, but must then
# attach the volume and address from inside the boot script with EC2 permissions on the
# broker's role; fixed instances keep that role free of any EC2 permission. See
# docs/deploy-aws.md.

locals {
  broker_subnets = [for i in range(var.broker_count) : data.aws_subnet.selected[i % length(var.subnet_ids)]]
}

resource "aws_eip" "broker" {
  count  = var.public_access ? var.broker_count : 0
  domain = "vpc"
  tags   = merge(local.tags, { Name = "${var.name}-broker-${count.index}" })
}

resource "aws_eip_association" "broker" {
  count         = var.public_access ? var.broker_count : 0
  allocation_id = aws_eip.broker[count.index].id
  instance_id   = aws_instance.broker[count.index].id
}

resource "aws_ebs_volume" "broker_data" {
  #checkov:skip=CKV_AWS_189:Encrypted with the account's default EBS key unless var.kms_key_arn names one.
  count             = var.broker_count
  availability_zone = local.broker_subnets[count.index].availability_zone
  type              = "gp3"
  size              = var.broker_volume.size_gib
  iops              = var.broker_volume.iops
  throughput        = var.broker_volume.throughput_mibs
  encrypted         = true
  kms_key_id        = var.kms_key_arn
  tags              = merge(local.tags, { Name = "${var.name}-broker-${count.index}-data", "floe:broker" = tostring(count.index) })
}

locals {
  broker_advertised = [
    for i in range(var.broker_count) :
    var.public_access ? aws_eip.broker[i].public_ip : "broker-${i}.${local.zone_name}"
  ]
}

resource "aws_instance" "broker" {
  #checkov:skip=CKV_AWS_126:Detailed (1-minute) monitoring costs per instance; Floe's own metrics cover the broker.
  count                = var.broker_count
  ami                  = local.ami_id
  instance_type        = var.broker_instance_type
  iam_instance_profile = aws_iam_instance_profile.this["broker"].name
  ebs_optimized        = true
  user_data_base64 = base64encode(templatefile("${path.module}/templates/cloud-init.yaml.tftpl", merge(local.boot_common, {
    role        = "broker"
    data_volume = aws_ebs_volume.broker_data[count.index].id
    environment = local.env_common
    config_path = "/etc/floe/broker.toml"
    config = templatefile("${path.module}/templates/config.toml.tftpl", {
      command = "floe-broker serve"
      path    = "/etc/floe/broker.toml"
      settings = merge(local.config_server, {
        data-dir       = "/var/lib/floe/data"
        listen         = "0.0.0.0:${local.ports.client}"
        advertise      = "${local.broker_advertised[count.index]}:${local.ports.client}"
        metrics-listen = "0.0.0.0:${local.ports.metrics}"
        peer-listen    = "0.0.0.0:${local.ports.peer}"
        peer-advertise = "broker-${count.index}.${local.zone_name}:${local.ports.peer}"
        peer-ca        = "/etc/floe/tls/peer-ca.pem"
        zone           = local.broker_subnets[count.index].availability_zone
        object-store   = "s3://${aws_s3_bucket.tier.id}/${var.object_prefix}"
        s3-region      = local.region
      })
    })
  })))
  subnet_id              = local.broker_subnets[count.index].id
  vpc_security_group_ids = [aws_security_group.this["broker"].id]
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  maintenance_options {
    auto_recovery = "default"
  }
  root_block_device {
    volume_type = "gp3"
    volume_size = 20
    encrypted   = true
    kms_key_id  = var.kms_key_arn
  }
  tags        = merge(local.tags, { Name = "${var.name}-broker-${count.index}", "floe:role" = "broker" })
  volume_tags = merge(local.tags, { Name = "${var.name}-broker-${count.index}-root" })
  lifecycle {
    # A new release or image must not restart every broker at once: roll them one by one
    # with `terraform apply -replace=...aws_instance.broker[i]` (docs/deploy-aws.md).
    ignore_changes = [ami, user_data_base64]
  }
}

resource "aws_volume_attachment" "broker_data" {
  count       = var.broker_count
  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.broker_data[count.index].id
  instance_id = aws_instance.broker[count.index].id
  # Stop the broker's instance before the volume leaves it, so the log is not cut mid-write.
  stop_instance_before_detaching = true
}

# Read replicas: an autoscaling group whose desired capacity the controlplane drives (its
# aws-asg driver sets it, and terminates drained replicas by instance id). Terraform sets
# only the bounds: min 0, max var.read_replica_max; it never resets the desired capacity
# (ignore_changes). A replica registers under its instance id and advertises its own address.

resource "aws_launch_template" "read_replica" {
  #checkov:skip=CKV_AWS_88:With public_access, clients outside the VPC read from each replica at its own address; the security group admits only client_cidrs to the QUIC port and monitoring_cidrs to metrics.
  name_prefix            = "${var.name}-read-replica-"
  image_id               = local.ami_id
  instance_type          = var.read_replica_instance_type
  update_default_version = true
  iam_instance_profile {
    arn = aws_iam_instance_profile.this["read_replica"].arn
  }
  network_interfaces {
    associate_public_ip_address = var.public_access
    security_groups             = [aws_security_group.this["read_replica"].id]
    delete_on_termination       = true
  }
  user_data = base64encode(templatefile("${path.module}/templates/cloud-init.yaml.tftpl", merge(local.boot_common, {
    role           = "read-replica"
    advertise_port = local.ports.read_replica
    environment    = local.env_common
    config_path    = "/etc/floe/read-replica.toml"
    config = templatefile("${path.module}/templates/config.toml.tftpl", {
      command = "floe-broker read-replica"
      path    = "/etc/floe/read-replica.toml"
      # The replica's id (its instance id) and advertised address are this machine's own:
      # floe-bootstrap adds them to /etc/floe/floe.env.
      settings = merge(local.config_server, {
        data-dir           = "/var/lib/floe/cache"
        listen             = "0.0.0.0:${local.ports.read_replica}"
        metrics-listen     = "0.0.0.0:${local.ports.metrics}"
        broker-ca          = "/etc/floe/tls/ca.pem"
        broker-server-name = local.server_name
        object-store       = "s3://${aws_s3_bucket.tier.id}/${var.object_prefix}"
        s3-region          = local.region
        tier-cache-disk    = "${var.read_replica_cache_gib - 10}GiB"
      })
    })
  })))
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_type = "gp3"
      volume_size = var.read_replica_cache_gib
      encrypted   = true
      kms_key_id  = var.kms_key_arn
    }
  }
  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-read-replica", "floe:role" = "read-replica" })
  }
  tags = local.tags
}

resource "aws_autoscaling_group" "read_replicas" {
  name                = "${var.name}-read-replicas"
  min_size            = 0
  max_size            = var.read_replica_max
  desired_capacity    = 0
  vpc_zone_identifier = var.subnet_ids
  health_check_type   = "EC2"
  # The controlplane picks which replica goes (a drained one, by instance id); the group must
  # not pick one itself when rebalancing zones.
  suspended_processes = ["AZRebalance"]
  launch_template {
    id      = aws_launch_template.read_replica.id
    version = aws_launch_template.read_replica.latest_version
  }
  dynamic "tag" {
    for_each = local.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
  lifecycle {
    # The controlplane owns the desired capacity.
    ignore_changes = [desired_capacity]
  }
}

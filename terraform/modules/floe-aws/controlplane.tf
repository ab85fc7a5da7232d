# Two controlplanes on the shared PostgreSQL: one leads (elected through the database), the
# other stands by. They hold no state of their own, so they run in an autoscaling group of
# two that replaces a failed instance. Its health checks are EC2's, not the load balancer's:
# the standby answers /readyz with 503 by design, and must not be replaced for it. The load
# balancers send API traffic to whichever answers /readyz, the leader.

resource "aws_launch_template" "controlplane" {
  name_prefix            = "${var.name}-controlplane-"
  image_id               = local.ami_id
  instance_type          = var.controlplane_instance_type
  update_default_version = true
  vpc_security_group_ids = [aws_security_group.this["controlplane"].id]
  iam_instance_profile {
    arn = aws_iam_instance_profile.this["controlplane"].arn
  }
  user_data = base64encode(templatefile("${path.module}/templates/cloud-init.yaml.tftpl", merge(local.boot_common, {
    role              = "controlplane"
    database_instance = local.database_identifier
    peer_ca_secret    = aws_secretsmanager_secret.peer_ca.arn
    environment       = local.env_common
    config_path       = "/etc/floe/controlplane.toml"
    config = templatefile("${path.module}/templates/config.toml.tftpl", {
      command = "floe-controlplane"
      path    = "/etc/floe/controlplane.toml"
      settings = merge(local.config_common, {
        listen                     = "0.0.0.0:${local.ports.controlplane}"
        tls-cert                   = "/etc/floe/tls/cluster.pem"
        tls-key                    = "/etc/floe/tls/cluster.key"
        peer-ca                    = "/etc/floe/tls/peer-ca.pem"
        peer-ca-key-file           = "/etc/floe/tls/peer-ca.key"
        data-dir                   = "/var/lib/floe/controlplane"
        aws-autoscaling-group      = aws_autoscaling_group.read_replicas.name
        aws-region                 = local.region
        default-replication-factor = 3
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
      volume_size = 20
      encrypted   = true
      kms_key_id  = var.kms_key_arn
    }
  }
  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-controlplane", "floe:role" = "controlplane" })
  }
  tags = local.tags
}

resource "aws_autoscaling_group" "controlplane" {
  name                      = "${var.name}-controlplane"
  min_size                  = 2
  max_size                  = 2
  desired_capacity          = 2
  vpc_zone_identifier       = var.subnet_ids
  health_check_type         = "EC2"
  health_check_grace_period = 300
  target_group_arns         = [for key, group in aws_lb_target_group.controlplane : group.arn]
  launch_template {
    id      = aws_launch_template.controlplane.id
    version = aws_launch_template.controlplane.latest_version
  }
  # A new launch template version (release, image) replaces the two one at a time, the
  # standby's replacement ready before the next goes.
  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 50
    }
  }
  dynamic "tag" {
    for_each = local.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
}

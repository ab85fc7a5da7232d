# Network load balancers: the internal one (always) and, with public_access, an internet-facing
# one. Each has two listeners:
# - TCP, the controlplane's REST API, sent only to the leading controlplane (the health check
#   is /readyz, which a standby answers 503);
# - UDP, QUIC on the client port, sent to any ready broker: a client's first connection. The
#   broker answers with the cluster's metadata, and the client then talks to each partition's
#   leader and to read replicas at the addresses they advertise (brokers: their Elastic IPs;
#   replicas: their public addresses).

locals {
  load_balancers = merge(
    { internal = { internal = true, group = "lb_internal", suffix = "i" } },
    var.public_access ? { public = { internal = false, group = "lb_public", suffix = "p" } } : {},
  )
  public_api_port = var.api_certificate_arn != null ? 443 : local.ports.controlplane
  broker_targets = {
    for pair in setproduct(keys(local.load_balancers), range(var.broker_count)) :
    "${pair[0]}-${pair[1]}" => { lb = pair[0], broker = pair[1] }
  }
}

resource "aws_lb" "this" {
  #checkov:skip=CKV_AWS_91:Access logs need a log bucket the platform team owns; the controlplane and brokers log every request they refuse.
  #checkov:skip=CKV_AWS_150:Deletion protection would stop `terraform destroy`; the load balancers hold no data and are recreated in seconds.
  for_each                         = local.load_balancers
  name                             = "${var.name}-${each.value.suffix}"
  load_balancer_type               = "network"
  internal                         = each.value.internal
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.this[each.value.group].id]
  enable_cross_zone_load_balancing = true
  tags                             = local.tags
}

# The controlplane serves TLS itself with the cluster certificate: the load balancer passes
# the connection through, or, where it terminates TLS with var.api_certificate_arn, encrypts
# again towards the controlplane.
resource "aws_lb_target_group" "controlplane" {
  for_each    = local.load_balancers
  name        = "${var.name}-cp${each.value.suffix}"
  port        = local.ports.controlplane
  protocol    = each.key == "public" && var.api_certificate_arn != null ? "TLS" : "TCP"
  vpc_id      = var.vpc_id
  target_type = "instance"
  health_check {
    protocol            = "HTTPS"
    path                = "/readyz"
    port                = "traffic-port"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
  tags = local.tags
}

resource "aws_lb_target_group" "broker_quic" {
  for_each    = local.load_balancers
  name        = "${var.name}-q${each.value.suffix}"
  port        = local.ports.client
  protocol    = "UDP"
  vpc_id      = var.vpc_id
  target_type = "instance"
  health_check {
    protocol            = "HTTP"
    path                = "/readyz"
    port                = tostring(local.ports.metrics)
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
  tags = local.tags
}

resource "aws_lb_target_group_attachment" "broker_quic" {
  for_each         = local.broker_targets
  target_group_arn = aws_lb_target_group.broker_quic[each.value.lb].arn
  target_id        = aws_instance.broker[each.value.broker].id
  port             = local.ports.client
}

resource "aws_lb_listener" "controlplane" {
  #checkov:skip=CKV_AWS_2:The controlplane terminates TLS itself (TCP passthrough); with var.api_certificate_arn this listener terminates with ACM and encrypts again towards it.
  #checkov:skip=CKV_AWS_103:Same as CKV_AWS_2: the controlplane's own TLS 1.2+ applies on passthrough; the ACM listener has a TLS 1.2+ policy.
  for_each          = local.load_balancers
  load_balancer_arn = aws_lb.this[each.key].arn
  port              = each.key == "public" ? local.public_api_port : local.ports.controlplane
  protocol          = each.key == "public" && var.api_certificate_arn != null ? "TLS" : "TCP"
  certificate_arn   = each.key == "public" ? var.api_certificate_arn : null
  ssl_policy        = each.key == "public" && var.api_certificate_arn != null ? "ELBSecurityPolicy-TLS13-1-2-2021-06" : null
  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.controlplane[each.key].arn
  }
  tags = local.tags
}

resource "aws_lb_listener" "broker_quic" {
  for_each          = local.load_balancers
  load_balancer_arn = aws_lb.this[each.key].arn
  port              = local.ports.client
  protocol          = "UDP"
  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.broker_quic[each.key].arn
  }
  tags = local.tags
}

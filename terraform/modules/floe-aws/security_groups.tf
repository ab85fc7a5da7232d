# Who may reach which port:
# - client QUIC (brokers, UDP): client_cidrs, and read replicas following the leaders;
# - read-replica QUIC (UDP): client_cidrs;
# - peer QUIC (brokers, UDP): other brokers only;
# - metrics HTTP (brokers, replicas): monitoring_cidrs, and the load balancers' health checks;
# - controlplane REST (TCP): operators through the load balancers, brokers and replicas, and
#   monitoring_cidrs (its /metrics is on the same port);
# - PostgreSQL: the controlplanes only.

locals {
  groups = {
    broker       = "Floe brokers"
    read_replica = "Floe read replicas"
    controlplane = "Floe controlplanes"
    database     = "Floe metadata database (PostgreSQL)"
    lb_internal  = "Floe internal load balancer (REST API, QUIC bootstrap inside the VPC)"
    lb_public    = "Floe internet-facing load balancer (REST API, QUIC bootstrap)"
  }
  # Only the groups this configuration uses.
  group_names = { for k, v in local.groups : k => v if k != "lb_public" || var.public_access }

  cidr_rules = concat(
    [for c in distinct(var.client_cidrs) : { group = "broker", proto = "udp", port = local.ports.client, cidr = c, what = "clients publish and consume" }],
    [for c in distinct(var.client_cidrs) : { group = "read_replica", proto = "udp", port = local.ports.read_replica, cidr = c, what = "clients consume history" }],
    [for c in distinct(var.monitoring_cidrs) : { group = "broker", proto = "tcp", port = local.ports.metrics, cidr = c, what = "Prometheus scrapes" }],
    [for c in distinct(var.monitoring_cidrs) : { group = "read_replica", proto = "tcp", port = local.ports.metrics, cidr = c, what = "Prometheus scrapes" }],
    [for c in distinct(var.monitoring_cidrs) : { group = "controlplane", proto = "tcp", port = local.ports.controlplane, cidr = c, what = "Prometheus scrapes /metrics" }],
    [for c in distinct(var.operator_cidrs) : { group = "lb_internal", proto = "tcp", port = local.ports.controlplane, cidr = c, what = "operators call the REST API" }],
    [for c in distinct(var.client_cidrs) : { group = "lb_internal", proto = "udp", port = local.ports.client, cidr = c, what = "clients' first QUIC connection" }],
    var.public_access ? [for c in distinct(var.operator_cidrs) : { group = "lb_public", proto = "tcp", port = local.public_api_port, cidr = c, what = "operators call the REST API" }] : [],
    var.public_access ? [for c in distinct(var.client_cidrs) : { group = "lb_public", proto = "udp", port = local.ports.client, cidr = c, what = "clients' first QUIC connection" }] : [],
  )

  group_rules = concat(
    [
      { group = "broker", proto = "udp", port = local.ports.peer, from = "broker", what = "replication between brokers" },
      { group = "broker", proto = "udp", port = local.ports.client, from = "read_replica", what = "read replicas follow the leaders" },
      { group = "broker", proto = "tcp", port = local.ports.metrics, from = "lb_internal", what = "health checks" },
      { group = "controlplane", proto = "tcp", port = local.ports.controlplane, from = "broker", what = "brokers register and heartbeat" },
      { group = "controlplane", proto = "tcp", port = local.ports.controlplane, from = "read_replica", what = "read replicas register and heartbeat" },
      { group = "controlplane", proto = "tcp", port = local.ports.controlplane, from = "lb_internal", what = "the internal load balancer" },
      { group = "database", proto = "tcp", port = 5432, from = "controlplane", what = "the controlplanes' metadata" },
      { group = "lb_internal", proto = "tcp", port = local.ports.controlplane, from = "broker", what = "brokers reach the leading controlplane" },
      { group = "lb_internal", proto = "tcp", port = local.ports.controlplane, from = "read_replica", what = "read replicas reach the leading controlplane" },
    ],
    var.public_access ? [
      { group = "broker", proto = "tcp", port = local.ports.metrics, from = "lb_public", what = "health checks" },
      { group = "controlplane", proto = "tcp", port = local.ports.controlplane, from = "lb_public", what = "the internet-facing load balancer" },
    ] : [],
  )

  # Load balancers send to the targets (traffic and health checks) inside the VPC.
  lb_egress = {
    for pair in setproduct(keys({ for k, v in local.group_names : k => v if startswith(k, "lb_") }), ["tcp", "udp"]) :
    "${pair[0]}-${pair[1]}" => { group = pair[0], proto = pair[1] }
  }
}

resource "aws_security_group" "this" {
  for_each    = local.group_names
  name        = "${var.name}-${replace(each.key, "_", "-")}"
  description = each.value
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-${replace(each.key, "_", "-")}" })
}

resource "aws_vpc_security_group_ingress_rule" "cidr" {
  for_each          = { for r in local.cidr_rules : "${r.group}-${r.proto}-${r.port}-${r.cidr}" => r }
  security_group_id = aws_security_group.this[each.value.group].id
  description       = each.value.what
  ip_protocol       = each.value.proto
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
  tags              = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "group" {
  for_each                     = { for r in local.group_rules : "${r.group}-${r.proto}-${r.port}-from-${r.from}" => r }
  security_group_id            = aws_security_group.this[each.value.group].id
  description                  = each.value.what
  ip_protocol                  = each.value.proto
  from_port                    = each.value.port
  to_port                      = each.value.port
  referenced_security_group_id = aws_security_group.this[each.value.from].id
  tags                         = local.tags
}

# Machines reach S3, Secrets Manager, the Auto Scaling API, package mirrors and each other.
resource "aws_vpc_security_group_egress_rule" "machines" {
  #checkov:skip=CKV_AWS_382:Machines call AWS APIs (S3, Secrets Manager, Auto Scaling, STS) and their peers; the AWS endpoints have no fixed CIDR. Narrow it with VPC endpoints and a proxy if required.
  for_each          = toset(["broker", "read_replica", "controlplane"])
  security_group_id = aws_security_group.this[each.key].id
  description       = "AWS APIs, release bundles and peers"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "load_balancers" {
  for_each          = local.lb_egress
  security_group_id = aws_security_group.this[each.value.group].id
  description       = "targets and their health checks inside the VPC"
  ip_protocol       = each.value.proto
  from_port         = 1024
  to_port           = 65535
  cidr_ipv4         = data.aws_vpc.this.cidr_block
  tags              = local.tags
}

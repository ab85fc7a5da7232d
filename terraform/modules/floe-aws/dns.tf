# The private zone that names the cluster's machines: broker-<i>.<zone> for each broker (its
# peer address, stable across instance replacement) and controlplane.<zone> for the internal
# load balancer in front of the leading controlplane.

resource "aws_route53_zone" "cluster" {
  #checkov:skip=CKV2_AWS_38:DNSSEC signing applies to public zones; this zone is private to the VPC.
  #checkov:skip=CKV2_AWS_39:Query logging of a private zone goes through Route 53 Resolver query logging, a VPC-wide choice.
  name          = local.zone_name
  comment       = "Floe ${var.name}: brokers and controlplane"
  force_destroy = true
  vpc {
    vpc_id = var.vpc_id
  }
  tags = local.tags
}

resource "aws_route53_record" "broker" {
  count   = var.broker_count
  zone_id = aws_route53_zone.cluster.zone_id
  name    = "broker-${count.index}.${local.zone_name}"
  type    = "A"
  ttl     = 60
  records = [aws_instance.broker[count.index].private_ip]
}

resource "aws_route53_record" "controlplane" {
  zone_id = aws_route53_zone.cluster.zone_id
  name    = local.controlplane_host
  type    = "A"
  alias {
    name                   = aws_lb.this["internal"].dns_name
    zone_id                = aws_lb.this["internal"].zone_id
    evaluate_target_health = false
  }
}

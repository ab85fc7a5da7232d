# What operators and clients need after `terraform apply`.

locals {
  entry_lb = var.public_access ? aws_lb.this["public"] : aws_lb.this["internal"]
  # TLS end to end: the controlplane's own (passthrough), or the ACM certificate's on 443.
  api_url        = "https://${local.entry_lb.dns_name}:${var.public_access ? local.public_api_port : local.ports.controlplane}"
  quic_bootstrap = "${local.entry_lb.dns_name}:${local.ports.client}"
}

output "controlplane_url" {
  description = "The REST API of the leading controlplane, through the load balancer (from operator_cidrs)."
  value       = local.api_url
}

output "controlplane_internal_url" {
  description = "The REST API inside the VPC (what brokers and read replicas use)."
  value       = local.controlplane_url
}

output "quic_bootstrap_endpoint" {
  description = "host:port of the load balancer's QUIC (UDP) listener: a client's first connection."
  value       = local.quic_bootstrap
}

output "broker_endpoints" {
  description = "The address each broker advertises to clients (host:port), by broker index."
  value       = [for address in local.broker_advertised : "${address}:${local.ports.client}"]
}

output "broker_peer_names" {
  description = "Each broker's name in the private zone (its peer address)."
  value       = [for r in aws_route53_record.broker : r.fqdn]
}

output "server_name" {
  description = "The name clients and read replicas check the brokers' certificate against; the cluster certificate must cover it (it is under *.<zone>)."
  value       = local.server_name
}

output "certificate_names" {
  description = "The DNS names the cluster certificate must carry (deploy/cluster-tls.sh --name): the private zone, and the load balancer operators reach the REST API through."
  value       = ["*.${local.zone_name}", local.zone_name, local.entry_lb.dns_name]
}

output "bucket" {
  description = "The bucket of tiered segments and release bundles."
  value       = aws_s3_bucket.tier.id
}

output "object_store_url" {
  description = "The object-store URL brokers and read replicas use."
  value       = "s3://${aws_s3_bucket.tier.id}/${var.object_prefix}"
}

output "release_source" {
  description = "Where machines fetch the release bundle from (upload it there before they boot)."
  value       = local.release_source
}

output "bootstrap_secret_arn" {
  description = "The Secrets Manager secret the operator fills once with deploy/cluster-tls.sh (CA, cluster certificate and key, peer CA certificate, admin, broker and read-replica tokens)."
  value       = aws_secretsmanager_secret.bootstrap.arn
}

output "peer_ca_secret_arn" {
  description = "The Secrets Manager secret only controlplanes read, filled once with deploy/cluster-tls.sh (the peer CA's key)."
  value       = aws_secretsmanager_secret.peer_ca.arn
}

output "database_endpoint" {
  description = "host:port of the metadata database."
  value       = aws_db_instance.metadata.endpoint
}

output "database_secret_arn" {
  description = "The RDS-managed secret holding the database's master credentials."
  value       = aws_db_instance.metadata.master_user_secret[0].secret_arn
}

output "read_replica_group" {
  description = "The autoscaling group of read replicas the controlplane scales."
  value       = aws_autoscaling_group.read_replicas.name
}

output "controlplane_group" {
  description = "The autoscaling group of the two controlplanes."
  value       = aws_autoscaling_group.controlplane.name
}

output "broker_instance_ids" {
  description = "The brokers' current instances, by broker index."
  value       = aws_instance.broker[*].id
}

output "broker_volume_ids" {
  description = "The brokers' data volumes, by broker index."
  value       = aws_ebs_volume.broker_data[*].id
}

output "role_arns" {
  description = "The IAM roles of brokers, read replicas and controlplanes."
  value       = { for key, role in aws_iam_role.this : key => role.arn }
}

output "security_group_ids" {
  description = "The security groups, by what they guard."
  value       = { for key, group in aws_security_group.this : key => group.id }
}

output "client_profile" {
  description = "A client profile for `floe` (JSON): save it to a file and run `floe profile create NAME --from FILE --use`, with the cluster CA at client_ca_cert_path."
  value = jsonencode({
    endpoint     = local.quic_bootstrap
    server_name  = local.server_name
    ca_cert      = var.client_ca_cert_path
    controlplane = local.api_url
  })
}

# Everything a laptop needs right after `terraform apply`.

output "controlplane_url" {
  description = "The REST API."
  value       = module.floe.controlplane_url
}

output "quic_bootstrap_endpoint" {
  description = "The QUIC endpoint of the client profile."
  value       = module.floe.quic_bootstrap_endpoint
}

output "broker_endpoints" {
  description = "Each broker's advertised address."
  value       = module.floe.broker_endpoints
}

output "bucket" {
  description = "The bucket of tiered segments and release bundles."
  value       = module.floe.bucket
}

output "release_source" {
  description = "Where to upload the release bundle."
  value       = module.floe.release_source
}

output "bootstrap_secret_arn" {
  description = "Fill it with deploy/cluster-tls.sh."
  value       = module.floe.bootstrap_secret_arn
}

output "peer_ca_secret_arn" {
  description = "Fill it with deploy/cluster-tls.sh (--peer-ca-secret-id)."
  value       = module.floe.peer_ca_secret_arn
}

output "certificate_names" {
  description = "Names the cluster certificate must carry."
  value       = module.floe.certificate_names
}

output "read_replica_group" {
  description = "The read replicas' autoscaling group."
  value       = module.floe.read_replica_group
}

output "broker_instance_ids" {
  description = "The brokers' instances."
  value       = module.floe.broker_instance_ids
}

output "client_profile" {
  description = "Save to a file, then `floe profile create aws --from FILE --use` (see docs/deploy-aws.md)."
  value       = module.floe.client_profile
}

output "role_arns" {
  description = "The IAM roles of brokers, read replicas and controlplanes."
  value       = module.floe.role_arns
}

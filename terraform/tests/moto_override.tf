# Copied by terraform/tests/run.sh beside a copy of terraform/examples/aws: a provider with
# test credentials and path-style S3 URLs. Never part of a real deployment.
#
# The endpoint (the local moto server) comes from AWS_ENDPOINT_URL, which run.sh sets for
# each terraform command, not from an `endpoints` block: the provider spends about 5 s
# validating that block (an attribute per AWS service) each time it is configured, twice in
# every apply and destroy.
provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  s3_use_path_style           = true
}

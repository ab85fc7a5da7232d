# Only the AWS provider: the module creates no keys or passwords itself (TLS material is an
# operator step, the database password is managed by RDS), so neither `tls` nor `random` is
# needed.
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.60, < 6.0"
    }
  }
}

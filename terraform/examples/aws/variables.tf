# The example's inputs; the module checks each again (terraform/modules/floe-aws/variables.tf).

variable "region" {
  description = "AWS region."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Name of the cluster."
  type        = string
  default     = "floe"
}

variable "vpc_cidr" {
  description = "Address range of the new VPC."
  type        = string
  default     = "10.42.0.0/16"
  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be a CIDR block of /20 or larger, such as 10.42.0.0/16."
  }
}

variable "client_cidrs" {
  description = "Who may publish and consume (your laptop's address as a.b.c.d/32, your clients' networks)."
  type        = list(string)
}

variable "operator_cidrs" {
  description = "Who may call the REST API."
  type        = list(string)
}

variable "monitoring_cidrs" {
  description = "Who may scrape metrics; default: the VPC."
  type        = list(string)
  default     = []
}

variable "release_version" {
  description = "The Floe release to install (the bundle scripts/package.sh built, uploaded to the bucket's releases/)."
  type        = string
}

variable "release_sha256" {
  description = "SHA-256 of that bundle (printed by scripts/package.sh)."
  type        = string
  default     = null
}

variable "ami_id" {
  description = "Machine image; default: the latest Amazon Linux 2023."
  type        = string
  default     = null
}

variable "broker_count" {
  description = "Brokers (odd, at least 3)."
  type        = number
  default     = 3
}

variable "read_replica_max" {
  description = "The most read replicas the controlplane may run."
  type        = number
  default     = 8
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the bucket with its data."
  type        = bool
  default     = false
}

variable "database" {
  description = "The metadata database's settings (see the module)."
  type        = any
  default     = {}
}

variable "enable_ssm" {
  description = "Reach the machines through Session Manager."
  type        = bool
  default     = true
}

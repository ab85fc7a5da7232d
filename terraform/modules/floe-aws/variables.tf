# Inputs of the Floe module. Every value an operator is likely to get wrong is checked here,
# at plan time, with a message that says what is expected.

variable "name" {
  description = "Name of the cluster: prefixes every resource and names the private DNS zone's records."
  type        = string
  default     = "floe"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}[a-z0-9]$", var.name))
    error_message = "name must be 3 to 24 characters of lower-case letters, digits and dashes, starting with a letter and not ending with a dash."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

# --- network ------------------------------------------------------------------------------

variable "vpc_id" {
  description = "The VPC the cluster runs in."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "subnet_ids" {
  description = "Subnets for brokers, controlplanes and read replicas, one per availability zone (brokers are spread over them in order). With public_access, they need a route to an internet gateway."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2 && alltrue([for id in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", id))])
    error_message = "subnet_ids must name at least two subnets (subnet-…), in different availability zones."
  }
}

variable "database_subnet_ids" {
  description = "Subnets of the PostgreSQL subnet group (at least two zones); private subnets are best. Defaults to subnet_ids."
  type        = list(string)
  default     = []
  validation {
    condition     = length(var.database_subnet_ids) == 0 || length(var.database_subnet_ids) >= 2
    error_message = "database_subnet_ids must be empty (use subnet_ids) or name at least two subnets."
  }
}

variable "public_access" {
  description = "Give brokers and read replicas public addresses (an Elastic IP per broker) and create an internet-facing load balancer, so that clients outside the VPC can publish and consume. Without it everything is reachable only inside the VPC (and what is peered with it)."
  type        = bool
  default     = true
}

variable "client_cidrs" {
  description = "Who may publish and consume: the QUIC ports of brokers and read replicas (UDP)."
  type        = list(string)
  validation {
    condition     = length(var.client_cidrs) > 0 && alltrue([for c in var.client_cidrs : can(cidrhost(c, 0))])
    error_message = "client_cidrs must be a non-empty list of CIDR blocks such as 203.0.113.0/24."
  }
}

variable "operator_cidrs" {
  description = "Who may call the controlplane's REST API (TCP)."
  type        = list(string)
  validation {
    condition     = length(var.operator_cidrs) > 0 && alltrue([for c in var.operator_cidrs : can(cidrhost(c, 0))])
    error_message = "operator_cidrs must be a non-empty list of CIDR blocks such as 198.51.100.7/32."
  }
}

variable "monitoring_cidrs" {
  description = "Who may scrape the metrics ports (Prometheus)."
  type        = list(string)
  validation {
    condition     = length(var.monitoring_cidrs) > 0 && alltrue([for c in var.monitoring_cidrs : can(cidrhost(c, 0))])
    error_message = "monitoring_cidrs must be a non-empty list of CIDR blocks such as 10.0.0.0/16."
  }
}

variable "internal_domain" {
  description = "The private DNS zone brokers and the controlplane are named in (broker-0.<name>.<internal_domain>). The cluster certificate must cover *.<name>.<internal_domain>."
  type        = string
  default     = "floe.internal"
  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)+[a-z]{2,}$", var.internal_domain))
    error_message = "internal_domain must be a DNS name such as floe.internal."
  }
}

# --- ports --------------------------------------------------------------------------------

variable "ports" {
  description = "Ports of the processes: client QUIC (brokers), read-replica QUIC, peer QUIC (broker to broker), metrics HTTP (every broker and replica; also /healthz and /readyz), controlplane REST (also its /metrics)."
  type = object({
    client       = optional(number, 7100)
    read_replica = optional(number, 7150)
    peer         = optional(number, 7200)
    metrics      = optional(number, 7180)
    controlplane = optional(number, 7300)
  })
  default = {}
  validation {
    condition     = alltrue([for p in values(var.ports) : p >= 1024 && p <= 65535]) && length(distinct(values(var.ports))) == length(values(var.ports))
    error_message = "ports must be distinct and between 1024 and 65535."
  }
}

# --- object storage -----------------------------------------------------------------------

variable "bucket_name" {
  description = "Name of the bucket for tiered segments and release bundles; default: <name>-tier-<account>-<region>."
  type        = string
  default     = null
  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name (3-63 lower-case letters, digits, dots and dashes)."
  }
}

variable "object_prefix" {
  description = "Key prefix of tiered segments and manifests in the bucket. Brokers may write only under it; read replicas only read it."
  type        = string
  default     = "floe"
  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_.-]*$", var.object_prefix)) && var.object_prefix != "releases"
    error_message = "object_prefix must be one path segment of letters, digits, '_', '.' and '-', and not `releases` (where bundles go)."
  }
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the bucket with every tiered segment in it. Off: destroy fails while the bucket holds objects, so that no stream's history is lost by accident."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "A KMS key for the bucket's encryption; default: S3-managed keys (SSE-S3). With a key, every role is granted its use."
  type        = string
  default     = null
}

variable "abort_incomplete_multipart_days" {
  description = "Days after which an unfinished multipart upload (a broker that crashed mid-upload) is aborted and its parts deleted."
  type        = number
  default     = 2
  validation {
    condition     = var.abort_incomplete_multipart_days >= 1
    error_message = "abort_incomplete_multipart_days must be at least 1."
  }
}

# --- release bundle -----------------------------------------------------------------------

variable "release_version" {
  description = "The Floe release every machine installs at first boot: the bundle s3://<bucket>/releases/floe-<version>-<arch>-linux.tar.gz (scripts/package.sh), unless release_url is set."
  type        = string
  validation {
    condition     = can(regex("^[0-9A-Za-z][0-9A-Za-z.+_-]*$", var.release_version))
    error_message = "release_version must be a version string such as 0.1.0 or 0.1.0-rc.1+abc123."
  }
}

variable "release_url" {
  description = "Download the bundle from this https URL instead of the bucket."
  type        = string
  default     = null
  validation {
    condition     = var.release_url == null || can(regex("^https://", var.release_url))
    error_message = "release_url must be an https:// URL."
  }
}

variable "release_sha256" {
  description = "SHA-256 of the bundle; when set, machines refuse a bundle that does not match."
  type        = string
  default     = null
  validation {
    condition     = var.release_sha256 == null || can(regex("^[0-9a-f]{64}$", var.release_sha256))
    error_message = "release_sha256 must be 64 lower-case hex digits."
  }
}

# --- machines -----------------------------------------------------------------------------

variable "ami_id" {
  description = "The machine image of every instance; default: the latest Amazon Linux 2023 for the architecture (it ships the AWS CLI the boot script uses)."
  type        = string
  default     = null
  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]+$", var.ami_id))
    error_message = "ami_id must look like ami-0123456789abcdef0."
  }
}

variable "architecture" {
  description = "CPU architecture of every instance type below and of the release bundle: x86_64 or arm64."
  type        = string
  default     = "x86_64"
  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "broker_count" {
  description = "Brokers: an odd number, at least 3, so that a majority of replicas survives a zone or a machine."
  type        = number
  default     = 3
  validation {
    condition     = var.broker_count >= 3 && var.broker_count % 2 == 1 && floor(var.broker_count) == var.broker_count
    error_message = "broker_count must be an odd whole number of at least 3 (3, 5, 7, …)."
  }
}

variable "broker_instance_type" {
  description = "Instance type of the brokers."
  type        = string
  default     = "m7i.large"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[0-9]*(nano|micro|small|medium|large|xlarge|metal[a-z0-9-]*)$", var.broker_instance_type))
    error_message = "broker_instance_type must be an EC2 instance type such as m7i.large."
  }
}

variable "broker_volume" {
  description = "Each broker's data volume (gp3): size, IOPS and throughput. It outlives the instance."
  type = object({
    size_gib        = optional(number, 200)
    iops            = optional(number, 3000)
    throughput_mibs = optional(number, 250)
  })
  default = {}
  validation {
    condition     = var.broker_volume.size_gib >= 20 && var.broker_volume.iops >= 3000 && var.broker_volume.throughput_mibs >= 125
    error_message = "broker_volume needs size_gib >= 20, iops >= 3000 and throughput_mibs >= 125 (gp3's floor)."
  }
}

variable "controlplane_instance_type" {
  description = "Instance type of the two controlplanes."
  type        = string
  default     = "t3.small"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[0-9]*(nano|micro|small|medium|large|xlarge|metal[a-z0-9-]*)$", var.controlplane_instance_type))
    error_message = "controlplane_instance_type must be an EC2 instance type such as t3.small."
  }
}

variable "read_replica_instance_type" {
  description = "Instance type of the read replicas."
  type        = string
  default     = "m7i.large"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[0-9]*(nano|micro|small|medium|large|xlarge|metal[a-z0-9-]*)$", var.read_replica_instance_type))
    error_message = "read_replica_instance_type must be an EC2 instance type such as m7i.large."
  }
}

variable "read_replica_max" {
  description = "The most read replicas the group may hold: the group's max_size. Set the controlplane's scaling policy's max_replicas to this or less."
  type        = number
  default     = 8
  validation {
    condition     = var.read_replica_max >= 1 && var.read_replica_max <= 100
    error_message = "read_replica_max must be between 1 and 100."
  }
}

variable "read_replica_cache_gib" {
  description = "Root volume of each read replica, most of it for the tier cache's disk half."
  type        = number
  default     = 50
  validation {
    condition     = var.read_replica_cache_gib >= 20
    error_message = "read_replica_cache_gib must be at least 20."
  }
}

variable "enable_ssm" {
  description = "Attach AmazonSSMManagedInstanceCore to every role, so operators reach machines through Session Manager (no SSH port is opened)."
  type        = bool
  default     = true
}

# --- database -----------------------------------------------------------------------------

variable "database" {
  description = "The controlplane's PostgreSQL (RDS): instance class, storage, Multi-AZ, engine version, deletion protection, backups."
  type = object({
    instance_class        = optional(string, "db.t4g.small")
    allocated_storage_gib = optional(number, 20)
    multi_az              = optional(bool, true)
    engine_version        = optional(string, "16")
    deletion_protection   = optional(bool, true)
    backup_retention_days = optional(number, 7)
    skip_final_snapshot   = optional(bool, false)
  })
  default = {}
  validation {
    condition     = can(regex("^db\\.[a-z0-9]+\\.[0-9]*(micro|small|medium|large|xlarge)$", var.database.instance_class)) && var.database.allocated_storage_gib >= 20 && var.database.backup_retention_days >= 1
    error_message = "database needs an instance_class such as db.t4g.small, allocated_storage_gib >= 20 and backup_retention_days >= 1."
  }
}

# --- client profile -----------------------------------------------------------------------

variable "client_ca_cert_path" {
  description = "Where the client profile output says the cluster CA's PEM file is on the laptop (see docs/deploy-aws.md)."
  type        = string
  default     = "floe-tls/ca.pem"
}

variable "log_format" {
  description = "Log format of every process: text or json (one object per line, for a log shipper)."
  type        = string
  default     = "json"
  validation {
    condition     = contains(["text", "json"], var.log_format)
    error_message = "log_format must be text or json."
  }
}

variable "api_certificate_arn" {
  description = "An ACM certificate for the internet-facing REST API listener: with it, operators reach the API over TLS on port 443; without it, over plain HTTP on the controlplane port (admin token in clear text: keep operator_cidrs narrow)."
  type        = string
  default     = null
  validation {
    condition     = var.api_certificate_arn == null || can(regex("^arn:aws[a-z-]*:acm:", var.api_certificate_arn))
    error_message = "api_certificate_arn must be an ACM certificate ARN."
  }
}

# A complete Floe cluster in a new VPC: copy this directory, set the variables in a
# terraform.tfvars (see terraform.tfvars.example), then follow docs/deploy-aws.md.

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.60, < 6.0"
    }
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = { "floe:cluster" = var.name, "managed-by" = "terraform" }
  }
}

data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:Only the first three zones by name are used (slice below); a zone AWS adds later does not move the subnets.
  state = "available"
}

locals {
  zones = slice(data.aws_availability_zones.available.names, 0, 3)
}

# --- network: public subnets for the machines, private ones for the database ------------

resource "aws_vpc" "floe" {
  #checkov:skip=CKV2_AWS_11:Flow logs need a log destination and cost per GB; enable them where the platform team collects them.
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = var.name }
}

# No rule: nothing may use the VPC's default group by accident.
resource "aws_default_security_group" "floe" {
  vpc_id = aws_vpc.floe.id
}

resource "aws_internet_gateway" "floe" {
  vpc_id = aws_vpc.floe.id
  tags   = { Name = var.name }
}

resource "aws_subnet" "public" {
  count             = length(local.zones)
  vpc_id            = aws_vpc.floe.id
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, count.index)
  availability_zone = local.zones[count.index]
  # Brokers get Elastic IPs and read replicas ask for public addresses explicitly; nothing
  # else launched here is public.
  map_public_ip_on_launch = false
  tags                    = { Name = "${var.name}-public-${local.zones[count.index]}" }
}

resource "aws_subnet" "database" {
  count             = length(local.zones)
  vpc_id            = aws_vpc.floe.id
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, 8 + count.index)
  availability_zone = local.zones[count.index]
  tags              = { Name = "${var.name}-database-${local.zones[count.index]}" }
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.floe.id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.floe.id
  }
  tags = { Name = "${var.name}-public" }
}

resource "aws_route_table_association" "public" {
  count          = length(aws_subnet.public)
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public.id
}

# S3 traffic stays on AWS's network and costs no data processing.
resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.floe.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.public.id]
  tags              = { Name = "${var.name}-s3" }
}

# --- Floe ---------------------------------------------------------------------------------

module "floe" {
  source = "../../modules/floe-aws"

  name                = var.name
  vpc_id              = aws_vpc.floe.id
  subnet_ids          = aws_subnet.public[*].id
  database_subnet_ids = aws_subnet.database[*].id
  public_access       = true
  client_cidrs        = var.client_cidrs
  operator_cidrs      = var.operator_cidrs
  monitoring_cidrs    = coalescelist(var.monitoring_cidrs, [var.vpc_cidr])
  release_version     = var.release_version
  release_sha256      = var.release_sha256
  ami_id              = var.ami_id
  broker_count        = var.broker_count
  read_replica_max    = var.read_replica_max
  force_destroy       = var.force_destroy
  database            = var.database
  enable_ssm          = var.enable_ssm
}

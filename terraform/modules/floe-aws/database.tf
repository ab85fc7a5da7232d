# The controlplanes' metadata: RDS PostgreSQL, encrypted, Multi-AZ by default, reachable only
# from the controlplanes. RDS generates the master password and keeps it in Secrets Manager
# (manage_master_user_password): it is never in Terraform's state; controlplanes read it at
# start, finding the instance by its identifier (so that nothing on the machines waits for
# the database to exist before they are created).

locals {
  database_identifier = "${var.name}-metadata"
}

resource "aws_db_subnet_group" "metadata" {
  name       = "${var.name}-metadata"
  subnet_ids = length(var.database_subnet_ids) > 0 ? var.database_subnet_ids : var.subnet_ids
  tags       = local.tags
}

# The controlplane's PostgreSQL client has no TLS (the database is reached inside the VPC,
# behind a security group that admits only the controlplanes), while PostgreSQL 15 and later
# on RDS require TLS by default: allow plain connections on this instance only.
resource "aws_db_parameter_group" "metadata" {
  name_prefix = "${var.name}-metadata-"
  family      = "postgres${split(".", var.database.engine_version)[0]}"
  description = "Floe metadata: the controlplane connects without TLS inside the VPC"
  parameter {
    name  = "rds.force_ssl"
    value = "0"
  }
  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }
  tags = local.tags
  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_db_instance" "metadata" {
  #checkov:skip=CKV_AWS_161:The controlplane authenticates with the RDS-managed password; its PostgreSQL client has no IAM token support.
  #checkov:skip=CKV_AWS_118:Enhanced monitoring needs a monitoring role and costs per instance; CloudWatch's basic metrics and the exported logs cover the controlplane's small load.
  #checkov:skip=CKV_AWS_353:Performance Insights is a per-deployment choice (db.t4g.small supports it at extra cost).
  #checkov:skip=CKV2_AWS_30:Query logging is on for statements slower than one second (log_min_duration_statement), not for every statement.
  #checkov:skip=CKV2_AWS_69:The controlplane's PostgreSQL client has no TLS; the database admits only the controlplanes' security group inside the VPC.
  #checkov:skip=CKV_AWS_133:Backups are kept var.database.backup_retention_days (7 by default, validated >= 1), which checkov cannot read through the object variable.
  #checkov:skip=CKV_AWS_157:Multi-AZ is var.database.multi_az, on by default.
  #checkov:skip=CKV_AWS_293:Deletion protection is var.database.deletion_protection, on by default.
  identifier                      = local.database_identifier
  engine                          = "postgres"
  engine_version                  = var.database.engine_version
  instance_class                  = var.database.instance_class
  allocated_storage               = var.database.allocated_storage_gib
  storage_type                    = "gp3"
  storage_encrypted               = true
  kms_key_id                      = var.kms_key_arn
  db_name                         = "floe"
  username                        = "floe"
  manage_master_user_password     = true
  multi_az                        = var.database.multi_az
  db_subnet_group_name            = aws_db_subnet_group.metadata.name
  parameter_group_name            = aws_db_parameter_group.metadata.name
  vpc_security_group_ids          = [aws_security_group.this["database"].id]
  publicly_accessible             = false
  backup_retention_period         = var.database.backup_retention_days
  deletion_protection             = var.database.deletion_protection
  skip_final_snapshot             = var.database.skip_final_snapshot
  final_snapshot_identifier       = var.database.skip_final_snapshot ? null : "${var.name}-metadata-final"
  copy_tags_to_snapshot           = true
  auto_minor_version_upgrade      = true
  enabled_cloudwatch_logs_exports = ["postgresql", "upgrade"]
  apply_immediately               = false
  tags                            = local.tags
}

# One role per kind of machine, each allowed exactly what its process does:
# - brokers read and write tiered segments and manifests under the prefix;
# - read replicas only read them (Get/List: no Put, no Delete);
# - controlplanes scale and describe the read-replica group, and read the database secret and
#   the peer CA's key (to issue brokers their peer certificates).
# Every role reads the release bundles and the cluster's bootstrap secret (TLS, tokens).

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

locals {
  prefix_objects = "${aws_s3_bucket.tier.arn}/${var.object_prefix}/*"
  releases       = "${aws_s3_bucket.tier.arn}/releases/*"
  roles = {
    broker       = "Floe brokers: read and write tiered segments under the prefix"
    read_replica = "Floe read replicas: read tiered segments only"
    controlplane = "Floe controlplanes: scale the read-replica group"
  }
}

resource "aws_iam_role" "this" {
  for_each           = local.roles
  name               = "${var.name}-${replace(each.key, "_", "-")}"
  description        = each.value
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
  tags               = local.tags
}

resource "aws_iam_instance_profile" "this" {
  for_each = local.roles
  name     = "${var.name}-${replace(each.key, "_", "-")}"
  role     = aws_iam_role.this[each.key].name
  tags     = local.tags
}

resource "aws_iam_role_policy_attachment" "ssm" {
  for_each   = var.enable_ssm ? local.roles : {}
  role       = aws_iam_role.this[each.key].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

# Listing only under the prefix (and releases/, to find bundles).
data "aws_iam_policy_document" "list_prefix" {
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.tier.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.object_prefix}/*", var.object_prefix, "releases/*"]
    }
  }
}

data "aws_iam_policy_document" "common" {
  statement {
    sid       = "ReadReleases"
    actions   = ["s3:GetObject"]
    resources = [local.releases]
  }
  statement {
    sid       = "ReadBootstrapSecret"
    actions   = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    resources = [aws_secretsmanager_secret.bootstrap.arn]
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "DecryptObjects"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

data "aws_iam_policy_document" "broker" {
  source_policy_documents = [data.aws_iam_policy_document.list_prefix.json, data.aws_iam_policy_document.common.json]
  statement {
    sid = "ReadWriteSegments"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = [local.prefix_objects]
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "EncryptObjects"
      actions   = ["kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }
}

data "aws_iam_policy_document" "read_replica" {
  source_policy_documents = [data.aws_iam_policy_document.list_prefix.json, data.aws_iam_policy_document.common.json]
  statement {
    sid       = "ReadSegments"
    actions   = ["s3:GetObject"]
    resources = [local.prefix_objects]
  }
}

data "aws_iam_policy_document" "controlplane" {
  source_policy_documents = [data.aws_iam_policy_document.common.json]
  statement {
    sid = "ScaleReadReplicas"
    actions = [
      "autoscaling:SetDesiredCapacity",
      "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    resources = [aws_autoscaling_group.read_replicas.arn]
  }
  # DescribeAutoScalingGroups takes no resource or tag condition in IAM: "*" is the only form
  # AWS accepts. It reveals group settings, nothing more.
  statement {
    sid       = "DescribeGroups"
    actions   = ["autoscaling:DescribeAutoScalingGroups"]
    resources = ["*"]
  }
  statement {
    sid       = "FindDatabase"
    actions   = ["rds:DescribeDBInstances"]
    resources = ["arn:${local.partition}:rds:${local.region}:${local.account_id}:db:${local.database_identifier}"]
  }
  statement {
    sid       = "ReadDatabaseSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_db_instance.metadata.master_user_secret[0].secret_arn]
  }
  statement {
    sid       = "ReadPeerCaKey"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.peer_ca.arn]
  }
}

locals {
  role_policies = {
    broker       = data.aws_iam_policy_document.broker.json
    read_replica = data.aws_iam_policy_document.read_replica.json
    controlplane = data.aws_iam_policy_document.controlplane.json
  }
}

resource "aws_iam_role_policy" "this" {
  for_each = local.roles
  name     = "floe-${replace(each.key, "_", "-")}"
  role     = aws_iam_role.this[each.key].id
  policy   = local.role_policies[each.key]
}

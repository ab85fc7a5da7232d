# The bucket of tiered segments, tier manifests (under var.object_prefix) and release
# bundles (under releases/): private, encrypted, reachable only over TLS.

resource "aws_s3_bucket" "tier" {
  #checkov:skip=CKV_AWS_18:Access logging needs a second bucket the platform team owns; enable it there (docs/deploy-aws.md).
  #checkov:skip=CKV_AWS_21:Segment objects are immutable with unique keys and manifests are created put-if-absent, so versioning protects nothing and keeps every collected segment billable.
  #checkov:skip=CKV_AWS_144:Cross-region replication is a disaster-recovery choice per deployment, and doubles the storage bill.
  #checkov:skip=CKV_AWS_145:SSE-S3 by default; var.kms_key_arn switches to a customer-managed KMS key.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events; brokers commit every upload to the tier manifest.
  bucket        = local.bucket_name
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "tier" {
  bucket                  = aws_s3_bucket.tier.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "tier" {
  bucket = aws_s3_bucket.tier.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "tier" {
  bucket = aws_s3_bucket.tier.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "tier" {
  bucket = aws_s3_bucket.tier.id
  # A broker that crashed in a multipart upload leaves parts no manifest references and no
  # listing of objects shows; only this rule removes them.
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_days
    }
  }
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyPlainHttp"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.tier.arn,
      "${aws_s3_bucket.tier.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "tier" {
  bucket = aws_s3_bucket.tier.id
  policy = data.aws_iam_policy_document.bucket.json
  # Public access blocks first: a bucket policy must never be briefly public.
  depends_on = [aws_s3_bucket_public_access_block.tier]
}

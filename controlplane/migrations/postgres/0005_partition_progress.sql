-- Leaders report each partition's high watermark and how far each follower lags behind its
-- log end (JSON: [{"broker_id": N, "records": N}]); `describe` shows both.
ALTER TABLE partitions ADD COLUMN high_watermark BIGINT;
ALTER TABLE partitions ADD COLUMN replica_lag TEXT;

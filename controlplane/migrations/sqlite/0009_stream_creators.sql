-- The principal that created each stream, for the limit of streams per principal; null for
-- streams created without authentication, or before this migration.
ALTER TABLE streams ADD COLUMN created_by TEXT;
CREATE INDEX streams_by_creator ON streams (created_by);

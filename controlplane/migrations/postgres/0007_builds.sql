-- The build (version and commit) each broker and read replica registered with, for
-- operators (`floe version`, `floe broker list`); null for those registered before.
ALTER TABLE brokers ADD COLUMN build_version TEXT;
ALTER TABLE brokers ADD COLUMN build_commit TEXT;
ALTER TABLE read_replicas ADD COLUMN build_version TEXT;
ALTER TABLE read_replicas ADD COLUMN build_commit TEXT;

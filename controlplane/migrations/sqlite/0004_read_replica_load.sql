-- Read replicas report their fetch latency (99th percentile, microseconds) and cache hit
-- ratio (thousandths) besides bytes served and consumers. `read_replica_sequence` numbers
-- the ids the controlplane assigns (`r-<n>`), never reused even after a replica is
-- forgotten.
ALTER TABLE read_replicas ADD COLUMN fetch_latency_p99_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE read_replicas ADD COLUMN cache_hit_ratio_permille INTEGER NOT NULL DEFAULT 0;
INSERT INTO cluster_meta (key, value) VALUES ('read_replica_sequence', 0);

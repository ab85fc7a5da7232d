-- Floe controlplane metadata, version 1 (SQLite). Integers are 64-bit; times are
-- milliseconds since the Unix epoch; enums are their lowercase names.

CREATE TABLE cluster_meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO cluster_meta (key, value) VALUES ('assignment_version', 0);

CREATE TABLE streams (
    name TEXT PRIMARY KEY,
    partition_count INTEGER NOT NULL,
    replication_factor INTEGER NOT NULL,
    ack_mode TEXT NOT NULL,
    segment_bytes INTEGER,
    segment_age_ms INTEGER,
    local_retention_bytes INTEGER,
    local_retention_ms INTEGER,
    tier_retention_bytes INTEGER,
    tier_retention_ms INTEGER,
    created_at_ms INTEGER NOT NULL
);

CREATE TABLE partitions (
    stream TEXT NOT NULL REFERENCES streams (name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    leader INTEGER,
    epoch INTEGER NOT NULL,
    -- Rows in partition_replicas for this partition, kept with them: finds
    -- under-replicated partitions without counting.
    replica_count INTEGER NOT NULL,
    hot_start INTEGER,
    hot_end INTEGER,
    tier_start INTEGER,
    tier_end INTEGER,
    bytes INTEGER,
    upload_backlog_bytes INTEGER,
    PRIMARY KEY (stream, partition)
);

CREATE TABLE partition_replicas (
    stream TEXT NOT NULL,
    partition INTEGER NOT NULL,
    position INTEGER NOT NULL,
    broker_id INTEGER NOT NULL,
    PRIMARY KEY (stream, partition, position),
    FOREIGN KEY (stream, partition) REFERENCES partitions (stream, partition) ON DELETE CASCADE
);
CREATE INDEX partition_replicas_by_broker ON partition_replicas (broker_id);
CREATE INDEX partitions_by_leader ON partitions (leader);

CREATE TABLE brokers (
    id INTEGER PRIMARY KEY,
    client_endpoint TEXT NOT NULL,
    peer_endpoint TEXT NOT NULL,
    zone TEXT,
    state TEXT NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    registered_at_ms INTEGER NOT NULL
);

CREATE TABLE group_offsets (
    group_name TEXT NOT NULL,
    stream TEXT NOT NULL REFERENCES streams (name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (group_name, stream, partition)
);

CREATE TABLE read_replicas (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    zone TEXT,
    state TEXT NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    bytes_served_per_second INTEGER NOT NULL,
    consumers INTEGER NOT NULL
);

CREATE TABLE scaling_policy (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    min_replicas INTEGER NOT NULL,
    max_replicas INTEGER NOT NULL,
    target_bytes_per_second INTEGER NOT NULL,
    target_consumers INTEGER NOT NULL,
    hysteresis_percent INTEGER NOT NULL,
    scale_up_cooldown_ms INTEGER NOT NULL,
    scale_down_cooldown_ms INTEGER NOT NULL
);

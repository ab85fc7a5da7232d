-- Floe controlplane metadata, version 1 (PostgreSQL). Integers are 64-bit; times are
-- milliseconds since the Unix epoch; enums are their lowercase names.

CREATE TABLE cluster_meta (
    key TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO cluster_meta (key, value) VALUES ('assignment_version', 0);

CREATE TABLE streams (
    name TEXT PRIMARY KEY,
    partition_count BIGINT NOT NULL,
    replication_factor BIGINT NOT NULL,
    ack_mode TEXT NOT NULL,
    segment_bytes BIGINT,
    segment_age_ms BIGINT,
    local_retention_bytes BIGINT,
    local_retention_ms BIGINT,
    tier_retention_bytes BIGINT,
    tier_retention_ms BIGINT,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE partitions (
    stream TEXT NOT NULL REFERENCES streams (name) ON DELETE CASCADE,
    partition BIGINT NOT NULL,
    leader BIGINT,
    epoch BIGINT NOT NULL,
    -- Rows in partition_replicas for this partition, kept with them: finds
    -- under-replicated partitions without counting.
    replica_count BIGINT NOT NULL,
    hot_start BIGINT,
    hot_end BIGINT,
    tier_start BIGINT,
    tier_end BIGINT,
    bytes BIGINT,
    upload_backlog_bytes BIGINT,
    PRIMARY KEY (stream, partition)
);

CREATE TABLE partition_replicas (
    stream TEXT NOT NULL,
    partition BIGINT NOT NULL,
    position BIGINT NOT NULL,
    broker_id BIGINT NOT NULL,
    PRIMARY KEY (stream, partition, position),
    FOREIGN KEY (stream, partition) REFERENCES partitions (stream, partition) ON DELETE CASCADE
);
CREATE INDEX partition_replicas_by_broker ON partition_replicas (broker_id);
CREATE INDEX partitions_by_leader ON partitions (leader);

CREATE TABLE brokers (
    id BIGINT PRIMARY KEY,
    client_endpoint TEXT NOT NULL,
    peer_endpoint TEXT NOT NULL,
    zone TEXT,
    state TEXT NOT NULL,
    lease_expires_at_ms BIGINT NOT NULL,
    registered_at_ms BIGINT NOT NULL
);

CREATE TABLE group_offsets (
    group_name TEXT NOT NULL,
    stream TEXT NOT NULL REFERENCES streams (name) ON DELETE CASCADE,
    partition BIGINT NOT NULL,
    committed_offset BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (group_name, stream, partition)
);

CREATE TABLE read_replicas (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    zone TEXT,
    state TEXT NOT NULL,
    lease_expires_at_ms BIGINT NOT NULL,
    bytes_served_per_second BIGINT NOT NULL,
    consumers BIGINT NOT NULL
);

CREATE TABLE scaling_policy (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    min_replicas BIGINT NOT NULL,
    max_replicas BIGINT NOT NULL,
    target_bytes_per_second BIGINT NOT NULL,
    target_consumers BIGINT NOT NULL,
    hysteresis_percent BIGINT NOT NULL,
    scale_up_cooldown_ms BIGINT NOT NULL,
    scale_down_cooldown_ms BIGINT NOT NULL
);

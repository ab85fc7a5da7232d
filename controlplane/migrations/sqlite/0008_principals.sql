-- Principals (people, applications, brokers, read replicas), their grants and the hashes
-- of their tokens. The version in cluster_meta increases with every change, so brokers and
-- read replicas fetch the table again only when it moved.
CREATE TABLE principals (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    -- The grants, space-separated (`publish:orders consume:logs-*`).
    grants TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE TABLE principal_tokens (
    key_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL REFERENCES principals (name) ON DELETE CASCADE,
    -- SHA-256 of the whole token, 64 hex digits; the token itself is never stored.
    secret_hash TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX principal_tokens_by_principal ON principal_tokens (principal);
INSERT INTO cluster_meta (key, value) VALUES ('principals_version', 0);

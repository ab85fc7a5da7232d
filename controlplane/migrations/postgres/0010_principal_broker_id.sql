-- A principal of kind `broker` may be bound to one broker id: it acts for that broker only
-- (register as it, heartbeat, read its assignments, report its elections, ask for its peer
-- certificate). NULL: any broker, and every principal of another kind.
ALTER TABLE principals ADD COLUMN broker_id BIGINT;

-- A replicated partition's leader is elected from its replicas' reports: while `electing`
-- is 1, an election for `epoch` runs and `leader` is null; 0 otherwise. An integer rather
-- than a boolean so that both backends store and compare it alike.
ALTER TABLE partitions ADD COLUMN electing INTEGER NOT NULL DEFAULT 0;

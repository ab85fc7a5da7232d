-- A replicated partition's replica set changes in two steps (a dead broker is replaced):
-- while `previous_replicas` holds the set being left (JSON: [broker ids]), records commit
-- only on a majority of both sets and elections count both; null otherwise.
ALTER TABLE partitions ADD COLUMN previous_replicas TEXT;

-- A broker's replicas found by one index range: (broker_id, stream, partition), unique
-- because a broker holds at most one replica of a partition. The assignments of one broker
-- are read from this range and joined to their partitions, rather than scanning every
-- replica in the cluster.
DROP INDEX partition_replicas_by_broker;
CREATE UNIQUE INDEX partition_replicas_by_broker ON partition_replicas (broker_id, stream, partition);

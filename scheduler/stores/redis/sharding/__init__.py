"""One namespace split into N shards (Redis Cluster, or one Redis): which shard a job lives
in, and the sharded store's claim rounds.
"""

"""Sharded mode: a model's coordinates split over K feature shards, the
per-example scalars combined, and g_t fed back to the shards through Kafka."""

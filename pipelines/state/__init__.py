"""Durable learner state: model checkpoints (exact mode) and checkpoint cuts
(sharded mode) on one atomic, fsynced, verified store, and resuming from them."""

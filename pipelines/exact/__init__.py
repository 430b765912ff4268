"""Exact mode: one stateful learner per model, events in offset order."""

"""Conversions shared by both pipeline shapes: events to learner rows,
predictions and progressive metrics, dead letters, data files."""

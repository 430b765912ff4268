"""Conversions shared by both pipeline shapes: events to learner rows,
predictions and progressive metrics, dead letters, a data file's rows as
events (the files themselves are read by :mod:`pipelines.files`)."""

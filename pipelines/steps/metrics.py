"""The Beam metrics namespace of the pipelines' counters and gauges."""

NAMESPACE = "scinol"

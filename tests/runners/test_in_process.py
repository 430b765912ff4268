"""pipelines.runners.in_process: the FnApiRunner's metrics do not grow with
its bundles, so a long run keeps its memory and can read its counters."""

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.metrics.cells import GaugeData
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.core import RestrictionProvider

from pipelines.runners.in_process import consolidate_metrics_eagerly

# Beam's lazy merge could not read its metrics past about 1,000 bundles of a stage, or 3,000 where
# jedi is installed (importing it raises Python's recursion limit to 3,000)
BUNDLES = 3_500


class _Positions(RestrictionProvider):
    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n, restriction):
        return restriction.size()


class OnePerBundle(beam.DoFn):
    """Counts one position, then hands the rest back: a bundle per position,
    as an unbounded source that checkpoints does."""

    def __init__(self):
        self.counted = Metrics.counter("t", "counted")

    def process(self, n, tracker=beam.DoFn.RestrictionParam(_Positions())):
        position = tracker.current_restriction().start
        if tracker.try_claim(position):
            self.counted.inc()
            yield position
            tracker.defer_remainder()


def test_a_run_of_many_bundles_reads_its_counters():
    assert consolidate_metrics_eagerly()
    assert consolidate_metrics_eagerly()  # a second call changes nothing
    p = beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(["--direct_num_workers=1"]))
    p | beam.Create([BUNDLES]) | beam.ParDo(OnePerBundle())
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("counted"))["counters"]
    assert [c.committed for c in counters] == [BUNDLES]


def test_merged_metrics_are_a_list_of_one_entry_per_metric():
    from apache_beam.metrics import monitoring_infos
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    assert consolidate_metrics_eagerly()
    merged = []
    for k in range(3):
        bundle = [monitoring_infos.int64_user_counter("t", "a", 2, ptransform="s"),
                  monitoring_infos.int64_user_counter("t", "b", 5, ptransform="s"),
                  monitoring_infos.int64_user_gauge("t", "g", GaugeData(10 + k, timestamp=100 + k), ptransform="s")]
        merged = fn_runner.consolidate_monitoring_infos(iter(bundle + list(merged)))
    assert isinstance(merged, list) and len(merged) == 3
    counters = {m.labels["NAME"]: monitoring_infos.extract_counter_value(m) for m in merged
                if monitoring_infos.is_counter(m)}
    assert counters == {"a": 6, "b": 15}
    (gauge,) = [m for m in merged if monitoring_infos.is_gauge(m)]
    assert monitoring_infos.extract_gauge_value(gauge) == (102, 12)  # the latest of the three


class _ResultWhoseMetricsFail:
    """A pipeline result whose metrics cannot be read (what Beam's lazy merge did past
    its recursion limit): the stand-in is the input under test, not a runner."""

    def metrics(self):
        raise RecursionError("maximum recursion depth exceeded")


def test_a_run_whose_metrics_cannot_be_read_says_why_it_has_no_summary(caplog):
    from pipelines.launch import summarize

    with caplog.at_level("WARNING", logger="pipelines.launch"):
        assert summarize(_ResultWhoseMetricsFail()) is None
    assert "RecursionError: maximum recursion depth exceeded" in caplog.text

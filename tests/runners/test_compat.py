"""pipelines.runners.compat: every adjustment to Beam's internals applies to
the pinned Beam (a Beam upgrade fails here, naming the adjustment); the
step-time sampler no longer holds a bundle's end for up to 200 ms; the
FnApiRunner's metrics do not grow with its bundles, so a long run keeps its
memory and can read its counters; the state cache weighs values as Beam does
without walking every module each time."""

import logging
import re
import sys
import time
import types
from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.metrics.cells import GaugeData
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.worker import statecache, statesampler
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.counters import CounterFactory

from pipelines.runners.compat import (BEAM_VERSION, SAMPLING_PERIOD_MS, adjust_beam, consolidate_metrics_eagerly,
                                      end_bundles_promptly, stop_only_ended_workers)

SETUP = Path(__file__).resolve().parents[2] / "setup.py"


def test_the_adjustments_were_written_for_the_beam_that_is_pinned_and_installed():
    pinned = re.search(r'"apache-beam==([^"]+)"', SETUP.read_text()).group(1)
    assert pinned == BEAM_VERSION == beam.__version__, (
        f"setup.py pins apache-beam {pinned}, {beam.__version__} is installed, pipelines/runners/compat.py was "
        f"written for {BEAM_VERSION}: re-check each adjustment there against the new Beam, then set BEAM_VERSION")


def test_every_adjustment_applies_to_the_installed_beam():
    applied = adjust_beam()
    assert applied and all(applied.values()), (
        f"apache-beam {beam.__version__}: these compat adjustments no longer apply: "
        f"{sorted(name for name, ok in applied.items() if not ok)}")

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


def _stop_seconds(sampler) -> float:
    """How long ``stop()`` takes after a bundle-long second of sampling
    (the sampler's sleep has grown to its cap by then)."""
    sampler.start()
    time.sleep(1.2)
    began = time.monotonic()
    sampler.stop()
    return time.monotonic() - began


def test_a_sampler_made_after_it_stops_within_its_short_period():
    assert end_bundles_promptly()
    assert end_bundles_promptly()  # a second call changes nothing and says so
    sampler = statesampler.StateSampler("t", CounterFactory())
    assert sampler.sampling_period_ms == SAMPLING_PERIOD_MS
    # Beam's 200 ms period would make each stop wait 0-200 ms; five stops all under 60 ms
    # would then happen with probability 0.3^5
    waits = [_stop_seconds(statesampler.StateSampler("t", CounterFactory())) for _ in range(5)]
    assert max(waits) < 0.060, waits


def test_an_unknown_sampler_is_left_alone_and_said_so(monkeypatch, caplog):
    def changed(self, prefix, counter_factory, sampling_period_ms=50, ratio=2.0):
        pass

    monkeypatch.setattr(statesampler.StateSampler, "__init__", changed)
    with caplog.at_level(logging.WARNING, logger="pipelines.runners.compat"):
        assert not end_bundles_promptly()
    assert statesampler.StateSampler.__init__.__defaults__ == (50, 2.0)
    assert "compat adjustment end_bundles_promptly not applied" in caplog.text


# A stand-in for the SDK harness a pool starts (the runner side, a TaskManager, cannot run in this test): it
# records its pid under its control endpoint's name and exits when that "runner" hangs up (a file appears),
# as a harness ends when its runner closes the control stream.
STAND_IN_HARNESS = """#!/bin/sh
for arg in "$@"; do case "$arg" in --control_endpoint=*) runner="${arg#--control_endpoint=}";; esac; done
echo $$ > "$DIR/$runner.pid"
while [ ! -e "$DIR/$runner.hangup" ]; do sleep 0.02; done
"""


def _pool_of_processes(tmp_path, monkeypatch):
    from apache_beam.portability.api import beam_fn_api_pb2_grpc
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

    import grpc

    harness = tmp_path / "harness"
    harness.write_text(STAND_IN_HARNESS)
    harness.chmod(0o755)
    monkeypatch.setenv("DIR", str(tmp_path))
    address, server = BeamFnExternalWorkerPoolServicer.start(use_process=True, container_executable=str(harness))
    return beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(grpc.insecure_channel(address)), server


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _pid(tmp_path, runner: str) -> int:
    deadline = time.monotonic() + 10
    while not (tmp_path / f"{runner}.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return int((tmp_path / f"{runner}.pid").read_text())


def test_a_pool_shared_by_two_taskmanagers_stops_only_the_worker_whose_runner_hung_up(tmp_path, monkeypatch):
    """Two TaskManagers' first jobs both ask for worker "1-1" (Beam numbers
    workers per JVM). The first TaskManager to finish hangs up on its worker
    and asks to stop "1-1": the other TaskManager's worker keeps running;
    the last stop under the id stops the last worker, as Beam's pool does."""
    from apache_beam.portability.api import beam_fn_api_pb2, endpoints_pb2

    assert stop_only_ended_workers()
    pool, server = _pool_of_processes(tmp_path, monkeypatch)
    try:
        for runner in ("tm-a", "tm-b"):
            control = endpoints_pb2.ApiServiceDescriptor(url=runner)
            assert not pool.StartWorker(beam_fn_api_pb2.StartWorkerRequest(worker_id="1-1",
                                                                           control_endpoint=control)).error
        first, second = _pid(tmp_path, "tm-a"), _pid(tmp_path, "tm-b")
        (tmp_path / "tm-a.hangup").touch()
        assert not pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1")).error
        time.sleep(0.5)
        assert not _alive(first) and _alive(second), "the pool stopped the worker of the TaskManager still running"
        assert not pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1")).error
        deadline = time.monotonic() + 15
        while _alive(second) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(second), "the last worker under the id was not stopped"
    finally:
        server.stop(0)


def test_several_live_workers_under_an_id_none_hung_up_are_all_left_running(tmp_path, monkeypatch, caplog):
    from apache_beam.portability.api import beam_fn_api_pb2, endpoints_pb2

    assert stop_only_ended_workers()
    monkeypatch.setattr("pipelines.runners.compat.STOP_WAIT_S", 0.3)
    pool, server = _pool_of_processes(tmp_path, monkeypatch)
    try:
        for runner in ("tm-c", "tm-d"):
            pool.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
                worker_id="2-1", control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=runner)))
        pids = [_pid(tmp_path, "tm-c"), _pid(tmp_path, "tm-d")]
        with caplog.at_level(logging.WARNING, logger="pipelines.runners.compat"):
            assert not pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="2-1")).error
        assert all(_alive(pid) for pid in pids)
        assert "2 workers share the id 2-1 and none has ended" in caplog.text
    finally:
        for runner in ("tm-c", "tm-d"):
            (tmp_path / f"{runner}.hangup").touch()
        server.stop(0)


class _Kept:
    """A kept object as a stateful step's cache holds one: arrays, bytes, a
    dictionary, and a function whose globals (a module's) must not count."""

    def __init__(self):
        self.rows = np.arange(1000.0)
        self.pickled = b"x" * 300
        self.index = {"a": [1, 2, 3], "b": (4.0, "five")}
        self.weigh = np.sum


def test_cached_state_weighs_as_beam_weighs_it_without_walking_every_module_each_time(monkeypatch):
    from objsize import traverse

    from pipelines.runners import compat

    beam_weight = statecache.get_deep_size
    assert compat.size_cached_state_quickly()
    assert statecache.get_deep_size is compat._deep_size
    values = [[], [b"abc" * 100], [_Kept()], [_Kept(), _Kept()], [(1, 2, "x")] * 3, [compat], [{"k": _Kept()}]]
    assert [compat._deep_size(v) for v in values] == [beam_weight(v) for v in values]
    walks = []
    monkeypatch.setattr(traverse, "_iter_modules_globals", lambda: walks.append(1) or iter(()))
    compat._deep_size([b"x"]), compat._deep_size([b"y"])
    assert walks == []  # objsize's own walk is not taken
    monkeypatch.setitem(sys.modules, "scinol_test_new_module", types.ModuleType("scinol_test_new_module"))
    before = compat._module_globals[1]
    compat._deep_size([b"z"])
    assert len(compat._module_globals[1]) == len(before) + 1  # a newly imported module's globals are left out too

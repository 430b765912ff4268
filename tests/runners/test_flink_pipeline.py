"""A small real Beam pipeline (Python SDK) with a splittable DoFn and a
stateful DoFn with a timer, on FlinkRunner (embedded MiniCluster and a
2-TaskManager session cluster) and on Prism; the result is written to
files and read back.

Each runner's wall time is printed (``pytest -s``): start-up dominates it.
"""

from __future__ import annotations

import time
import warnings

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow

from pipelines.runners.compat import stop_only_ended_workers
from tests.support.flink import flink_args

pytestmark = pytest.mark.flink

COUNTS = {"a": 50, "b": 30, "c": 1}


class _UpTo(beam.transforms.core.RestrictionProvider):
    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class CountTo(beam.DoFn):
    """Splittable: (key, n) -> (key, 0), ..., (key, n-1), returning to the
    runner (an SDF checkpoint) every 7 claims so the runner must resume it."""

    def process(self, element, tracker=beam.DoFn.RestrictionParam(_UpTo())):
        key = element[0]
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield key, position
            position += 1
            if position % 7 == 0:
                tracker.defer_remainder()
                return


class CountAndSum(beam.DoFn):
    """Stateful, keyed: counts and sums a key's values; a timer at the end
    of the global window emits "key,count,sum" once per key."""

    COUNT = ReadModifyWriteStateSpec("count", VarIntCoder())
    TOTAL = ReadModifyWriteStateSpec("total", VarIntCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, element, count=beam.DoFn.StateParam(COUNT), total=beam.DoFn.StateParam(TOTAL),
                end=beam.DoFn.TimerParam(END)):
        count.write((count.read() or 0) + 1)
        total.write((total.read() or 0) + element[1])
        end.set(GlobalWindow().max_timestamp())

    @on_timer(END)
    def emit(self, key=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT), total=beam.DoFn.StateParam(TOTAL)):
        yield f"{key},{count.read()},{total.read()}"


def run_and_read(beam_args: list[str], out_dir) -> dict[str, tuple[int, int]]:
    """Run the pipeline; {key: (count, sum)} read back from its output files."""
    began = time.monotonic()
    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        (p | beam.Create(sorted(COUNTS.items()))
         | "CountTo" >> beam.ParDo(CountTo())
         | "CountAndSum" >> beam.ParDo(CountAndSum())
         | beam.io.WriteToText(str(out_dir / "out")))
    print(f"\n{beam_args[0]} {beam_args[1] if len(beam_args) > 1 else ''}: {time.monotonic() - began:.1f} s")
    result = {}
    for path in sorted(out_dir.glob("out*")):
        for line in path.read_text().splitlines():
            key, count, total = line.split(",")
            assert key not in result, f"{key} emitted twice (the end-of-window timer fired twice)"
            result[key] = (int(count), int(total))
    return result


EXPECTED = {key: (n, n * (n - 1) // 2) for key, n in COUNTS.items()}


def test_embedded_flink_runs_sdf_and_stateful_dofn(flink_job_server_jar, tmp_path):
    assert run_and_read(flink_args(flink_job_server_jar, "[local]"), tmp_path) == EXPECTED


def test_session_cluster_runs_sdf_and_stateful_dofn(flink_job_server_jar, flink_cluster, tmp_path):
    # Both TaskManagers start their workers in this process's LOOPBACK pool under the same id; without this
    # (`scinol run` applies it), the first to finish could stop the other's worker (1 run of 6 here, and CI)
    assert stop_only_ended_workers()
    finished_before = {j["jid"] for j in flink_cluster.jobs() if j["state"] == "FINISHED"}
    args = flink_args(flink_job_server_jar, flink_cluster.master) + ["--parallelism=2"]
    assert run_and_read(args, tmp_path) == EXPECTED
    # It ran on the cluster, not on an embedded MiniCluster of the job server.
    finished = [j for j in flink_cluster.jobs() if j["state"] == "FINISHED" and j["jid"] not in finished_before]
    assert len(finished) == 1
    # and no task of it failed and was restarted (WriteToText would hide a restart: it keeps one attempt's files)
    failures = flink_cluster.rest(f"/jobs/{finished[0]['jid']}/exceptions").get("exceptionHistory", {})
    assert failures.get("entries", []) == [], failures["entries"][0].get("stacktrace", "")[:2000]


def test_prism_runs_sdf_and_stateful_dofn(prism_binary, tmp_path):
    """Exact counts and sums on Prism. Once, in a CI run of the whole suite
    (two test workers beside Flink and Kafka), Prism fired key "a"'s
    end-of-window timer with 9 of its 50 values and dropped the other 41
    (docs/runners.md, Prism); 80 runs in a row, on an idle and on a loaded
    machine, did not show it again. A run that lost values that way is
    reported and run once more, and the second run must be exact: values
    lost twice in a row, or anything else wrong, fails."""
    args = ["--runner=PrismRunner", f"--prism_location={prism_binary}", "--environment_type=LOOPBACK"]
    first = run_and_read(args, _fresh(tmp_path / "first"))
    if first != EXPECTED and _values_lost(first):
        warnings.warn(f"Prism lost values of a key (its end-of-window timer fired early): {first}; running again")
        first = run_and_read(args, _fresh(tmp_path / "second"))
    assert first == EXPECTED


def _fresh(folder):
    folder.mkdir()
    return folder


def _values_lost(result: dict) -> bool:
    """Each key emitted at most once, with at most its values (a key with
    all of them lost is not emitted); and the result is not the expected one."""
    return (result != EXPECTED and result.keys() <= EXPECTED.keys()
            and all(result[k][0] <= EXPECTED[k][0] and result[k][1] <= EXPECTED[k][1] for k in result))


def test_a_run_that_lost_values_is_told_from_other_wrong_results():
    assert _values_lost({"a": (9, 241), "b": (30, 435), "c": (1, 0)})
    assert not _values_lost({"a": (51, 1275), "b": (30, 435), "c": (1, 0)})  # a value twice
    assert _values_lost({"b": (30, 435), "c": (1, 0)})  # all of a's values lost
    assert not _values_lost({"a": (50, 1300), "b": (30, 435), "c": (1, 0)})  # a wrong value
    assert not _values_lost({**EXPECTED, "d": (1, 0)}) and not _values_lost(EXPECTED)


@pytest.mark.parametrize("bad", ["nonsense"])
def test_provisioned_job_server_is_a_runnable_jar(flink_job_server_jar, bad):
    """The launcher jar starts Beam's FlinkJobServerDriver (which rejects an unknown flag by name)."""
    import subprocess

    out = subprocess.run(["java", "-jar", str(flink_job_server_jar), f"--{bad}"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert f'"--{bad}" is not a valid option' in out.stdout + out.stderr
    assert "FlinkJobServerDriver" in out.stdout + out.stderr


class _EmitAndFinalize(beam.DoFn):
    """Splittable over (marker folder, n): emits 0..n-1 and registers a
    bundle finalizer that writes a file (what the Kafka source does to
    commit offsets)."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, finalizer=beam.DoFn.BundleFinalizerParam,
                tracker=beam.DoFn.RestrictionParam(_UpTo())):
        folder = element[0]
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield position
            position += 1
            if position % 5 == 0:  # return to the runner now and then, like the Kafka source
                break
        finalizer.register(lambda: open(f"{folder}/finalized-{position}", "w").close())
        if position < tracker.current_restriction().stop:
            tracker.defer_remainder()


def test_embedded_flink_finalizes_bundles_after_a_checkpoint(flink_job_server_jar, tmp_path):
    """Streaming on Flink: bundle finalizers (the Kafka source's offset
    commits) run once a Flink checkpoint has completed. Flink's default
    checkpoint storage in the embedded cluster holds 5 MB; buffered bundle
    output larger than that fails every checkpoint, so bundles are finished
    before each checkpoint (--finish_bundle_before_checkpointing)."""
    args = flink_args(flink_job_server_jar, "[local]") + [
        "--streaming", "--checkpointing_interval=500", "--finish_bundle_before_checkpointing"]
    p = beam.Pipeline(options=PipelineOptions(args))
    _ = p | beam.Create([(str(tmp_path), 20)]) | beam.ParDo(_EmitAndFinalize())
    result = p.run()
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("finalized-*")) and time.monotonic() < deadline:
            assert result.state not in ("FAILED", "DONE", "CANCELLED"), f"job ended: {result.state}"
            time.sleep(0.5)
        assert list(tmp_path.glob("finalized-*")), "no bundle finalizer ran within 120 s of checkpointing"
    finally:
        result.cancel()

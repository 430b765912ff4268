"""Keys placed on Flink's subtasks (pipelines/beam_io/placement.py): the
subtask our code computes is the one Beam's and Flink's own classes
compute, and on a session cluster of two TaskManagers each step's records
spread evenly over its subtasks, read from Flink's REST API, with every
event predicted once and each model the single-process learner's."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from apache_beam.coders import BytesCoder, StrUtf8Coder, TupleCoder, VarIntCoder

from pipelines.beam_io.placement import Placement, default_max_parallelism, flink_subtask, nested
from pipelines.beam_io.read import placed_specs
from pipelines.kafka.consumer import PartitionRange
from pipelines.records.topics import read_records
from pipelines.runners.flink_rest import settled_records
from tests.support.processes import reaped
from tests.support.partitioned import PARTITIONS, check_scores_per_partition, produce, scinol_command

CHECKER = Path(__file__).parent.parent / "support" / "java" / "PlacementCheck.java"


def flinks_subtasks(job_server_jar, parallelism: int, keys: list[bytes]) -> list[int]:
    """The subtask of each key by Flink's KeyGroupRangeAssignment over Beam's FlinkKey."""
    classpath = ":".join(str(jar) for jar in sorted((Path(job_server_jar).parent / "lib").glob("*.jar")))
    out = subprocess.run(["java", "-cp", classpath, str(CHECKER), str(parallelism), *[k.hex() for k in keys]],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [int(line) for line in out.split()]


@pytest.mark.flink
def test_the_subtask_of_a_key_is_the_one_flink_computes(flink_job_server_jar):
    rng = random.Random(7)
    keys = [b"", *(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 48))) for _ in range(120)),
            nested(("p0", 0)), nested((("events", 3), 17))]
    for parallelism in (2, 3, 4, 100):  # 100: 256 key groups, not the 128 of the others
        assert [flink_subtask(k, parallelism) for k in keys] == flinks_subtasks(flink_job_server_jar, parallelism,
                                                                                keys), parallelism


def test_keys_are_encoded_as_the_runner_encodes_them():
    assert nested("model-ä") == StrUtf8Coder().get_impl().encode_nested("model-ä")
    assert nested(300) == VarIntCoder().get_impl().encode_nested(300)
    assert nested(-1) == VarIntCoder().get_impl().encode_nested(-1)
    assert nested((("events", 3), 9)) == TupleCoder(
        [TupleCoder([StrUtf8Coder(), VarIntCoder()]), VarIntCoder()]).get_impl().encode_nested((("events", 3), 9))
    assert nested(b"\x00\xff") == BytesCoder().get_impl().encode_nested(b"\x00\xff")
    with pytest.raises(TypeError, match="no runner encoding known for a key of type float"):
        nested(1.5)


def test_default_key_groups_are_flinks():
    assert [default_max_parallelism(p) for p in (1, 2, 4, 85, 86, 100, 30000)] == [128, 128, 128, 128, 256, 256,
                                                                                    32768]


@pytest.mark.parametrize("parallelism", [2, 3, 4])
def test_models_shards_and_partitions_land_where_placed(parallelism):
    place = Placement(parallelism, models=("a", "b", "c", "d", "e", "f"))
    for i, name in enumerate("abcdef"):
        assert flink_subtask(nested(place.model(name)), parallelism) == i % parallelism
        for s in range(5):
            assert flink_subtask(nested(place.shard(name, s)), parallelism) == (i + s) % parallelism
    for n in range(12):
        assert flink_subtask(nested(place.stream("events", n)), parallelism) == n % parallelism
    assert place.model("not-named") == ("not-named", 0)  # where its name hashes


def test_without_a_parallelism_every_salt_is_zero():
    place = Placement(None, models=("a", "b"))
    assert (place.model("a"), place.shard("b", 3), place.stream("t", 5)) == (("a", 0), (("b", 3), 0), (("t", 5), 0))


def test_the_source_reads_range_i_on_subtask_i():
    from apache_beam import coders

    ranges = [PartitionRange("events", n, 0, 1000) for n in range(12)]
    pickled = coders.registry.get_coder(type(placed_specs(ranges, Placement())[0]))
    for parallelism in (2, 4):
        specs = placed_specs(ranges, Placement(parallelism))
        assert [s[:5] for s in specs] == [tuple(r) for r in ranges]  # only the salt differs
        assert [flink_subtask(nested(pickled.encode(s)), parallelism) for s in specs] == [
            n % parallelism for n in range(12)]


def step(records: dict[str, list[int]], name: str) -> list[int]:
    (counts,) = [counts for vertex, counts in records.items() if name in vertex]
    return counts


def until(condition, seconds: float, what: str, story=lambda: ""):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"no {what} within {seconds:.0f} s; {story()}"
        time.sleep(2)
    return found


@pytest.mark.slow
@pytest.mark.flink
def test_partitions_and_models_spread_evenly_over_two_taskmanagers(tansu_bootstrap, topic_name, tmp_path,
                                                                   flink_cluster):
    """4 partitions, a model each, parallelism 2: each subtask reads 2
    partitions, sequences 2 and learns 2 models (keyed by their names
    alone, as before, p0, p1 and p2 land on one subtask). The run is
    unbounded and measured while it runs, as an operator reads a live job."""
    assert [flink_subtask(nested(f"p{n}"), 2) for n in range(PARTITIONS)] == [1, 1, 1, 0]
    X, y, events = produce(tansu_bootstrap, topic_name, 2000, per_partition_models=True)
    before = {j["jid"] for j in flink_cluster.jobs()}
    models = ",".join(f"p{n}" for n in range(PARTITIONS))
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(scinol_command(tansu_bootstrap, topic_name, tmp_path, "--runner", "flink",
                                               "--flink-master", flink_cluster.master, "--parallelism", "2",
                                               "--models", models),
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    with reaped(proc):
        story = lambda: (tmp_path / "stderr").read_text()[-3000:]  # noqa: E731
        (job,) = until(lambda: [j["jid"] for j in flink_cluster.jobs() if j["jid"] not in before], 300, "job",
                       story)
        until(lambda: len(read_records(tansu_bootstrap, topic_name + ".pred", len(events), timeout=5)) == len(
            events), 300, "predictions of every event", story)
        records = settled_records(flink_cluster.master, job)
        failures = flink_cluster.rest(f"/jobs/{job}/exceptions").get("exceptionHistory", {}).get("entries", [])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 130
    check_scores_per_partition(tansu_bootstrap, topic_name, X, y, events)
    assert failures == [], failures[0].get("stacktrace", "")[:2000]
    # A record is a partition to read, a batch, or a model's part of one: two keys a subtask give
    # each about half (batches per partition differ by a few: a poll may return fewer messages).
    for name in ("Decode", "Sequence", "LearnAndPredict"):
        counts = step(records, name)
        assert len(counts) == 2 and min(counts) > 0 and max(counts) / min(counts) <= 1.25, (name, records)


@pytest.mark.parametrize("flags, says", [
    (["--models", "p0,,p1", "--runner", "flink"], "--models takes model names separated by commas, got 'p0,,p1'"),
    (["--models", "p0,p1"], "--models places models on Flink's subtasks; --runner is direct"),
])
def test_models_that_cannot_be_placed_are_one_line_and_status_2(capsys, flags, says):
    from tests.support.cli import run

    rc, err = run(capsys, "run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "t.pred",
                  *flags)
    assert rc == 2 and err == [f"scinol: error: run: {says}"], err

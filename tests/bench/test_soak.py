"""The pieces of ``scinol bench soak`` on real inputs, without Flink (the
benchmark itself starts a broker, a session cluster and uploads a 156 MB
job: over a minute before its first row, so it is run by hand, and its
figures are in docs/operations.md): RSS read from /proc of processes that
hold or grow their memory, each process named by its role, the lag and the
latencies of predictions read back from Apache Kafka, the rows and the
verdict made of them, and a bad option in one line."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np

from pipelines.bench.soak_flink import checkpoint_figures
from pipelines.bench.soak_processes import LOAD, Processes, mean_rss, rss_mib
from pipelines.bench.soak_traffic import Predicted, _interleaved, lag
from pipelines.bench.soak_verdict import make_row, row_line, verdict, verdict_lines
from tests.support.processes import reaped

# Each says "ready" once its memory is written (so resident): a busy machine may take a second to start one.
HOLD = "import time; b = b'x' * ({mib} << 20); print('ready', flush=True); time.sleep(60)"
GROW = ("import time\nkept = []\nwhile True:\n    kept.append(b'x' * (12 << 20))\n"
        "    if len(kept) == 1: print('ready', flush=True)\n    time.sleep(0.3)")


def python(code: str, *argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *argv], stdin=subprocess.DEVNULL, **kw)


def ready(code: str) -> subprocess.Popen:
    """A process running ``code``, once it has said "ready"."""
    proc = python(code, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def measured_rows(groups: dict[str, list[int]], rows: int, samples: int = 3) -> list[dict]:
    """Rows as the soak makes them: RSS sampled from /proc, a mean per row."""
    made = []
    for k in range(1, rows + 1):
        taken = []
        for _ in range(samples):
            taken.append(rss_mib(groups))
            time.sleep(0.2)
        made.append(make_row(k * 60.0, 60.0, [], 0, 0, 0, mean_rss(taken), checkpoint_figures({}), 0.0))
    return made


def test_memory_that_grows_is_not_flat_and_memory_held_is():
    steady, growing = ready(HOLD.format(mib=40)), ready(GROW)
    with reaped(steady), reaped(growing):
        rows = measured_rows({"steady": [steady.pid], "growing": [growing.pid]}, rows=4)
    v = verdict(rows, warmup_minutes=1)  # the first row is the warm-up
    assert v["rows_after_warmup"] == 3 and v["flat"] is False
    assert v["series"]["steady"]["flat"] and v["series"]["steady"]["first"] > 40
    grown = v["series"]["growing"]
    assert not grown["flat"] and grown["growth"] > 0.10
    assert grown["last"] == max(r["rss_mib"]["growing"] for r in rows[1:])
    assert not v["checkpoint_size_judged"]  # no checkpoint: said so, not taken as flat
    lines = verdict_lines(v)
    assert lines[-1].startswith("verdict: memory and checkpoint size NOT FLAT")
    assert any(line.strip().startswith("growing:") and "NOT flat" in line for line in lines)


def test_the_load_producer_is_shown_but_not_judged():
    steady, growing = ready(HOLD.format(mib=20)), ready(GROW)
    with reaped(steady), reaped(growing):
        rows = measured_rows({"steady": [steady.pid], LOAD: [growing.pid]}, rows=3)
    v = verdict(rows, warmup_minutes=0)
    assert v["flat"] is True and not v["series"][LOAD]["judged"] and not v["series"][LOAD]["flat"]
    assert verdict(rows[:1], warmup_minutes=0)["flat"] is None  # one row: nothing to compare


def test_every_process_of_the_job_is_named_by_its_role():
    """A stand-in cluster of real processes: a TaskManager listening on a
    port, a worker pool whose child is a harness started for that port."""
    tm = python("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                "print(s.getsockname()[1], flush=True); time.sleep(60)", stdout=subprocess.PIPE, text=True)
    with reaped(tm):
        port = int(tm.stdout.readline())
        harness = f"'pipelines.runners.harness', '--control_endpoint=localhost:{port}'"
        pool = python("import subprocess, sys, time; "
                      f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', {harness}]); "
                      "time.sleep(60)")
        others = [ready(HOLD.format(mib=1)) for _ in range(4)]
        with reaped(pool), reaped(others[0]), reaped(others[1]), reaped(others[2]), reaped(others[3]):
            cluster = SimpleNamespace(jobmanager=others[0], taskmanagers={"scinol-tm-0": tm}, pool=pool)
            groups = wait_for_worker(Processes(cluster, others[1].pid, others[2].pid, others[3].pid))
            rss = rss_mib(groups)
            for pid in groups.get("python worker (tm0)", []):
                os.kill(pid, signal.SIGKILL)  # the pool's child: not reaped with the pool
    assert set(groups) >= {"jobmanager", "taskmanager (tm0)", "worker pool", "python worker (tm0)", "broker",
                           "scinol run", LOAD}
    assert groups["taskmanager (tm0)"] == [tm.pid] and groups["worker pool"] == [pool.pid]
    assert all(v > 1 for v in rss.values()) and "job server" not in rss  # no child of the run: no job server


def wait_for_worker(found: Processes, timeout: float = 30.0) -> dict[str, list[int]]:
    """Its groups once the harness has started (a busy machine takes a while)."""
    deadline = time.monotonic() + timeout
    while "python worker (tm0)" not in (groups := found.groups()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return groups


def test_lag_and_latency_from_predictions_read_back(apache_kafka_bootstrap, topic_name):
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec
    from pipelines.kafka.consumer import read_topic
    from pipelines.kafka.producer import KafkaWriter
    from pipelines.records.predictions import prediction_record
    from pipelines.records.topics import produce_values
    from schemas.codec import Codec

    bootstrap, events, preds = apache_kafka_bootstrap, topic_name, topic_name + ".pred"
    X, y = np.random.default_rng(1).normal(size=(40, 3)), np.ones(40)
    produce_values(bootstrap, events, lambda codec: _interleaved(codec, X, y, "t-", 2), partitions=2, progress=False)
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(preds, 1)])
    codec, writer = Codec(), KafkaWriter(bootstrap, preds)
    made, unanswered = [], 0
    for m in read_topic(bootstrap, events, limit=40, idle_timeout=None, timeout=60):
        event = codec.decode(m.value)
        assert event["model"] == f"m{m.partition}"  # a model per partition, as the soak's runs place them
        if m.partition == 1 and m.offset >= 15:  # the last 5 of partition 1 not yet predicted
            unanswered += 1
            continue
        made.append(prediction_record(event, event["model"], 1, [0.5], 0.6, 1, 0.3, time.time() * 1000,
                                      SimpleNamespace(topic=events, partition=m.partition, offset=m.offset)))
        writer.produce(codec.encode("scinol.Prediction", made[-1]), partition=0)
    writer.flush(30)
    writer.close()
    predicted = Predicted(bootstrap, preds)
    try:
        predicted.drain(KafkaAdmin(bootstrap).end_offsets(preds))
        ends = KafkaAdmin(bootstrap).end_offsets(events)
        row = make_row(30.0, 30.0, predicted.take_latencies(), predicted.count, sum(ends.values()),
                       lag(ends, predicted.next_offset), {"scinol run": 100.0}, checkpoint_figures({}), 1.0)
    finally:
        predicted.close()
    assert predicted.count == len(made) == 35 and row["lag"] == unanswered == 5
    latencies = [p["latency_ms"] for p in made]
    assert math.isclose(row["p50_ms"], float(np.percentile(latencies, 50)))
    assert math.isclose(row["p99_ms"], float(np.percentile(latencies, 99)))
    assert row["predicted_per_s"] == 35 / 30 and row["offered_per_s"] == 40 / 30
    assert "| none completed (0 failed) |" in row_line(row)


def test_flinks_checkpoint_answer_gives_size_and_duration():
    """The shape of ``GET /jobs/<id>/checkpoints`` as Flink 1.19 documents it."""
    answer = {"counts": {"completed": 7, "failed": 1, "in_progress": 0},
              "latest": {"completed": {"id": 8, "state_size": 123_456, "checkpointed_size": 120_000,
                                       "end_to_end_duration": 321}, "failed": None}}
    got = checkpoint_figures(answer)
    figures = (got["id"], got["size_bytes"], got["duration_ms"], got["completed"], got["failed"])
    assert figures == (8, 123_456, 321, 7, 1)
    assert checkpoint_figures({"counts": {"completed": 0}, "latest": {"completed": None}})["size_bytes"] is None


def test_a_bad_option_is_one_line_and_exit_status_2():
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "bench", "soak", "--row-seconds", "3"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "scinol: error: bench soak: --row-seconds must be at least 10 (RSS is sampled every 5 s)"]


def test_the_checkpoint_size_and_the_step_whose_state_grows():
    """Checkpoints as Flink's REST API gives them, one step's state growing."""
    rows = []
    for k, read_state in enumerate((1_000_000, 1_500_000, 2_000_000), start=1):
        answer = {"counts": {"completed": 6 * k, "failed": 0},
                  "latest": {"completed": {"id": 6 * k, "state_size": read_state + 40_000, "end_to_end_duration": 500}}}
        checkpoint = checkpoint_figures(answer)
        checkpoint["by_step"] = {"[1]Sequence": 30_000, "[5]{Read, Decode}": read_state, "[3]LearnAndPredict": 10_000}
        rows.append(make_row(k * 60.0, 60.0, [10.0, 20.0], 60, 60, 0, {"taskmanager (tm0)": 800.0}, checkpoint, 1.0))
    v = verdict(rows, warmup_minutes=0)
    assert v["flat"] is False and v["series"]["taskmanager (tm0)"]["flat"]
    size = v["series"]["checkpoint size"]
    assert not size["flat"] and math.isclose(size["growth"], 2_040_000 / 1_040_000 - 1)
    assert list(v["steps"])[0] == "[5]{Read, Decode}" and v["steps"]["[5]{Read, Decode}"]["last"] == 2_000_000
    assert any("checkpointed state of [5]{Read, Decode}: 977 -> 1,953 KiB" in line for line in verdict_lines(v))

"""``scinol bench soak``: an unbounded run on a Flink session cluster at a
fixed offered rate for ``--minutes``, with Flink checkpoints; does memory or
checkpoint size grow?

Started here, as ``scinol broker --kind kafka`` and ``scinol flink up`` start
them: one Apache Kafka broker and a session cluster (a JobManager, N
TaskManagers, Beam's worker pool: a Python worker per TaskManager). A load
process produces toy events round-robin over ``--partitions`` partitions, a
model per partition (``m0``, ``m1``, ...): first
:data:`pipelines.bench.load.WARM` of them, and
once their predictions are out, ``--rate`` events/s until the end, each
stamped when encoded (at most :data:`CHUNK_SECONDS` before it is sent). The
run is ``scinol run --runner flink --worker-pool ... --parallelism N
--models m0,... --checkpointing-interval MS``, as a user types it, with
scinol's own checkpoints every minute.

Every ``--row-seconds`` (60) after the warm-up events, one row: events/s
offered (the events topic's end offsets) and predicted (predictions read),
p50/p99 of the predictions' ``latency_ms`` (event stamped to prediction
made, so it includes the producer's 20 ms linger), the lag (events in the
topic minus those predicted, from the predictions' source offsets), the
last completed Flink checkpoint (``GET /jobs/<id>/checkpoints``: size,
duration) and the mean RSS (``/proc/PID/status``, sampled every
:data:`SAMPLE_SECONDS`) of every process of the job. At the end, a verdict:
each process's RSS and the checkpoint size, from the first row after
``--warmup-minutes`` on, within :data:`TOLERANCE` of that row or not. The
figures go to ``--json``. Everything started is stopped at the end, on
Ctrl-C and on SIGTERM (the JVMs also die with this process)::

    scinol bench soak [--minutes 30] [--rate 1000] [--partitions 4] [--json soak.json]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from pipelines.bench.scaling import control_port, descendants, listening_ports

# pipelines.bench.load (WARM, rss_kib) is imported where used: `scinol` builds this
# benchmark's parser for every command, and that module brings numpy and the learners.

TOLERANCE = 0.10
"""Largest deviation, after the warm-up, that counts as flat."""
SAMPLE_SECONDS = 5.0
CHUNK_SECONDS = 0.01
"""Events are encoded (and stamped) this many seconds' worth at a time."""
START_TIMEOUT = 600.0
"""Seconds the job has to predict the warm-up events (a 156 MB jar upload on a busy machine)."""
LOAD = "load producer"
"""The benchmark's own producer: shown, not judged (it is no part of the job)."""


# -- the load ------------------------------------------------------------------

def _interleaved(codec, X, y, prefix: str, partitions: int) -> list[bytes]:
    """Rows ``X`` as events round-robin over the partitions, row ``i`` of
    model ``m{i % partitions}``: value ``k`` goes to partition ``k % partitions``."""
    from pipelines.records.columnar import dense_values

    per = [dense_values(codec, X[p::partitions], y[p::partitions], f"{prefix}p{p}-", model=f"m{p}")
           for p in range(partitions)]
    return [value for row in zip(*per) for value in row]


def load_producer(bootstrap: str, topic: str, rate: float, partitions: int, go) -> None:
    """In a process of its own: ``WARM`` events at once, then, once
    ``go`` is set, events at ``rate`` events/s until terminated (100,000
    toy rows over and over, new ids)."""
    import itertools

    from learners.datasets import toy_examples
    from pipelines.bench.load import WARM
    from pipelines.records.topics import produce_values

    X, y = toy_examples(100_000, 7)
    warm = WARM - WARM % partitions
    produce_values(bootstrap, topic, lambda codec: _interleaved(codec, X[:warm], y[:warm], "warm-", partitions),
                   partitions=partitions, progress=False)
    go.wait()
    chunk = partitions * max(1, round(rate * CHUNK_SECONDS / partitions))
    rows = len(y) - len(y) % chunk

    def endless(codec):
        for k in itertools.count():
            for a in range(0, rows, chunk):
                yield from _interleaved(codec, X[a:a + chunk], y[a:a + chunk], f"s{k}-{a}-", partitions)

    produce_values(bootstrap, topic, endless, partitions=partitions, rate=rate, progress=False)


# -- what was predicted ----------------------------------------------------------

class Predicted:
    """Reads the predictions topic from its start: each row's latencies,
    the count, and the next unpredicted offset of each events partition."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer

        from schemas.codec import Codec

        self.topic, self.codec, self.count = topic, Codec(), 0
        self.latencies: list[float] = []
        self.next_offset: dict[int, int] = {}  # events partition -> 1 + highest offset predicted
        self.read_to: dict[int, int] = {}  # predictions partition -> next offset to read
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-{time.time_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])

    def poll(self, seconds: float) -> None:
        for message in self.consumer.consume(5000, timeout=seconds):
            if message.error() is not None:
                continue
            p = self.codec.decode(message.value())
            self.count += 1
            self.latencies.append(p["latency_ms"])
            part = p["source_partition"]
            self.next_offset[part] = max(self.next_offset.get(part, 0), p["source_offset"] + 1)
            self.read_to[message.partition()] = message.offset() + 1

    def drain(self, ends: dict[int, int], timeout: float = 30.0) -> None:
        """Read up to ``ends`` (the predictions topic's end offsets at some moment)."""
        deadline = time.monotonic() + timeout
        while any(self.read_to.get(p, 0) < end for p, end in ends.items()) and time.monotonic() < deadline:
            self.poll(0.2)

    def take_latencies(self) -> list[float]:
        taken, self.latencies = self.latencies, []
        return taken

    def close(self) -> None:
        self.consumer.close()


def lag(ends: dict[int, int], next_offset: dict[int, int]) -> int:
    """Events in the topic (its end offsets) that have no prediction yet."""
    return sum(max(0, end - next_offset.get(p, 0)) for p, end in ends.items())


# -- the processes and their memory -------------------------------------------------

class Processes:
    """Every process of the job by role: the JobManager, each TaskManager,
    the worker pool and each Python worker (named by the TaskManager it
    serves, found by its control port), the broker, the ``scinol run``
    client and its job server JVM, and the load producer."""

    def __init__(self, cluster, broker_pid: int, run_pid: int, load_pid: int):
        self.cluster, self.broker_pid, self.run_pid, self.load_pid = cluster, broker_pid, run_pid, load_pid
        self.workers: dict[int, str] = {}  # harness pid -> "python worker (tm0)"

    def groups(self) -> dict[str, list[int]]:
        tms = {f"tm{i}": proc.pid for i, (_, proc) in enumerate(sorted(self.cluster.taskmanagers.items()))}
        found = {"jobmanager": descendants(self.cluster.jobmanager.pid),
                 **{f"taskmanager ({name})": descendants(pid) for name, pid in tms.items()},
                 "worker pool": [self.cluster.pool.pid], "broker": descendants(self.broker_pid),
                 "scinol run": [self.run_pid], "job server": descendants(self.run_pid)[1:], LOAD: [self.load_pid]}
        for pid in descendants(self.cluster.pool.pid)[1:]:
            if pid not in self.workers and (port := control_port(pid)) is not None:
                owner = [name for name, tm in tms.items() if port in listening_ports(descendants(tm))]
                self.workers[pid] = f"python worker ({owner[0] if owner else pid})"
            if pid in self.workers:
                found.setdefault(self.workers[pid], []).append(pid)
        return found


def rss_mib(groups: dict[str, list[int]]) -> dict[str, float]:
    """Each group's resident memory in MiB (processes gone meanwhile count 0;
    a group with none alive is left out)."""
    out = {}
    for name, pids in groups.items():
        alive = [kib for kib in map(_rss_or_none, pids) if kib is not None]
        if alive:
            out[name] = sum(alive) / 1024
    return out


def _rss_or_none(pid: int) -> int | None:
    from pipelines.bench.load import rss_kib

    try:
        return rss_kib(pid)
    except (OSError, StopIteration):  # gone, or a zombie without VmRSS
        return None


def mean_rss(samples: list[dict[str, float]]) -> dict[str, float]:
    """Each process's mean over the samples it appears in."""
    names = {name for sample in samples for name in sample}
    return {name: sum(s[name] for s in samples if name in s) / sum(1 for s in samples if name in s)
            for name in sorted(names)}


# -- Flink's checkpoints ---------------------------------------------------------------

def checkpoint_figures(answer: dict) -> dict:
    """From ``GET /jobs/<id>/checkpoints``: the last completed checkpoint's id,
    size (bytes) and duration (ms), and the counts so far."""
    counts = answer.get("counts", {})
    last = (answer.get("latest") or {}).get("completed") or {}
    return {"id": last.get("id"), "size_bytes": last.get("state_size", last.get("checkpointed_size")),
            "duration_ms": last.get("end_to_end_duration"), "completed": counts.get("completed", 0),
            "failed": counts.get("failed", 0)}


def checkpoint_steps(cluster, job: str, checkpoint_id: int | None) -> dict[str, int]:
    """Each step's (Flink vertex's) state in checkpoint ``checkpoint_id``, in
    bytes (``GET /jobs/<id>/checkpoints/details/<checkpoint id>``): which step grows."""
    if checkpoint_id is None:
        return {}
    names = {v["id"]: v["name"] for v in cluster.rest(f"/jobs/{job}")["vertices"]}
    tasks = cluster.rest(f"/jobs/{job}/checkpoints/details/{checkpoint_id}").get("tasks", {})
    return {names.get(vid, vid): t.get("state_size", t.get("checkpointed_size", 0)) for vid, t in tasks.items()}


def heap_used_mib(cluster) -> dict[str, float]:
    """Each TaskManager's JVM heap in use (Flink's ``Status.JVM.Memory.Heap.Used``),
    MiB: whether a growing RSS is live data or heap pages touched for the first time."""
    out = {}
    for i, resource in enumerate(sorted(cluster.taskmanagers)):
        try:
            answer = cluster.rest(f"/taskmanagers/{resource}/metrics?get=Status.JVM.Memory.Heap.Used")
            out[f"tm{i}"] = float(answer[0]["value"]) / 2**20
        except (OSError, ValueError, LookupError):  # not served (yet): the row goes on without it
            out[f"tm{i}"] = float("nan")
    return out


# -- rows and the verdict ---------------------------------------------------------------

def make_row(end_s: float, seconds: float, latencies: list[float], predicted: int, offered: int, lag_events: int,
             rss: dict[str, float], checkpoint: dict, load: float) -> dict:
    """One row's figures from what was measured over its ``seconds``."""
    import numpy as np

    lat = np.asarray(latencies, float)
    pct = np.percentile(lat, [50, 99]).tolist() if lat.size else [float("nan")] * 2
    return {"minute": end_s / 60, "seconds": seconds, "offered_per_s": offered / seconds,
            "predicted_per_s": predicted / seconds, "p50_ms": pct[0], "p99_ms": pct[1], "lag": lag_events,
            "rss_mib": rss, "checkpoint": checkpoint, "load_average": load}


def deviation(values: list[float]) -> tuple[float, float]:
    """(largest |v / first - 1|, last / first - 1) of a series."""
    first = values[0]
    return max(abs(v / first - 1) for v in values), values[-1] / first - 1


def verdict(rows: list[dict], warmup_minutes: float, tolerance: float = TOLERANCE) -> dict:
    """Each process's RSS and the checkpoint size over the rows after the
    warm-up, beside the first of them: flat when no row is more than
    ``tolerance`` away. The load producer is shown, not judged."""
    after = [r for r in rows if r["minute"] - r["seconds"] / 60 >= warmup_minutes - 1e-9]
    if len(after) < 2:
        return {"rows_after_warmup": len(after), "flat": None,
                "why": "fewer than two rows after the warm-up: nothing to compare"}
    series = {name: [r["rss_mib"][name] for r in after if name in r["rss_mib"]]
              for name in sorted({n for r in after for n in r["rss_mib"]})}
    sizes = [r["checkpoint"]["size_bytes"] for r in after if r["checkpoint"].get("size_bytes")]
    if len(sizes) >= 2:
        series["checkpoint size"] = sizes
    judged = {}
    for name, values in series.items():
        worst, growth = deviation(values)
        judged[name] = {"first": values[0], "last": values[-1], "max": max(values), "max_deviation": worst,
                        "growth": growth, "rows": len(values), "flat": worst <= tolerance,
                        "judged": name != LOAD}
    flat = all(j["flat"] for j in judged.values() if j["judged"])
    return {"rows_after_warmup": len(after), "tolerance": tolerance, "flat": flat, "series": judged,
            "checkpoint_size_judged": "checkpoint size" in judged, "steps": step_growth(after)}


def step_growth(rows: list[dict]) -> dict[str, dict]:
    """Each step's checkpointed state in the first and the last row that has
    it, largest growth first."""
    have = [r["checkpoint"].get("by_step") or {} for r in rows]
    have = [steps for steps in have if steps]
    if len(have) < 2:
        return {}
    grown = {name: {"first": have[0][name], "last": have[-1][name]} for name in have[-1] if name in have[0]}
    return dict(sorted(grown.items(), key=lambda kv: kv[1]["first"] - kv[1]["last"]))


SHORT = {"jobmanager": "JM", "worker pool": "pool", "broker": "kafka", "scinol run": "run", "job server": "jobsrv",
         LOAD: "load"}


def short_name(name: str) -> str:
    if name.startswith("taskmanager ("):
        return name[len("taskmanager ("):-1].upper()
    if name.startswith("python worker ("):
        return "py-" + name[len("python worker ("):-1]
    return SHORT.get(name, name)


def row_line(r: dict) -> str:
    c = r["checkpoint"]
    done = "none completed"
    if c.get("id") is not None:
        done = f"#{c['id']} {c['size_bytes'] / 1024:,.0f} KiB, {c['duration_ms']:,} ms"
    rss = " ".join(f"{short_name(n)} {v:,.0f}" for n, v in r["rss_mib"].items())
    return (f"{r['minute']:5.1f} | {r['offered_per_s']:7,.0f} | {r['predicted_per_s']:7,.0f} | {r['p50_ms']:6.0f} | "
            f"{r['p99_ms']:6.0f} | {r['lag']:6,} | {done} ({c['failed']} failed) | {r['load_average']:4.1f} | {rss}")


ROW_HEAD = "  min | offer/s |  pred/s | p50 ms | p99 ms |    lag | last completed Flink checkpoint | load | RSS MiB"


def verdict_lines(v: dict) -> list[str]:
    if v["flat"] is None:
        return [f"verdict: {v['why']}"]
    out = [f"after the warm-up ({v['rows_after_warmup']} rows), against its first row "
           f"(flat: every row within {v['tolerance']:.0%}):"]
    for name, j in v["series"].items():
        unit = "KiB" if name == "checkpoint size" else "MiB"
        scale = 1024 if name == "checkpoint size" else 1
        out.append(f"  {name}: {j['first'] / scale:,.0f} -> {j['last'] / scale:,.0f} {unit} "
                   f"(max {j['max'] / scale:,.0f}), max deviation {j['max_deviation']:.1%}, growth {j['growth']:+.1%}: "
                   f"{'flat' if j['flat'] else 'NOT flat'}{'' if j['judged'] else ' (not judged: the load)'}")
    if not v["checkpoint_size_judged"]:
        out.append("  checkpoint size: fewer than two completed checkpoints after the warm-up: not judged")
    for name, g in list(v.get("steps", {}).items())[:3]:
        out.append(f"    checkpointed state of {name[:70]}: {g['first'] / 1024:,.0f} -> {g['last'] / 1024:,.0f} KiB")
    out.append(f"verdict: memory and checkpoint size {'FLAT' if v['flat'] else 'NOT FLAT'} within "
               f"{v['tolerance']:.0%} after the warm-up")
    return out


# -- the run ---------------------------------------------------------------------------

def add_arguments(ap) -> None:
    ap.add_argument("--minutes", type=float, default=30.0, help="minutes of offered load (default 30)")
    ap.add_argument("--rate", type=float, default=1000.0, help="events/s offered (default 1000)")
    ap.add_argument("--partitions", type=int, default=4,
                    help="partitions of the events topic, a model each (default 4)")
    ap.add_argument("--taskmanagers", type=int, default=2, help="TaskManagers, and the job's parallelism (default 2)")
    ap.add_argument("--checkpointing-interval", type=int, default=10_000, metavar="MS",
                    help="milliseconds between Flink checkpoints (default 10000, scinol run's default)")
    ap.add_argument("--warmup-minutes", type=float, default=5.0,
                    help="rows before this minute are shown, not judged (default 5)")
    ap.add_argument("--row-seconds", type=float, default=60.0, help="seconds per printed row (default 60)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the rows and the verdict here")


def check(args) -> str | None:
    """Why these settings cannot run (one line), or None."""
    if min(args.minutes, args.rate, args.row_seconds) <= 0 or args.warmup_minutes < 0:
        return "--minutes, --rate and --row-seconds must be above 0, --warmup-minutes at least 0"
    if min(args.partitions, args.taskmanagers, args.checkpointing_interval) < 1:
        return "--partitions, --taskmanagers and --checkpointing-interval must be at least 1"
    if args.row_seconds < 2 * SAMPLE_SECONDS:
        return f"--row-seconds must be at least {2 * SAMPLE_SECONDS:g} (RSS is sampled every {SAMPLE_SECONDS:g} s)"
    if args.minutes * 60 < args.row_seconds:
        return f"--minutes {args.minutes:g} is shorter than one row of --row-seconds {args.row_seconds:g}"
    return None


def _run_command(args, bootstrap: str, topic: str, cluster, work: Path) -> list[str]:
    models = ",".join(f"m{p}" for p in range(args.partitions))
    return [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
            "--predictions-topic", f"{topic}.pred", "--runner", "flink", "--flink-master", cluster.master,
            "--worker-pool", cluster.worker_pool, "--parallelism", str(args.taskmanagers), "--models", models,
            "--checkpointing-interval", str(args.checkpointing_interval),
            "--checkpoint-dir", str(work / "scinol-checkpoints"), "--checkpoint-seconds", "60"]


def _log_tail(path: Path) -> str:
    """The last line of ``scinol run``'s output (its one-line error, when it failed)."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:400] if lines else "no output"


def _wait_for_warm_up(run, load, predicted: Predicted, warm: int, cluster, log: Path) -> str:
    """Until the ``warm`` warm-up events are predicted; the running job's id."""
    deadline = time.monotonic() + START_TIMEOUT
    while predicted.count < warm:
        if run.poll() is not None:
            raise RuntimeError(f"scinol run exited with status {run.returncode}: {_log_tail(log)}")
        if load.exitcode is not None:
            raise RuntimeError(f"the load producer exited with status {load.exitcode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{predicted.count} of {warm} warm-up events predicted in {START_TIMEOUT:.0f} s: "
                               f"{_log_tail(log)}")
        predicted.poll(1.0)
    running = [j["jid"] for j in cluster.jobs() if j["state"] == "RUNNING"]
    if len(running) != 1:
        raise RuntimeError(f"expected one running Flink job, found {cluster.jobs()}")
    return running[0]


def _stop_run(run, cluster) -> None:
    """SIGTERM: ``scinol run`` cancels its job through Flink's REST API and stops its job server."""
    if run.poll() is None:
        run.send_signal(signal.SIGTERM)
        try:
            run.wait(120)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
    cluster.cancel_live_jobs()


def _stop_load(load) -> None:
    if load.is_alive():
        load.terminate()
        load.join(30)
    if load.is_alive():
        load.kill()
        load.join()


class Soak:
    """The parts and the measurement; :meth:`measure` gives the rows."""

    def __init__(self, args, stack: ExitStack):
        import multiprocessing
        import shutil
        import tempfile

        from pipelines.kafka.admin import KafkaAdmin, TopicSpec
        from pipelines.kafka.apache_broker import ApacheKafkaBroker
        from pipelines.runners.flink_cluster import FlinkSessionCluster

        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="scinol-soak-"))
        stack.callback(shutil.rmtree, self.work, ignore_errors=True)
        say(f"starting Apache Kafka and a Flink session cluster ({args.taskmanagers} TaskManagers, worker pool)")
        self.broker = ApacheKafkaBroker()
        stack.callback(self.broker.stop)
        self.broker.start()
        self.cluster = FlinkSessionCluster(taskmanagers=args.taskmanagers, worker_pool=True)
        stack.callback(self.cluster.stop)
        self.cluster.start()
        self.topic = f"soak-{time.time_ns()}"
        self.admin = KafkaAdmin(self.broker.bootstrap)
        self.admin.ensure_topics([TopicSpec(self.topic, args.partitions), TopicSpec(f"{self.topic}.pred", 1)])
        ctx = multiprocessing.get_context("spawn")
        self.go = ctx.Event()
        self.load = ctx.Process(target=load_producer, daemon=True,
                                args=(self.broker.bootstrap, self.topic, args.rate, args.partitions, self.go))
        self.load.start()
        stack.callback(_stop_load, self.load)
        self.log = self.work / "scinol-run.log"
        self.command = _run_command(args, self.broker.bootstrap, self.topic, self.cluster, self.work)
        with open(self.log, "w") as log:
            self.run = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        stack.callback(_stop_run, self.run, self.cluster)
        self.predicted = Predicted(self.broker.bootstrap, f"{self.topic}.pred")
        stack.callback(self.predicted.close)
        self.processes = Processes(self.cluster, self.broker.process.pid, self.run.pid, self.load.pid)

    def measure(self, on_row) -> list[dict]:
        from pipelines.bench.load import WARM

        args, rows = self.args, []
        say(f"submitting the job: scinol {' '.join(self.command[3:])}")
        warm = WARM - WARM % args.partitions  # as the load producer sends them
        job = _wait_for_warm_up(self.run, self.load, self.predicted, warm, self.cluster, self.log)
        say(f"job {job} predicted the {self.predicted.count:,} warm-up events; offering {args.rate:,.0f} events/s "
            f"for {args.minutes:g} min")
        self.predicted.take_latencies()
        events_before = sum(self.admin.end_offsets(self.topic).values())
        predicted_before = self.predicted.count
        self.go.set()
        began = last = time.monotonic()
        n_rows = max(1, round(args.minutes * 60 / args.row_seconds))
        for k in range(1, n_rows + 1):
            samples = self._until(began + k * args.row_seconds)
            ends = self.admin.end_offsets(self.topic)
            self.predicted.drain(self.admin.end_offsets(f"{self.topic}.pred"))
            checkpoint = checkpoint_figures(self.cluster.rest(f"/jobs/{job}/checkpoints"))
            checkpoint["by_step"] = checkpoint_steps(self.cluster, job, checkpoint["id"])
            heap = heap_used_mib(self.cluster)
            now, offered = time.monotonic(), sum(ends.values())
            seconds, last = now - last, now
            rows.append(make_row(now - began, seconds, self.predicted.take_latencies(),
                                 self.predicted.count - predicted_before, offered - events_before,
                                 lag(ends, self.predicted.next_offset), mean_rss(samples), checkpoint,
                                 os.getloadavg()[0]))
            rows[-1]["taskmanager_heap_used_mib"] = heap
            events_before, predicted_before = offered, self.predicted.count
            on_row(rows[-1])
        return rows

    def _until(self, deadline: float) -> list[dict[str, float]]:
        """Read predictions until ``deadline``, sampling RSS; the samples."""
        samples, next_sample = [], time.monotonic()
        while (now := time.monotonic()) < deadline:
            if self.run.poll() is not None:
                raise RuntimeError(f"scinol run exited with status {self.run.returncode}: {_log_tail(self.log)}")
            if now >= next_sample:
                samples.append(rss_mib(self.processes.groups()))
                next_sample = now + SAMPLE_SECONDS
            self.predicted.poll(min(0.5, max(0.01, deadline - now)))
        return samples


def say(text: str) -> None:
    print(f"soak: {text}", file=sys.stderr, flush=True)


def _interrupt(*_):
    raise KeyboardInterrupt


def run_soak(args) -> int:
    """The whole benchmark: a row per ``--row-seconds``, then the verdict
    over the rows made (also after Ctrl-C or a failure: 130 or 1; 0 once done)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up as Ctrl-C does
    started, rows, status, failure = time.strftime("%Y-%m-%d %H:%M:%S"), [], 0, None

    def on_row(r):
        if not rows:
            print(ROW_HEAD, flush=True)
        rows.append(r)
        print(row_line(r), flush=True)

    try:
        with ExitStack() as stack:
            try:
                Soak(args, stack).measure(on_row)
            finally:
                say("stopping the load, the run, the cluster and the broker")
    except KeyboardInterrupt:
        status, failure = 130, "interrupted"
    except RuntimeError as exc:
        status, failure = 1, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failure:
        say(f"{failure} after {len(rows)} rows")
    v = verdict(rows, args.warmup_minutes)
    print("\n".join(verdict_lines(v)), flush=True)
    if args.json:
        settings = {k: getattr(args, k) for k in ("minutes", "rate", "partitions", "taskmanagers",
                                                  "checkpointing_interval", "warmup_minutes", "row_seconds")}
        Path(args.json).write_text(json.dumps({"started": started, "cores": os.cpu_count(), "settings": settings,
                                               "failed": failure, "rows": rows, "verdict": v}, indent=1))
    return status


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m pipelines.bench.soak", description=__doc__.splitlines()[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    why = check(args)
    if why is not None:
        ap.error(why)
    sys.exit(run_soak(args))


if __name__ == "__main__":
    main()

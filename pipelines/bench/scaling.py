"""``scinol bench scaling``: does a second Flink worker make the job faster,
when each worker has the same CPU?

A session cluster of P TaskManagers with a Beam worker pool; each
TaskManager JVM and the Python worker that serves it share one control
group with a CPU quota (``--cores-per-worker``, 0.6 of a core by default),
so P = 2 gets twice the CPU of P = 1 however many cores the machine has
(:mod:`pipelines.bench.cpu_groups`). The JobManager, the worker pool, the
broker and ``scinol run`` (with Beam's job server) are accounted, not
confined. The runs, each ``scinol run`` as a user types it (unbounded,
stopped once every event is predicted):

- ``exact``: 4 models over 4 partitions (toy events), ``--parallelism P
  --models m0,m1,m2,m3``, P = 1 and 2;
- ``wide``: one model over sparse events (``--nnz`` non-zeros of 2^20
  hashed coordinates), exact mode at P = 1 and sharded mode with K = P = 2
  at ``--staleness`` (at least the batch).

Per run: steady events/s (predictions / first to last prediction's Kafka
timestamp), CPU seconds per 1,000 events over that same window (every
process of the job: TaskManagers, their workers, the JobManager; sampled
every 0.25 s), each TaskManager's share of the busy CPU, the records per
subtask of each step (Flink's REST API), and the machine's cores. Printed as
a table and written as JSON (``--json``). Run (as root, for the control
groups)::

    scinol bench scaling [--events 100000] [--wide-events 5000] [--json scaling.json]
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.bench.cpu_groups import CpuGroup, available, remove_stale

MODELS = 4
SAMPLE_SECONDS = 0.25
STALL_SECONDS = 180.0
"""A run whose predictions stop growing this long is reported and stopped."""
HARNESS = "pipelines.runners.harness"


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def listening_ports(pids: list[int]) -> set[int]:
    """TCP ports that sockets of these processes listen on."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def control_port(pid: int) -> int | None:
    """The control port a Beam SDK harness process was started for (``--control_endpoint``)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    if HARNESS not in cmdline:
        return None
    found = re.search(r"--control_endpoint=\S*:(\d+)", cmdline)
    return int(found.group(1)) if found else None


class Confined:
    """A session cluster whose TaskManagers (and, once they start, their
    Python workers) each sit in a CPU group of ``cores``."""

    def __init__(self, taskmanagers: int, cores: float, tag: str):
        from pipelines.runners.flink_cluster import FlinkSessionCluster

        self.cluster = FlinkSessionCluster(taskmanagers=taskmanagers, worker_pool=True)
        self.cores, self.tag = cores, tag
        self.groups: dict[str, CpuGroup] = {}
        self.placed: set[int] = set()

    def __enter__(self) -> "Confined":
        remove_stale("scinol")
        self.cluster.start()
        try:
            for i, (resource, proc) in enumerate(sorted(self.cluster.taskmanagers.items())):
                group = self.groups[resource] = CpuGroup(f"scinol-{self.tag}-tm{i}", self.cores)
                for pid in descendants(proc.pid):
                    group.add(pid)
            self.groups["jobmanager"] = CpuGroup(f"scinol-{self.tag}-jm")
            for pid in descendants(self.cluster.jobmanager.pid):
                self.groups["jobmanager"].add(pid)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cluster.stop()
        for group in self.groups.values():
            group.remove()

    def place_workers(self) -> None:
        """Move each Python worker the pool started into its TaskManager's group."""
        for pid in descendants(self.cluster.pool.pid):
            port = control_port(pid) if pid not in self.placed else None
            if port is None:
                continue
            for resource, proc in self.cluster.taskmanagers.items():
                if port in listening_ports(descendants(proc.pid)):
                    self.groups[resource].add(pid)
                    self.placed.add(pid)

    def usage(self) -> dict[str, float]:
        return {name: group.cpu_seconds() for name, group in self.groups.items()}


def at(samples: list[tuple[float, dict]], t: float) -> dict[str, float]:
    """Each group's CPU seconds at time ``t``, between the samples around it."""
    for (t0, u0), (t1, u1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            w = (t - t0) / max(t1 - t0, 1e-9)
            return {k: u0[k] + w * (u1[k] - u0[k]) for k in u0}
    return samples[0][1] if t < samples[0][0] else samples[-1][1]


class Counted:
    """Messages read so far from every partition of a topic (counted by
    reading them: the embedded broker's high watermarks are not counts)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer

        self.topic, self.count, self.assigned = topic, 0, False
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.time_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})

    def __call__(self) -> int:
        from confluent_kafka import TopicPartition

        if not self.assigned:
            meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if meta is None or meta.error is not None:
                return 0
            self.consumer.assign([TopicPartition(self.topic, p, 0) for p in meta.partitions])
            self.assigned = True
        while batch := self.consumer.consume(10000, timeout=0.2):
            self.count += sum(1 for m in batch if m.error() is None)
        return self.count

    def close(self) -> None:
        self.consumer.close()


def confined_run(name: str, parallelism: int, cores: float, bootstrap: str, topic: str, n: int, *flags: str) -> dict:
    """One unbounded ``scinol run`` on a confined cluster of ``parallelism``
    TaskManagers, stopped (SIGTERM) once all ``n`` events are predicted and
    Flink's figures are read: a live job's records per subtask, as an
    operator reads them, not a finished job's."""
    # Imported here: `scinol` builds this benchmark's parser for every command, and these take 20 ms.
    from pipelines.bench.runner_speed import prediction_window
    from pipelines.runners.flink_rest import settled_records

    out = f"{topic}.{name}"
    with Confined(parallelism, cores, f"{os.getpid()}-{name}") as confined:
        cluster = confined.cluster
        cmd = [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
               "--predictions-topic", out, "--runner", "flink", "--flink-master", cluster.master,
               "--worker-pool", cluster.worker_pool, "--parallelism", str(parallelism), *flags]
        samples, began, last_count, predicted = [], time.perf_counter(), 0.0, Counted(bootstrap, out)
        moved = began
        with open(os.devnull, "w") as sink, subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, text=True,
                                                             stdin=subprocess.DEVNULL) as proc:
            while proc.poll() is None:
                confined.place_workers()
                samples.append((time.time(), confined.usage()))
                if time.perf_counter() - last_count > 2.0:
                    last_count, before = time.perf_counter(), predicted.count
                    if predicted() >= n:
                        break
                    moved = moved if predicted.count == before else time.perf_counter()
                    if time.perf_counter() - moved > STALL_SECONDS:
                        proc.kill()
                        raise RuntimeError(f"{name}: {predicted.count:,} of {n:,} events predicted, none for "
                                           f"{STALL_SECONDS:.0f} s")
                time.sleep(SAMPLE_SECONDS)
            predicted.close()
            if proc.poll() is not None:
                raise RuntimeError(f"{name}: scinol run exited {proc.returncode}: {proc.stderr.read()[-1500:]}")
            samples.append((time.time(), confined.usage()))
            wall = time.perf_counter() - began
            (job,) = [j["jid"] for j in cluster.jobs() if j["state"] == "RUNNING"]
            records = settled_records(cluster.master, job)
            failures = len(cluster.rest(f"/jobs/{job}/exceptions").get("exceptionHistory", {}).get("entries", []))
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
        workers = len(confined.placed)
    count, first, last = prediction_window(bootstrap, out)
    start, end = at(samples, first), at(samples, last)
    used = {k: end[k] - start[k] for k in end}
    tms = [used[k] for k in sorted(used) if k.startswith("scinol-tm")]
    busy = sum(tms)
    return {"run": name, "parallelism": parallelism, "cores_per_worker": cores, "predictions": count,
            "events_per_s": count / max(last - first, 1e-3), "wall_s": wall, "workers_confined": workers,
            "task_failures": failures, "cpu_s_per_1000": 1000 * sum(used.values()) / count, "tm_cpu_s": tms,
            "tm_share_of_mean": [t / (busy / len(tms)) for t in tms] if busy else [],
            "records_per_subtask": records}


def produce(bootstrap: str, events, partitions: int) -> str:
    from pipelines.records.topics import produce_events

    topic = f"scaling-{time.time_ns()}"
    produce_events(bootstrap, topic, list(events), partitions=partitions, progress=False)
    return topic


def measure(bootstrap: str, args) -> list[dict]:
    from pipelines.bench.pipeline_speed import sparse_events
    from pipelines.bench.runner_speed import make_events

    rows = []
    models = ",".join(f"m{i}" for i in range(MODELS))
    exact = produce(bootstrap, make_events(args.events), MODELS)
    for p in args.parallelism:
        rows.append(tried(f"exact-p{p}", p, args.cores_per_worker, bootstrap, exact, args.events, "--models", models))
        say(rows[-1])
    wide = produce(bootstrap, sparse_events(args.wide_events, nnz=args.nnz), MODELS)
    rows.append(tried("wide-exact-p1", 1, args.cores_per_worker, bootstrap, wide, args.wide_events,
                      "--max-batch", str(args.batch)))
    say(rows[-1])
    for p in [p for p in args.parallelism if p > 1]:
        rows.append(tried(f"wide-sharded-k{p}", p, args.cores_per_worker, bootstrap, wide, args.wide_events,
                          "--shards", str(p), "--max-staleness", str(args.staleness), "--max-batch", str(args.batch)))
        say(rows[-1])
    return rows


def tried(name: str, parallelism: int, *args) -> dict:
    """:func:`confined_run`'s row, or one that says why the run failed (a
    stall, an exit), so the runs before and after it are still reported."""
    try:
        return confined_run(name, parallelism, *args)
    except RuntimeError as exc:
        return {"run": name, "parallelism": parallelism, "failed": str(exc).splitlines()[0]}


def say(row: dict) -> None:
    if "failed" in row:
        print(f"  {row['run']}: failed: {row['failed']}", file=sys.stderr, flush=True)
        return
    print(f"  {row['run']}: {row['events_per_s']:,.0f} events/s steady, {row['cpu_s_per_1000']:.2f} CPU s per 1,000 "
          f"events, {row['predictions']:,} predictions, {row['task_failures']} task failures, "
          f"{row['workers_confined']} Python workers confined, {row['wall_s']:.0f} s wall", file=sys.stderr, flush=True)


def table(rows: list[dict]) -> list[str]:
    out = ["| run | TaskManagers | events/s (steady) | CPU s / 1,000 events | TaskManager CPU share of mean | "
           "records per subtask (keyed steps) | task failures |", "|---|---:|---:|---:|---|---|---:|"]
    for r in rows:
        if "failed" in r:
            out.append(f"| {r['run']} | {r['parallelism']} | failed: {r['failed']} | | | | |")
            continue
        keyed = {k.split("{")[-1].split(",")[0].strip("[]0123456789"): v for k, v in r["records_per_subtask"].items()
                 if any(s in k for s in ("Sequence", "LearnAndPredict", "Route", "Shards", "Combine"))}
        shares = ", ".join(f"{s:.2f}" for s in r["tm_share_of_mean"])
        out.append(f"| {r['run']} | {r['parallelism']} | {r['events_per_s']:,.0f} | {r['cpu_s_per_1000']:.2f} | "
                   f"{shares} | {'; '.join(f'{k} {v}' for k, v in keyed.items())} | {r['task_failures']} |")
    by = {r["run"]: r for r in rows if "failed" not in r}
    if "exact-p1" in by and "exact-p2" in by:
        one, two = by["exact-p1"], by["exact-p2"]
        out += ["", f"exact, 2 workers / 1: {two['events_per_s'] / one['events_per_s']:.2f}x events/s (target 1.6x), "
                    f"{two['cpu_s_per_1000'] / one['cpu_s_per_1000']:.2f}x CPU per event (target <= 1.2x)"]
    if "wide-exact-p1" in by and "wide-sharded-k2" in by:
        ratio = by["wide-sharded-k2"]["events_per_s"] / by["wide-exact-p1"]["events_per_s"]
        out.append(f"wide model, sharded K = 2 on 2 workers / exact on 1: {ratio:.2f}x (target 1.3x)")
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--events", type=int, default=100_000, help="toy events for the exact runs (4 models)")
    ap.add_argument("--wide-events", type=int, default=5_000, help="sparse events for the wide model's runs")
    ap.add_argument("--nnz", type=int, default=300, help="non-zeros per sparse event (of 2^20)")
    ap.add_argument("--batch", type=int, default=500, help="--max-batch of the wide model's runs")
    ap.add_argument("--staleness", type=int, default=1024, help="sharded mode's --max-staleness (>= --batch)")
    ap.add_argument("--parallelism", default="1,2", help="TaskManagers per run, comma-separated (default 1,2)")
    ap.add_argument("--cores-per-worker", type=float, default=0.6, help="CPU quota of each TaskManager and its "
                    "Python worker, in cores (default 0.6)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")


def check(args) -> str | None:
    """Why these settings cannot run here (one line), or None; parses ``args.parallelism``."""
    try:
        args.parallelism = [int(p) for p in str(args.parallelism).split(",")]
    except ValueError:
        return f"--parallelism takes numbers separated by commas, got {args.parallelism!r}"
    if min(args.parallelism) < 1 or min(args.events, args.wide_events, args.nnz, args.batch) < 1:
        return "--parallelism, --events, --wide-events, --nnz and --batch must be at least 1"
    if args.staleness < args.batch:
        return f"--staleness ({args.staleness}) must be at least --batch ({args.batch})"
    if max(args.parallelism) * args.cores_per_worker > (os.cpu_count() or 1):
        return (f"{max(args.parallelism)} workers x {args.cores_per_worker} cores is more than this machine's "
                f"{os.cpu_count()} cores")
    why = available()
    return None if why is None else f"needs CPU control groups: {why}"


def run_scaling(args) -> int:
    from pipelines.kafka.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        rows = measure(broker.bootstrap, args)
    cores = os.cpu_count()
    print(f"{cores} cores; each TaskManager and its Python worker in a CPU group of {args.cores_per_worker} cores "
          f"(cgroup quota); JobManager, worker pool, broker and scinol run unconfined")
    print("\n".join(table(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps({"cores": cores, "cores_per_worker": args.cores_per_worker,
                                               "runs": rows}, indent=1))
    return 0


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m pipelines.bench.scaling", description=__doc__.splitlines()[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    why = check(args)
    if why is not None:
        ap.error(why)
    sys.exit(run_scaling(args))


if __name__ == "__main__":
    main()

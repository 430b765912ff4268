"""``scinol bench soak``: an unbounded run on a Flink session cluster at a
fixed offered rate for ``--minutes``, with Flink checkpoints; does memory or
checkpoint size grow?

Started here, as ``scinol broker --kind kafka`` and ``scinol flink up`` start
them: one Apache Kafka broker and a session cluster (a JobManager, N
TaskManagers, Beam's worker pool: a Python worker per TaskManager). A load
process produces toy events round-robin over ``--partitions`` partitions, a
model per partition (``m0``, ``m1``, ...): first
:data:`pipelines.bench.load_latency.WARM` of them, and
once their predictions are out, ``--rate`` events/s until the end, each
stamped when encoded (at most :data:`pipelines.bench.soak_traffic.CHUNK_SECONDS`
before it is sent). The
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
``--warmup-minutes`` on, within :data:`pipelines.bench.soak_verdict.TOLERANCE`
of that row or not. The figures go to ``--json``. Everything started is
stopped at the end, on Ctrl-C and on SIGTERM (the JVMs also die with this
process)::

    scinol bench soak [--minutes 30] [--rate 1000] [--partitions 4] [--json soak.json]

This module is the driver: the options, the parts started and stopped, the
measurement's loop and the verdict's printing. The parts it measures with:
``soak_traffic`` (the load offered, the predictions read back),
``soak_processes`` (each process by role, its RSS), ``soak_flink`` (Flink's
checkpoints and heap), ``soak_verdict`` (the rows, the verdict, their lines).
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

from pipelines.bench.soak_flink import checkpoint_figures, checkpoint_steps, heap_used_mib
from pipelines.bench.soak_processes import Processes, mean_rss, rss_mib
from pipelines.bench.soak_traffic import Predicted, lag, load_producer
from pipelines.bench.soak_verdict import ROW_HEAD, make_row, row_line, verdict, verdict_lines

# pipelines.bench.load_latency (WARM) is imported where used: `scinol` builds this
# benchmark's parser for every command, and that module brings numpy and the learners.

SAMPLE_SECONDS = 5.0
START_TIMEOUT = 600.0
"""Seconds the job has to predict the warm-up events (a 156 MB jar upload on a busy machine)."""


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
        from pipelines.bench.load_latency import WARM

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

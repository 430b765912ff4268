"""Events/s of the exact pipeline on each runner, on the same events in the
same run, beside a raw confluent-kafka consume+produce loop of the same
bytes on the same broker (the ceiling for a Python Kafka-to-Kafka job):

- ``direct``: Beam's in-process runner (``scinol run``'s default);
- ``flink-embedded``: ``--runner flink``, an embedded Flink, LOOPBACK;
- ``session-1tm`` / ``session-2tm``: a Flink session cluster with 1 and 2
  TaskManagers and a Beam worker pool (``--worker-pool``: one Python
  process per TaskManager), ``--parallelism`` 1 and 2.

The topic has 4 partitions and 4 models, one per partition, so that two
TaskManagers have work to share (one model is learned in one place). Each
run is ``scinol run --bounded`` as a user types it. Figures: wall time of
the whole command, and the steady rate, events / (last - first prediction's
Kafka timestamp), which leaves out start-up (job submission, the jar
upload to a session cluster, compiling). Run:

    python -m pipelines.bench.runner_speed [--events 100000] [--broker kafka|tansu] [--runs direct,...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

RUNS = ("direct", "flink-embedded", "session-1tm", "session-2tm", "flink-embedded-batch", "session-2tm-batch")
"""A ``-batch`` run is the same in Flink's batch mode (``--execution-mode batch``)."""
MODELS = 4


def make_events(n: int) -> list[dict]:
    """``n`` toy events, model ``m<i>`` for the i-th of every 4, so round
    robin puts one model on each of 4 partitions."""
    from learners.datasets import toy_examples
    from pipelines.records.events import dense_events

    per = n // MODELS
    streams = []
    for m in range(MODELS):
        X, y = toy_examples(per, m)
        streams.append(list(dense_events(X, y, f"m{m}-", model=f"m{m}", start_ms=1_700_000_000_000)))
    return [s[i] for i in range(per) for s in streams]


def raw_loop(bootstrap: str, topic: str, n: int) -> float:
    """Consume every partition and produce each value to ``topic.raw``: events/s."""
    from confluent_kafka import Consumer, TopicPartition

    from pipelines.kafka.producer import KafkaWriter

    writer = KafkaWriter(bootstrap, topic + ".raw")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{time.time_ns()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(MODELS)])
    seen, start = 0, time.perf_counter()
    try:
        while seen < n:
            for m in c.consume(5000, timeout=0.5):
                if m.error() is None:
                    writer.produce(m.value(), key=m.key())
                    seen += 1
        writer.flush()
    finally:
        c.close()
        writer.close()
    return n / (time.perf_counter() - start)


def prediction_window(bootstrap: str, topic: str) -> tuple[int, float, float]:
    """(messages in ``topic``, first and last one's Kafka timestamp in s)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rate-{time.time_ns()}", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        pending, stamps = set(parts), []
        while pending:
            for m in c.consume(10000, timeout=1.0):
                if m.error() is None:
                    stamps.append(m.timestamp()[1])
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
    finally:
        c.close()
    if not stamps:
        return 0, 0.0, 0.0
    return len(stamps), min(stamps) / 1000.0, max(stamps) / 1000.0


def steady_rate(bootstrap: str, topic: str) -> tuple[int, float]:
    """(messages in ``topic``, messages / (last - first Kafka timestamp) s)."""
    n, first, last = prediction_window(bootstrap, topic)
    return n, n / max(last - first, 1e-3)


def scinol_run(bootstrap: str, topic: str, out: str, *flags: str) -> tuple[float, str]:
    """One bounded ``scinol run``: (wall seconds, its summary line)."""
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
           "--predictions-topic", out, "--bounded", *flags]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
    wall = time.perf_counter() - start
    done = [line for line in proc.stderr.splitlines() if "scinol run: done" in line]
    if proc.returncode != 0 or not done:
        raise RuntimeError(f"{' '.join(flags) or 'direct'}: exit {proc.returncode}: {proc.stderr[-1500:]}")
    return wall, done[-1]


def on_session(taskmanagers: int, bootstrap: str, topic: str, out: str, *flags: str) -> tuple[float, str]:
    from pipelines.runners.flink_cluster import FlinkSessionCluster

    with FlinkSessionCluster(taskmanagers=taskmanagers, worker_pool=True) as cluster:
        return scinol_run(bootstrap, topic, out, "--runner", "flink", "--flink-master", cluster.master,
                          "--worker-pool", cluster.worker_pool, "--parallelism", str(taskmanagers), *flags)


def measure(bootstrap: str, n: int, runs: list[str]) -> list[dict]:
    from pipelines.records.topics import produce_events

    topic = f"runner-speed-{time.time_ns()}"
    produce_events(bootstrap, topic, make_events(n), partitions=MODELS, progress=False)
    rows = [{"run": "raw consume+produce loop", "wall": None, "rate": raw_loop(bootstrap, topic, n), "n": n,
             "summary": "bytes in, bytes out; no decoding, no learning"}]
    for run in runs:
        out = f"{topic}.{run}"
        mode = ["--execution-mode", "batch"] if run.endswith("-batch") else []
        if run == "direct":
            wall, summary = scinol_run(bootstrap, topic, out)
        elif run.startswith("flink-embedded"):
            wall, summary = scinol_run(bootstrap, topic, out, "--runner", "flink", *mode)
        else:
            wall, summary = on_session(int(run[len("session-")]), bootstrap, topic, out, *mode)
        written, rate = steady_rate(bootstrap, out)
        rows.append({"run": run, "wall": wall, "rate": rate, "n": written, "summary": summary})
        print(f"  {run}: {rate:,.0f} events/s steady, {wall:.0f} s wall, {written:,} predictions", file=sys.stderr,
              flush=True)
    return rows


def table(rows: list[dict], broker: str) -> list[str]:
    ceiling = rows[0]["rate"]
    out = [f"| run ({broker}, 4 partitions, 4 models) | events/s (steady) | of the raw loop | wall s | predictions |",
           "|---|---:|---:|---:|---:|"]
    for r in rows:
        wall = "" if r["wall"] is None else f"{r['wall']:.0f}"
        out.append(f"| {r['run']} | {r['rate']:,.0f} | {r['rate'] / ceiling:.2f} | {wall} | {r['n']:,} |")
    by = {r["run"]: r["rate"] for r in rows}
    if "session-1tm" in by and "session-2tm" in by:
        out.append("")
        out.append(f"2 TaskManagers / 1 TaskManager: {by['session-2tm'] / by['session-1tm']:.2f}x "
                   "(target 1.4x)")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated subset of {','.join(RUNS)}")
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    unknown = sorted(set(runs) - set(RUNS))
    if unknown:
        ap.error(f"--runs: unknown {', '.join(unknown)}")
    if args.broker == "kafka":
        from pipelines.kafka.apache_broker import ApacheKafkaBroker as Broker
    else:
        from pipelines.kafka.broker import EmbeddedBroker as Broker
    with Broker() as broker:
        rows = measure(broker.bootstrap, args.events, runs)
    print("\n".join(table(rows, args.broker)))
    for r in rows[1:]:
        print(f"- {r['run']}: {r['summary']}")


if __name__ == "__main__":
    main()

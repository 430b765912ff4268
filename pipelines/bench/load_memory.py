"""The load benchmark's memory part (``python -m pipelines.bench.load
--memory``): ``scinol run`` unbounded, a process of its own, fed at a share
of the rate it reached on a bounded backfill; its RSS read from /proc."""

from __future__ import annotations

import subprocess
import time

import numpy as np

from pipelines.bench import report
from pipelines.bench.load_latency import WARM
from pipelines.bench.throughput import say, scinol_command


def max_rate(bootstrap: str, n: int) -> float:
    """Events/s of a bounded exact-mode backfill of ``n`` toy events, from
    its first prediction to its last (Beam's start-up not counted)."""
    from learners.datasets import toy_examples

    from pipelines.config import RunConfig
    from pipelines.launch import run
    from pipelines.records.events import dense_events
    from pipelines.records.topics import produce_events, read_records

    topic = f"bench.load.max.{time.time_ns()}"
    X, y = toy_examples(n, 5)
    produce_events(bootstrap, topic, dense_events(X, y, "max-"), progress=False)
    run(RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=True,
                  progress_seconds=None))
    made = np.array([p["event_timestamp"] + p["latency_ms"] for p in read_records(bootstrap, topic + ".pred", n)])
    return n / max((made.max() - made.min()) / 1000, 1e-9)


def endless_producer(bootstrap: str, topic: str, rate: float, started) -> None:
    """In a process of its own: ``WARM`` events, wait for their predictions,
    set ``started``, then toy events (100,000 rows over and over, new ids,
    stamped as each batch of ``ENDLESS_BATCH`` is encoded) at ``rate``
    events/s until terminated. Encoded a batch per compiled call: event by
    event, this process could not offer more than about 27,000 events/s."""
    import itertools

    from learners.datasets import toy_examples

    from pipelines.kafka.consumer import read_topic
    from pipelines.records.event_values import dense_values
    from pipelines.records.topics import produce_values

    X, y = toy_examples(100_000, 7)
    # the warm-up is encoded as the paced events are: the encoder compiles before ``started``
    produce_values(bootstrap, topic, lambda codec: dense_values(codec, X[:WARM], y[:WARM], "warm-"), progress=False)
    for _ in read_topic(bootstrap, topic + ".pred", limit=WARM, idle_timeout=None, timeout=300):
        pass
    started.set()

    def endless(codec):
        for k in itertools.count():
            for a in range(0, len(y), ENDLESS_BATCH):
                yield from dense_values(codec, X[a:a + ENDLESS_BATCH], y[a:a + ENDLESS_BATCH], f"m{k}-", first=a)

    produce_values(bootstrap, topic, endless, rate=rate, progress=False)


ENDLESS_BATCH = 5_000
"""Rows the memory run's producer encodes at a time (and stamps alike)."""


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _wait_for_warm_up(started, producer, pipeline, timeout: float) -> None:
    """Until ``started`` is set; fails at once when either process dies."""
    deadline = time.monotonic() + timeout
    while not started.wait(1.0):
        if producer.exitcode is not None:
            raise RuntimeError(f"the load producer exited with status {producer.exitcode} before the warm-up")
        if pipeline.poll() is not None:
            raise RuntimeError(f"scinol run exited with status {pipeline.returncode} before the warm-up")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pipeline did not answer the warm-up events within {timeout:.0f} s")


def memory_case(bootstrap: str, rate: float, minutes: float, every: float) -> dict:
    """``scinol run`` (unbounded, exact mode, a process of its own) fed at
    ``rate`` for ``minutes`` after a warm-up; its RSS every ``every`` s."""
    import multiprocessing
    import signal

    from pipelines.kafka.admin import KafkaAdmin, TopicSpec

    topic = f"bench.load.mem.{time.time_ns()}"
    # Both topics up front: the producer reads the predictions topic before
    # the pipeline has written (and so auto-created) it.
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1), TopicSpec(topic + ".pred", 1)])
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    pipeline = subprocess.Popen(scinol_command() + ["run", "--bootstrap", bootstrap, "--topic", topic,
                                                    "--predictions-topic", topic + ".pred"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    producer = ctx.Process(target=endless_producer, args=(bootstrap, topic, rate, started))
    producer.start()
    samples, lags = [], []
    admin, lag_every = KafkaAdmin(bootstrap), max(1, round(LAG_SECONDS / every))
    try:
        _wait_for_warm_up(started, producer, pipeline, 300)
        t0 = time.monotonic()
        while (t := time.monotonic() - t0) < minutes * 60:
            if pipeline.poll() is not None:
                raise RuntimeError(f"scinol run exited with status {pipeline.returncode}")
            samples.append((t, rss_kib(pipeline.pid) / 1024))
            if (len(samples) - 1) % lag_every == 0:
                lags.append(_lag(admin, topic))
                say(f"memory: {t:4.0f} s  RSS {samples[-1][1]:.0f} MiB  lag {lags[-1]:,} events")
            time.sleep(every)
    finally:
        producer.terminate()
        producer.join(10)
        pipeline.send_signal(signal.SIGINT)
        try:
            pipeline.wait(30)
        except subprocess.TimeoutExpired:
            pipeline.kill()
            pipeline.wait()
    from pipelines.bench.pipeline_speed import count_records

    made = count_records(bootstrap, topic + ".pred") - WARM
    t, mib = np.array(samples).T
    first, last = mib[t < 60].mean(), mib[t >= t[-1] - 60].mean()
    by_minute = [float(mib[(t >= m * 60) & (t < m * 60 + 60)].mean()) for m in range(int(np.ceil(t[-1] / 60)))]
    say(f"memory: RSS by minute (MiB) {[round(v) for v in by_minute]}")
    return {"rate": rate, "minutes": minutes, "made": made, "first": first, "last": last,
            "peak": mib.max(), "drift": (last - first) / first, "by_minute": by_minute,
            "max_lag": max(lags), "last_lag": lags[-1]}


LAG_SECONDS = 15.0
"""How often the memory run reads the two topics' end offsets: a pipeline
that falls behind holds a growing fetch queue, which RSS would show."""


def _lag(admin, topic: str) -> int:
    """Events in the input topic with no prediction yet (end offsets, one partition each). The
    predictions' offset is read first, so what arrives between the two reads counts as lag: an
    upper bound, never below 0."""
    made = admin.end_offsets(topic + ".pred")[0]
    return admin.end_offsets(topic)[0] - made


def memory_table(r: dict, top: float) -> str:
    return report.table(["measured maximum events/s", "offered events/s", "minutes", "predictions made", "events/s made",
                         "RSS first minute (MiB)", "RSS last minute (MiB)", "drift (target ±10 %)", "peak MiB",
                         "mean RSS by minute (MiB)", f"lag, events: most (every {LAG_SECONDS:g} s) / last"],
                        [[f"{top:,.0f}", f"{r['rate']:,.0f}", f"{r['minutes']:g}", f"{r['made']:,}",
                          f"{r['made'] / (r['minutes'] * 60):,.0f}",
                          f"{r['first']:.0f}", f"{r['last']:.0f}", f"**{r['drift']:+.1%}**", f"{r['peak']:.0f}",
                          " ".join(f"{v:.0f}" for v in r["by_minute"]), f"{r['max_lag']:,} / {r['last_lag']:,}"]])


MEMORY_NOTE = ("`scinol run` unbounded, exact mode, as a process of its own on the embedded broker; its maximum "
               "rate is a bounded backfill of {n:,} toy events in the same run (first to last prediction). A "
               "producer in a third process sends {warm:,} warm-up events, waits for their predictions, then "
               "the toy data (100,000 rows over and over, new ids, encoded {batch:,} at a time) at {load:.0%} of "
               "that rate. RSS from "
               "/proc/PID/status every {every:g} s; the means of the first and of the last minute of the "
               "paced phase. The producer and the broker share the machine's cores with the pipeline, so the "
               "rate it kept up with is the predictions made over the minutes. Lag = the input topic's end "
               "offset minus the predictions topic's: a pipeline falling behind shows a growing lag (and a "
               "fuller fetch queue in its RSS).")

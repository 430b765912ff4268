"""Load figures with no other benchmark: what ``scinol produce`` costs beside
a raw producer, exact-mode latency at a fixed offered load, and the
pipeline's resident memory over a long unbounded run.

``python -m pipelines.bench.load --produce --latency --memory`` (any of the
three; none given: all) prints one table per part, each figure beside a
baseline measured in the same run:

- ``--produce``: ``scinol produce FILE`` (the command, a new process, as a
  user runs it) vs a raw confluent-kafka loop producing the same encoded
  bytes (encoded beforehand, untimed) to the same broker: events/s and the
  ratio; the toy data as CSV (21 dense features) and as VW text, a sparse set as libsvm
  (50 non-zeros of 2^20). With ``--kafka`` also on Apache Kafka.
- ``--latency``: an unbounded exact-mode run fed by a producer paced at
  ``--rate`` events/s for ``--seconds``; latency = the prediction's
  ``latency_ms`` (when it was made − the event's timestamp, stamped at
  produce time), as :mod:`benchmarks.bench_sharded` measures it.
- ``--memory``: an unbounded exact-mode run (a process of its own) fed at
  ``--load`` of the rate it reached on a bounded backfill in the same run,
  for ``--minutes``; its RSS read from /proc every ``--sample`` seconds;
  first vs last minute.

``--write`` puts the tables in docs/benchmarks.md between the ``load``
markers (:func:`pipelines.bench.report.update_section`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from pipelines.bench import report
from pipelines.bench.throughput import say, scinol_command, write_learn_files


# -- (a) scinol produce vs a raw producer ----------------------------------------

def data_files(folder: str, rows: int) -> dict[str, tuple[str, list[str]]]:
    """label -> (path, extra ``scinol produce`` arguments): the toy data as
    CSV and as VW text, the sparse set as libsvm, ``rows`` rows each."""
    from learners.datasets import toy_examples

    from pipelines.bench.kernel_speed import sparse_examples

    dense = write_learn_files(folder, "dense", *toy_examples(rows, 0))
    sparse = write_learn_files(folder, "sparse", *sparse_examples(rows))
    return {"toy CSV (21 dense)": (dense["csv"], ["--label", "y"]),
            "toy VW text (21 named)": (dense["vw"], []),
            "sparse libsvm (50 of 2^20)": (sparse["libsvm"], [])}


def encoded_values(path: str, extra: list[str]) -> list[bytes]:
    """The Avro values ``scinol produce`` writes for ``path`` (made the same
    way, before the clock starts)."""
    from pipelines.records.datafiles import open_reader
    from pipelines.records.events import file_events
    from schemas.codec import Codec

    label = extra[extra.index("--label") + 1] if "--label" in extra else None
    codec = Codec()
    return [codec.encode("scinol.Event", e) for e in file_events(open_reader(path, None, label=label))]


def raw_produce(bootstrap: str, topic: str, values: list[bytes], config: dict | None = None) -> float:
    """Events/s of a bare confluent-kafka loop: produce, poll every 1,000,
    flush; the same producer settings as ``scinol produce`` (idempotence,
    linger.ms 20)."""
    from confluent_kafka import Producer

    from pipelines.kafka.admin import KafkaAdmin, TopicSpec

    KafkaAdmin(bootstrap, config).ensure_topics([TopicSpec(topic, 1)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                         **(config or {})})
    t0 = time.perf_counter()
    for k, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if k % 1000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    seconds = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"raw producer: {left} messages not delivered")
    return len(values) / seconds


def cli_produce(bootstrap: str, topic: str, path: str, extra: list[str]) -> tuple[float, float]:
    """(events/s ``scinol produce`` reports, seconds of the whole process
    including interpreter start-up and imports)."""
    cmd = scinol_command() + ["produce", path, "--bootstrap", bootstrap, "--topic", topic, "--quiet", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    found = re.search(r"produced ([\d,]+) events to \S+ \(([\d,]+) events/s\)", done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return float(found.group(2).replace(",", "")), wall


def produce_cases(brokers: dict[str, str], rows: int, repeats: int) -> list[dict]:
    """Per broker and data file: best of ``repeats`` of the raw loop, of
    ``scinol produce`` on the file and of it on the file's first 10 rows
    (its start-up: interpreter, imports, the compiled kernels' loading, the
    first connection), taking turns so a busy machine slows all alike."""
    out = []
    with tempfile.TemporaryDirectory(prefix="bench_load_") as folder:
        for data, (path, extra) in data_files(folder, rows).items():
            values = encoded_values(path, extra)
            head = os.path.join(folder, "head-" + os.path.basename(path))
            with open(path) as src, open(head, "w") as dst:
                dst.writelines(line for _, line in zip(range(11 if path.endswith(".csv") else 10), src))
            for kind, bootstrap in brokers.items():
                say(f"produce: {data}, {rows:,} rows, {kind}, best of {repeats}")
                raw = cli = 0.0
                wall = start = float("inf")
                for k in range(repeats):
                    tag = f"bench.load.{time.time_ns()}"
                    raw = max(raw, raw_produce(bootstrap, tag + ".raw", values))
                    got, seconds = cli_produce(bootstrap, tag + ".cli", path, extra)
                    cli, wall = max(cli, got), min(wall, seconds)
                    start = min(start, cli_produce(bootstrap, tag + ".head", head, extra)[1])
                # start-up varies by a second on a shared machine: no rate from a difference smaller than that
                after = rows / (wall - start) if wall - start > max(1.0, wall / 4) else float("nan")
                out.append({"broker": kind, "data": data, "rows": rows, "raw": raw, "cli": cli, "wall": wall,
                            "startup": start, "after": after})
    return out


def produce_table(rows: list[dict]) -> str:
    return report.table(
        ["broker", "data", "events", "raw loop events/s", "scinol produce events/s (printed)",
         "ratio (target ≥ 0.70)", "whole process s", "of which start-up s", "events/s after start-up",
         "ratio after start-up"],
        [[r["broker"], r["data"], f"{r['rows']:,}", f"{r['raw']:,.0f}", f"{r['cli']:,.0f}",
          f"**{r['cli'] / r['raw']:.2f}x**", f"{r['wall']:.2f}", f"{r['startup']:.2f}",
          *((f"{r['after']:,.0f}", f"{r['after'] / r['raw']:.2f}x") if r["after"] == r["after"] else ("—", "—"))]
         for r in rows])


PRODUCE_NOTE = ("`scinol produce FILE --quiet` as a new process; printed = the rate it prints (from before its "
                "first event is read to the last acknowledgement, so it includes loading the compiled kernels, "
                "about 0.5 s for numba's first call in a process); whole process = its wall time; start-up = the "
                "wall time of the same command on the file's first 10 rows; after start-up = events / (whole − "
                "start-up), shown only where that difference is over a second and a quarter of the whole. Raw loop: confluent-kafka `Producer.produce` of the same Avro values, encoded "
                "beforehand, same settings (idempotence, linger.ms 20), poll every 1,000, flush at the end. "
                "Best of the repeats, run in turn.")


# -- (b) latency at a fixed offered load -------------------------------------------

WARM = 2000
"""Events the latency producer sends first, then waits for their
predictions: Beam's start-up and the kernels' compilation are not in the
latency figures."""


def paced_producer(bootstrap: str, topic: str, rate: float, n: int, seed: int = 3) -> None:
    """In a process of its own (the pipeline's Python is not slowed by it):
    ``WARM`` toy events, wait for their predictions, then ``n`` toy events
    paced at ``rate`` events/s, each stamped with the wall clock as it is
    encoded (as :func:`benchmarks.bench_sharded.latency` does). One producer
    for both, so its start (connection, idempotent producer id) is not in
    the paced events' latency."""
    from learners.datasets import toy_examples

    from pipelines.kafka.consumer import read_topic
    from pipelines.kafka.producer import KafkaWriter, produce_stream
    from pipelines.records.events import dense_events
    from schemas.codec import Codec

    codec, writer = Codec(), KafkaWriter(bootstrap, topic, {"linger.ms": 20})  # as produce_events sets it
    try:
        X, y = toy_examples(WARM, seed + 1)
        produce_stream(writer, (codec.encode("scinol.Event", e) for e in dense_events(X, y, "warm-")))
        for _ in read_topic(bootstrap, topic + ".pred", limit=WARM, idle_timeout=None, timeout=300):
            pass
        X, y = toy_examples(n, seed)
        stamped = (codec.encode("scinol.Event", {**e, "timestamp": int(time.time() * 1000)})
                   for e in dense_events(X, y, "lat-", start_ms=0))
        produce_stream(writer, stamped, rate=rate)
    finally:
        writer.close()


def latency_case(bootstrap: str, rate: float, seconds: float, max_batch: int = 2000) -> dict:
    """An unbounded exact-mode run (in this process, as ``scinol run`` runs
    it) fed by :func:`paced_producer`: p50/p99/max of the paced events'
    latency_ms, and the events/s they arrived at."""
    import multiprocessing

    from pipelines.config import RunConfig
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec
    from pipelines.launch import run
    from pipelines.records.topics import read_records

    n = int(rate * seconds)
    topic = f"bench.load.lat.{time.time_ns()}"
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1)])
    cfg = RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=False,
                    stop_after=WARM + n, progress_seconds=None, max_batch=max_batch)
    producer = multiprocessing.get_context("spawn").Process(target=paced_producer, args=(bootstrap, topic, rate, n))
    producer.start()
    try:
        run(cfg)
    finally:
        producer.join(60)
        if producer.is_alive():
            producer.terminate()
    preds = [p for p in read_records(bootstrap, cfg.predictions_topic, WARM + n) if p["event_id"].startswith("lat-")]
    if len(preds) != n:
        raise RuntimeError(f"{len(preds)} predictions for {n} paced events")
    lat = np.array([p["latency_ms"] for p in preds])
    ts = np.array([p["event_timestamp"] for p in preds])
    slow = (ts[lat > 50] - ts.min()) / 1000
    say(f"latency: {slow.size} events over 50 ms, arriving at (s) {np.unique(np.round(slow, 1)).tolist()[:30]}")
    later = lat[ts >= ts.min() + 2000]  # the resume after the idle warm-up wait left out
    return {"rate": rate, "events": n, "offered": n / max((ts.max() - ts.min()) / 1000, 1e-9),
            "max_batch": max_batch, "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "max": float(lat.max()), "over": float(np.mean(lat > 50)),
            "p99_later": float(np.percentile(later, 99)) if later.size else float("nan")}


def latency_table(rows: list[dict]) -> str:
    return report.table(["offered events/s", "arrived events/s", "events", "max_batch", "p50 ms",
                         "p99 ms (target < 50)", "max ms", "share > 50 ms", "p99 ms after the first 2 s"],
                        [[f"{r['rate']:,.0f}", f"{r['offered']:,.0f}", f"{r['events']:,}", f"{r['max_batch']:,}",
                          f"{r['p50']:.1f}", f"**{r['p99']:.1f}**", f"{r['max']:.1f}", f"{r['over']:.1%}",
                          f"{r['p99_later']:.1f}"] for r in rows])


LATENCY_NOTE = ("Exact mode, unbounded, in one process on the embedded broker (Beam FnApiRunner, ScInOL2, one "
                "partition), fed by a producer in another process: {warm:,} warm-up events first (start-up and "
                "compilation not counted), then the toy data paced at the offered rate, each event stamped with "
                "the wall clock when encoded. Latency = the prediction's `latency_ms` (when it was made − the "
                "event's timestamp), so it includes the producer's linger (20 ms) and the broker's round trip; "
                "the prediction's own trip back through the broker is not in it.")



# -- (c) resident memory over a long run -----------------------------------------

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
    from pipelines.records.columnar import dense_values
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


# -- the command -----------------------------------------------------------------

def _brokers(stack, with_kafka: bool) -> dict[str, str]:
    from pipelines.kafka.broker import EmbeddedBroker

    brokers = {"tansu (embedded)": stack.enter_context(EmbeddedBroker()).bootstrap}
    if with_kafka:
        from pipelines.kafka.apache_broker import ApacheKafkaBroker

        brokers["Apache Kafka"] = stack.enter_context(ApacheKafkaBroker()).bootstrap
    return brokers


def _parser():
    import argparse

    ap = argparse.ArgumentParser(prog="python -m pipelines.bench.load", description=main.__doc__)
    ap.add_argument("--produce", action="store_true", help="scinol produce vs a raw producer")
    ap.add_argument("--latency", action="store_true", help="latency at --rate events/s")
    ap.add_argument("--memory", action="store_true", help="RSS over --minutes at --load of the maximum rate")
    ap.add_argument("--kafka", action="store_true", help="--produce also on Apache Kafka")
    ap.add_argument("--rows", type=int, default=200_000, help="--produce: rows per data file")
    ap.add_argument("--repeats", type=int, default=3, help="--produce: best of this many")
    ap.add_argument("--rate", type=float, default=5000, help="--latency: offered events/s")
    ap.add_argument("--seconds", type=float, default=20, help="--latency: seconds of paced events")
    ap.add_argument("--max-batch", type=int, action="append", help="--latency: the run's max_batch (repeatable; "
                    "default the run's default, 2000)")
    ap.add_argument("--minutes", type=float, default=10, help="--memory: minutes of the paced run")
    ap.add_argument("--load", type=float, default=0.8, help="--memory: share of the measured maximum rate")
    ap.add_argument("--sample", type=float, default=3, help="--memory: seconds between RSS samples")
    ap.add_argument("--max-events", type=int, default=200_000, help="--memory: events of the max-rate backfill")
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md's load section")
    ap.add_argument("--out", default="docs", help="folder of benchmarks.md")
    return ap


def _sections(args, brokers: dict[str, str]) -> list[str]:
    """The markdown of the parts asked for, each measured now."""
    body, bootstrap = [], brokers["tansu (embedded)"]
    if args.produce:
        rows = produce_cases(brokers, args.rows, args.repeats)
        body += ["### `scinol produce` vs a raw producer", "", PRODUCE_NOTE, "", produce_table(rows), ""]
    if args.latency:
        lat = []
        for max_batch in args.max_batch or [2000]:
            say(f"latency: {args.rate:,.0f} events/s for {args.seconds:g} s, max_batch {max_batch}")
            lat.append(latency_case(bootstrap, args.rate, args.seconds, max_batch))
        body += ["### Latency at a fixed offered load", "", LATENCY_NOTE.format(warm=WARM), "",
                 latency_table(lat), ""]
    if args.memory:
        say(f"memory: maximum rate over {args.max_events:,} events")
        top = max_rate(bootstrap, args.max_events)
        say(f"memory: {top:,.0f} events/s; {args.minutes:g} min at {args.load:.0%} of it")
        mem = memory_case(bootstrap, args.load * top, args.minutes, args.sample)
        body += ["### Resident memory over a long run", "",
                 MEMORY_NOTE.format(n=args.max_events, warm=WARM, batch=ENDLESS_BATCH, load=args.load,
                                    every=args.sample), "",
                 memory_table(mem, top), ""]
    return body


def main(argv=None) -> int:
    """``python -m pipelines.bench.load``: scinol produce vs a raw producer,
    exact-mode latency at a fixed load, memory over a long run."""
    import contextlib
    import platform

    args = _parser().parse_args(argv)
    if not (args.produce or args.latency or args.memory):
        args.produce = args.latency = args.memory = True
    if min(args.rows, args.repeats, args.max_events, *(args.max_batch or [1])) < 1 \
            or min(args.rate, args.seconds, args.minutes, args.sample, args.load) <= 0:
        print("usage: --rows, --repeats, --max-events and --max-batch at least 1; --rate, --seconds, --minutes, "
              "--sample and --load above 0", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        body = _sections(args, _brokers(stack, args.kafka and args.produce))
    seconds = time.perf_counter() - started
    command = "python -m pipelines.bench.load " + " ".join(argv if argv is not None else sys.argv[1:])
    head = ["## Load", "",
            f"_Reproduce: `{command.strip()}` — {time.strftime('%Y-%m-%d')}, {platform.system()} "
            f"{platform.machine()}, {os.cpu_count()} CPUs shared with other jobs (figures vary run to run), "
            f"Python {platform.python_version()}; wall time {seconds:.0f} s._", ""]
    text = "\n".join(head + body)
    print(text)
    if args.write:
        path = os.path.join(args.out, "benchmarks.md")
        report.update_section(path, "load", text)
        say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

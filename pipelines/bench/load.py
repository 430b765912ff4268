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
markers (:func:`pipelines.bench.report.update_section`).

This module is the command; each part is measured in a module of its own:
``load_produce``, ``load_latency``, ``load_memory``."""

from __future__ import annotations

import os
import sys
import time

from pipelines.bench import report
from pipelines.bench.load_latency import LATENCY_NOTE, WARM, latency_case, latency_table
from pipelines.bench.load_memory import ENDLESS_BATCH, MEMORY_NOTE, max_rate, memory_case, memory_table
from pipelines.bench.load_produce import PRODUCE_NOTE, produce_cases, produce_table
from pipelines.bench.throughput import say


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

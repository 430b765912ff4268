#!/usr/bin/env python
"""Sharded mode on the embedded broker: what staleness buys and costs.

1. ``--staleness`` table: K shards at S = 0, 8, 64, 512 on the paper's toy
   data, a synthetic sparse stream (50 non-zeros of 2^20) and, with
   ``--paper-data DIR``, UCI Adult one-hot encoded (a real sparse set):
   mean progressive loss over the labelled events (exact mode beside it) and
   events/s from the first prediction to the last.
2. ``--shards`` table: K = 1, 2, 4 at S = 64 beside exact mode: events/s
   (bounded backfill) and p50/p99 latency with a producer paced at --rate.
3. ``--ratios`` table: K = 2 and 4 at S = B (the batch size, ``--batch``)
   and at S = 0 (on the first ``--exact-n`` events: one Kafka round trip per
   event), on dense and sparse events, as a share of exact mode's events/s
   on the same topic in the same run.
4. ``--delays`` table: how far staleness can go. K = 2 at S = B = each of
   ``--delay-s`` on the toy data, per learner: mean progressive loss beside
   exact mode's, and for ScInOL2 a fixed-delay simulation written from
   Kempka et al. 2019, Algorithm 2, without the pipeline (event t predicted
   with the feedback of events 1..t-S-1 applied), which tells the learner's
   own behaviour under delay from the pipeline's.

Usage: python benchmarks/bench_sharded.py [--n 3000] [--rate 300] [--seconds 15]
       python benchmarks/bench_sharded.py --ratios [--ratio-n 20000] [--batch 500]
       python benchmarks/bench_sharded.py --delays [--delay-n 100000] [--delay-s 500,2000,5000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np

from learners.datasets import toy_examples
from pipelines.bench.pipeline_speed import sparse_events
from pipelines.kafka.broker import EmbeddedBroker
from pipelines.records.events import dense_events
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.records.topics import produce_events
from pipelines.config import LearnerConfig, RunConfig
from pipelines.launch import run
from pipelines.records.topics import read_records

def adult_events(n: int, paper_data: str):
    """UCI Adult (from ``--paper-data``), one-hot: ~14 non-zeros of ~100 columns."""
    from pipelines.bench.paper_data import load_adult

    data = load_adult(paper_data)
    X, y = data.X_train[:n], np.where(data.y_train[:n] > 0, 1.0, -1.0)
    for i, row in enumerate(X):
        idx = np.flatnonzero(row)
        yield {"id": f"a{i}", "timestamp": 1_700_000_000_000 + i, "model": "default",
               "features": {"indices": idx.tolist(), "values": row[idx].tolist()}, "label": float(y[i]),
               "weight": None}


def datasets(n: int, paper_data: str | None):
    X, y = toy_examples(n, 0)
    sets = [("toy (21 dense)", lambda: dense_events(X, y, "t-", start_ms=1_700_000_000_000)),
            ("sparse (50 of 2^20)", lambda: sparse_events(n))]
    if paper_data and os.path.isdir(os.path.join(paper_data, "adult")):
        sets.append(("Adult (one-hot)", lambda: adult_events(n, paper_data)))
    return sets


def backfill(bootstrap: str, topic: str, n: int, **options) -> tuple[float, float, float]:
    """Bounded run over the n events in ``topic``: (mean progressive loss,
    events/s first to last prediction, wall seconds incl. start-up)."""
    pred = f"{topic}.pred.{time.time_ns()}"
    with tempfile.TemporaryDirectory() as ckpt:
        cfg = RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=pred, bounded=True,
                        checkpoint_dir=ckpt, progress_seconds=None, **options)
        t0 = time.perf_counter()
        run(cfg)
        wall = time.perf_counter() - t0
    preds = read_records(bootstrap, pred, n)
    assert len(preds) == n, f"{len(preds)} predictions for {n} events"
    made = np.array([p["event_timestamp"] + p["latency_ms"] for p in preds])  # when each was made (ms)
    losses = [p["loss"] for p in preds if p["loss"] is not None]
    return float(np.mean(losses)), n / max((made.max() - made.min()) / 1000.0, 1e-9), wall


def latency(bootstrap: str, rate: float, seconds: float, **options) -> tuple[float, float]:
    topic = f"bench.lat.{time.time_ns()}"
    n = int(rate * seconds)
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1)])
    cfg = RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=False,
                    stop_after=n, progress_seconds=None, max_batch=500, **options)
    X, y = toy_examples(n, 3)

    def producer():
        time.sleep(4.0)  # let the pipeline start
        stamped = ({**e, "timestamp": int(time.time() * 1000)} for e in dense_events(X, y, "lat-", start_ms=0))
        produce_events(bootstrap, topic, stamped, rate=rate, total=n, progress=False)

    thread = threading.Thread(target=producer)
    thread.start()
    run(cfg)
    thread.join()
    # The first second's events are not counted: librdkafka's idempotent
    # producer (the load generator's) holds its first messages until it has a
    # producer id, about a second here, so their stamps are that much older
    # than their sending (without idempotence they are not).
    made = sorted(read_records(bootstrap, cfg.predictions_topic, n), key=lambda p: p["event_timestamp"])
    lat = np.array([p["latency_ms"] for p in made[int(rate):]])
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def ratios(bs: str, n: int, n_zero: int, batch: int) -> None:
    """Sharded mode's events/s as a share of exact mode's, same topic, same run."""
    X, y = toy_examples(n, 2)
    print(f"\nevents/s first to last prediction (share of exact mode); S = B = {batch} on {n:,} events, "
          f"S = 0 on the first {n_zero:,}")
    print(f"{'data':<22}{'exact':>10}" + "".join(f"{f'K = {k}, S = {s}':>22}" for k in (2, 4) for s in ("B", 0)))
    for name, events in (("toy (21 dense)", dense_events(X, y, "r-", start_ms=1_700_000_000_000)),
                         ("sparse (50 of 2^20)", sparse_events(n))):
        topic = f"bench.ratio.{time.time_ns()}"
        produce_events(bs, topic, events, partitions=1, total=n, progress=False)
        _, exact, _ = backfill(bs, topic, n, max_batch=batch)
        cells = []
        for k in (2, 4):
            for s, count in ((batch, n), (0, n_zero)):
                _, rate, _ = backfill(bs, topic, count, shards=k, max_staleness=s, max_batch=batch,
                                      stop_after=count)
                cells.append(f"{rate:>8,.0f} ({rate / exact:.2f}x)")
        print(f"{name:<22}{exact:>10,.0f}" + "".join(f"{c:>22}" for c in cells), flush=True)


def scinol2_with_delay(X: np.ndarray, y: np.ndarray, delay: int) -> float:
    """Mean logistic loss of ScInOL2 (Kempka et al. 2019, Algorithm 2, eps = 1,
    a bias column) when event t is predicted with only the feedback of events
    1..t-delay-1 applied; each update uses the weights its event was
    predicted with. Written from the paper, sharing no code with learners/."""
    X = np.hstack([X, np.ones((len(X), 1))])
    M, G, S2, eta = np.zeros(X.shape[1]), np.zeros(X.shape[1]), np.zeros(X.shape[1]), np.ones(X.shape[1])
    pending, total = [], 0.0
    for t, x in enumerate(X):
        while pending and pending[0][0] < t - delay:
            _, xs, g, w = pending.pop(0)
            M, gx = np.maximum(M, np.abs(xs)), g * xs
            eta, G, S2 = eta - gx * w, G - gx, S2 + gx * gx
        root = np.sqrt(S2 + np.maximum(M, np.abs(x)) ** 2)
        theta = np.divide(G, root, out=np.zeros_like(G), where=root > 0)
        w = np.divide(np.sign(theta) * np.minimum(np.abs(theta), 1.0) * eta, 2 * root, out=np.zeros_like(G),
                      where=root > 0)
        margin = y[t] * (x @ w)
        total += np.logaddexp(0.0, -margin)
        pending.append((t, x, -y[t] / (1.0 + np.exp(min(margin, 700.0))), w))
    return total / len(X)


def delays(bs: str, n: int, stalenesses: list[int], learners: list[str]) -> None:
    """K = 2 at S = B for each S: where the learners stop learning."""
    X, y = toy_examples(n, 1)
    topic = f"bench.delay.{time.time_ns()}"
    produce_events(bs, topic, dense_events(X, y, "d-", start_ms=1_700_000_000_000), partitions=1, total=n,
                   progress=False)
    print(f"\nmean progressive loss, toy data, {n:,} events; K = 2 shards at S = B")
    print(f"{'learner':<28}{'exact':>12}" + "".join(f"{f'S = {s}':>14}" for s in stalenesses))
    for name in learners:
        exact, _, _ = backfill(bs, topic, n, learner=LearnerConfig(name))
        cells = [backfill(bs, topic, n, learner=LearnerConfig(name), shards=2, max_staleness=s, max_batch=s)[0]
                 for s in stalenesses]
        print(f"{name:<28}{exact:>12.4g}" + "".join(f"{c:>14.4g}" for c in cells), flush=True)
    cells = [scinol2_with_delay(X, y, s) for s in [0] + stalenesses]
    print(f"{'scinol2, fixed-delay model':<28}" + "".join(f"{c:>{12 if i == 0 else 14}.4g}"
                                                         for i, c in enumerate(cells)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="events per data set for the staleness table")
    ap.add_argument("--k", type=int, default=4, help="shards for the staleness table")
    ap.add_argument("--throughput-n", type=int, default=20000, help="events for the shards table")
    ap.add_argument("--rate", type=float, default=300,
                    help="events/s for the latency runs (the first second not counted)")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--skip-staleness", action="store_true")
    ap.add_argument("--skip-shards", action="store_true")
    ap.add_argument("--ratios", action="store_true", help="only the table of shares of exact mode's rate")
    ap.add_argument("--ratio-n", type=int, default=20000, help="events per data set for --ratios")
    ap.add_argument("--exact-n", type=int, default=1000, help="events for S = 0 in --ratios")
    ap.add_argument("--batch", type=int, default=500, help="max_batch, and S = B, for --ratios")
    ap.add_argument("--delays", action="store_true", help="only the table of losses at large staleness")
    ap.add_argument("--delay-n", type=int, default=100000, help="events for --delays")
    ap.add_argument("--delay-s", default="500,2000,5000", help="the S = B values for --delays")
    ap.add_argument("--delay-learners", default="scinol2,scinol1,kt", help="learners for --delays")
    ap.add_argument("--paper-data", metavar="DIR", help="also the Adult data set read from DIR/adult "
                                                        "(the layout of pipelines/bench/paper_data.py)")
    args = ap.parse_args()
    with EmbeddedBroker() as broker:
        bs = broker.bootstrap
        if args.delays:
            delays(bs, args.delay_n, [int(s) for s in args.delay_s.split(",")], args.delay_learners.split(","))
            return
        if args.ratios:
            ratios(bs, args.ratio_n, args.exact_n, args.batch)
            return
        if not args.skip_staleness:
            print(f"\nK = {args.k} shards, {args.n} events per data set: mean progressive loss | events/s")
            print(f"{'data':<22}{'exact':>18}" + "".join(f"{f'S = {s}':>18}" for s in (0, 8, 64, 512)))
            for name, events in datasets(args.n, args.paper_data):
                topic = f"bench.stale.{time.time_ns()}"
                produce_events(bs, topic, events(), partitions=1, progress=False)
                cells = []
                for options in [{}] + [{"shards": args.k, "max_staleness": s} for s in (0, 8, 64, 512)]:
                    loss, rate, _ = backfill(bs, topic, args.n, **options)
                    cells.append(f"{loss:.4f} | {rate:>6,.0f}")
                    print(f"  ({name}, {options or 'exact'}: loss {loss:.4f}, {rate:,.0f} events/s)",
                          file=sys.stderr, flush=True)
                print(f"{name:<22}" + "".join(f"{c:>18}" for c in cells), flush=True)
        if not args.skip_shards:
            topic = f"bench.shards.{time.time_ns()}"
            X, y = toy_examples(args.throughput_n, 1)
            produce_events(bs, topic, dense_events(X, y, "k-", start_ms=1_700_000_000_000), partitions=1,
                           progress=False)
            print(f"\ntoy, {args.throughput_n} events backfilled; latency at {args.rate:,.0f} events/s paced")
            print(f"{'mode':<22}{'events/s':>12}{'wall s':>9}{'p50 ms':>9}{'p99 ms':>9}")
            for label, options in [("exact", {})] + [(f"K = {k}, S = 64", {"shards": k, "max_staleness": 64})
                                                      for k in (1, 2, 4)]:
                _, rate, wall = backfill(bs, topic, args.throughput_n, **options)
                p50, p99 = latency(bs, args.rate, args.seconds, **options)
                print(f"{label:<22}{rate:>12,.0f}{wall:>9.1f}{p50:>9.1f}{p99:>9.1f}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Throughput of the Avro codec (schemas/codec.py) on Event records; prints a
table of events/s for encode, decode, decode_many and validate_event.

Three event shapes: dense (21 values, like the Kempka et al. 2019 toy data), sparse (50
non-zeros in 2^20 dimensions) and named (10 hashed feature names). Each
figure is the best of --repeats passes over --n events (default 100,000).
decode_many gets batches of --batch messages (default 1,000), as the Kafka
source hands them over; on one list of 100,000 it is slower, because keeping
100,000 decoded dicts alive makes Python's cyclic GC run over and over.
"""

from __future__ import annotations

import argparse
import random
import time

from pipelines.records.validation import validate_event
from schemas.codec import Codec


def make_events(kind: str, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if kind == "dense":
            features = {"values": [rng.gauss(0, 1) for _ in range(21)]}
        elif kind == "sparse":
            features = {"indices": sorted(rng.sample(range(1 << 20), 50)), "values": [rng.lognormvariate(0, 1) for _ in range(50)]}
        else:
            features = {"values": {f"feature_{j}": rng.random() * 100 for j in range(10)}}
        out.append({"id": f"evt-{i}", "timestamp": 1_700_000_000_000 + i, "model": "default",
                    "features": features, "label": rng.choice([-1.0, 1.0]), "weight": None})
    return out


def best_rate(fn, n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1_000)
    args = ap.parse_args()
    codec = Codec()
    print(f"{'events':8} {'bytes/ev':>9} {'encode/s':>12} {'decode/s':>12} {'decode_many/s':>14} {'validate/s':>12}")
    for kind in ("dense", "sparse", "named"):
        events = make_events(kind, args.n)
        encode = codec.encode
        frames = [encode("Event", e) for e in events]
        decoded = codec.decode_many(frames, "Event")
        assert decoded == events
        decode = codec.decode

        def run_encode():
            for e in events:
                encode("Event", e)

        def run_decode():
            for f in frames:
                decode(f, "Event")

        def run_decode_many():
            for i in range(0, len(frames), args.batch):
                codec.decode_many(frames[i : i + args.batch], "Event")

        def run_validate():
            for e in decoded:
                validate_event(e, "logistic")

        rates = [
            best_rate(run_encode, args.n, args.repeats),
            best_rate(run_decode, args.n, args.repeats),
            best_rate(run_decode_many, args.n, args.repeats),
            best_rate(run_validate, args.n, args.repeats),
        ]
        size = sum(map(len, frames)) / len(frames)
        print(f"{kind:8} {size:9.0f} " + " ".join(f"{r:{w},.0f}" for r, w in zip(rates, (12, 12, 14, 12))))


if __name__ == "__main__":
    main()

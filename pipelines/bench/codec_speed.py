"""Events/s of the columnar codec (:mod:`pipelines.records.event_decoder`) beside
the per-event path it replaces, measured in the same run on the same bytes:

- decode: ``screen`` (fastavro decode + ``validate_event``) per message,
  then ``event_rows`` over the valid events, as the exact pipeline does
  today; fastavro's ``decode_many`` alone; and ``EventDecoder.decode``
  (decode, checks and CSR rows in one compiled call per batch);
- encode: ``Codec.encode`` per Prediction record (records built before
  timing, so only the encoding is timed) and ``encode_predictions`` over
  the same predictions as arrays.

Events: dense (21 values, the Kempka et al. 2019 toy data), sparse (50
non-zeros in 2^20 dimensions), named (10 hashed names). Each figure is the
best of ``--repeats`` passes over ``--n`` events in batches of ``--batch``
messages, JIT compilation warmed up first. Run:

    python -m pipelines.bench.codec_speed [--n 200000] [--batch 1000] [--pipeline 200000]

``--pipeline N`` adds whole ``scinol run --bounded`` runs (exact mode, the
embedded broker) over N events of each kind, decoding per event and then by
batch, one after the other on the same topic.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from learners.datasets import toy_examples
from learners.hashing import FeatureHasher
from pipelines.records.event_decoder import EventDecoder
from pipelines.records.prediction_values import encode_predictions
from pipelines.records.dead_letters import screen
from pipelines.records.events import event_rows
from schemas.codec import Codec

START_MS = 1_700_000_000_000


def make_events(kind: str, n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    if kind == "dense":
        X, y = toy_examples(n, seed)
        rows = [{"values": r} for r in X.tolist()]
    elif kind == "sparse":
        idx = np.sort(rng.integers(0, 1 << 20, size=(n, 50)), axis=1)
        idx[:, 1:] += np.cumsum(idx[:, 1:] == idx[:, :-1], axis=1)  # distinct, still sorted
        rows = [{"indices": i, "values": v} for i, v in zip(idx.tolist(), rng.lognormal(size=(n, 50)).tolist())]
        y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    else:
        vals = (rng.random((n, 10)) * 100).tolist()
        rows = [{"values": {f"feature_{j}": v[j] for j in range(10)}} for v in vals]
        y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return [{"id": f"evt-{i}", "timestamp": START_MS + i, "model": "default", "features": f, "label": float(label),
             "weight": None} for i, (f, label) in enumerate(zip(rows, y.tolist()))]


def best_rate(fn, n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def decode_rates(codec: Codec, frames: list[bytes], batch: int, repeats: int) -> tuple[float, float, float]:
    """(per-event path, fastavro decode_many alone, columnar) events/s."""
    hasher = FeatureHasher(18)
    decoder = EventDecoder(codec, "logistic")
    chunks = [frames[i:i + batch] for i in range(0, len(frames), batch)]
    decoder.decode(chunks[0])  # compile

    def per_event():
        for chunk in chunks:
            events = []
            for value in chunk:
                event, problem = screen(codec, value, "logistic", None)
                if problem is None:
                    events.append(event)
            event_rows(events, hasher)

    def fastavro_only():
        for chunk in chunks:
            codec.decode_many(chunk, "scinol.Event")

    def columnar():
        for chunk in chunks:
            cols = decoder.decode(chunk)
            assert cols.fallbacks == 0

    n = len(frames)
    return best_rate(per_event, n, repeats), best_rate(fastavro_only, n, repeats), best_rate(columnar, n, repeats)


def prediction_batches(codec: Codec, frames: list[bytes], batch: int, topic: str):
    """Per batch: the keyword arguments of encode_predictions (ids pointing
    into the decoded batch, as the pipeline would have them) and the same
    predictions as the records the per-event path encodes."""
    decoder = EventDecoder(codec, "logistic")
    rng = np.random.default_rng(1)
    out = []
    for a in range(0, len(frames), batch):
        cols = decoder.decode(frames[a:a + batch])
        n = len(cols)
        scores = rng.normal(size=(n, 1))
        prob = 1.0 / (1.0 + np.exp(-scores[:, 0]))
        klass = np.where(scores[:, 0] > 0, 1, -1)
        loss = np.log1p(np.exp(-cols.label * scores[:, 0]))
        latency = rng.random(n) * 10
        offsets = np.arange(a, a + n, dtype=np.int64)
        kwargs = dict(buf=cols.buf, id_start=cols.id_start, id_end=cols.id_end, model="default",
                      model_version=np.arange(a, a + n), scores=scores, label=cols.label, has_label=cols.has_label,
                      loss=loss, event_timestamp=cols.timestamp, latency_ms=latency, probability=prob,
                      predicted_class=klass, source_topic="events", source_partition=np.zeros(n, np.int64),
                      source_offset=offsets)
        records = [{"event_id": cols.event_id(i), "model": "default", "model_version": a + i,
                    "score": scores[i, 0], "scores": scores[i].tolist(), "probability": prob[i],
                    "predicted_class": int(klass[i]), "label": float(cols.label[i]), "loss": loss[i],
                    "event_timestamp": int(cols.timestamp[i]), "latency_ms": latency[i], "source_topic": "events",
                    "source_partition": 0, "source_offset": a + i} for i in range(n)]
        out.append((kwargs, records))
    return out


def encode_rates(codec: Codec, frames: list[bytes], batch: int, repeats: int) -> tuple[float, float]:
    """(Codec.encode per record, columnar) predictions/s; checks they agree."""
    topic = "predictions"
    batches = prediction_batches(codec, frames, batch, topic)
    kwargs, records = batches[0]
    buf, offsets = encode_predictions(codec, topic, **kwargs)  # compile, and check
    want = b"".join(codec.encode("scinol.Prediction", r, topic) for r in records)
    assert buf.tobytes() == want, "columnar prediction bytes differ from the codec's"

    def per_record():
        encode = codec.encode
        for _, recs in batches:
            [encode("scinol.Prediction", r, topic) for r in recs]

    def columnar():
        for kw, _ in batches:
            encode_predictions(codec, topic, **kw)

    n = len(frames)
    return best_rate(per_record, n, repeats), best_rate(columnar, n, repeats)


def pipeline_rates(broker, name: str, events, n: int, repeats: int) -> tuple[float, float]:
    """Events/s of bounded exact-mode runs (ScInOL2, logistic) over the same
    n events in one partition, decoding one message at a time and by batch
    (RunConfig.columnar_decode) in turn, whole run wall time, best of
    ``repeats`` runs each (the two kinds of run alternate, so a busy machine
    slows both alike)."""
    from pipelines.config import LearnerConfig, RunConfig
    from pipelines.launch import run
    from pipelines.records.topics import produce_events, read_records

    topic = f"bench.codec.{name}"
    produce_events(broker.bootstrap, topic, events, partitions=1, total=n, progress=False)
    rates = {False: 0.0, True: 0.0}
    for k, columnar in enumerate((False, True) * repeats):
        cfg = RunConfig(bootstrap=broker.bootstrap, topic=topic, predictions_topic=f"{topic}.pred.{k}",
                        bounded=True, learner=LearnerConfig("scinol2", "logistic", hash_bits=20),
                        progress_seconds=None, max_batch=5000, columnar_decode=columnar)
        t0 = time.perf_counter()
        run(cfg)
        rates[columnar] = max(rates[columnar], n / (time.perf_counter() - t0))
        if len(read_records(broker.bootstrap, cfg.predictions_topic, n)) != n:
            raise RuntimeError(f"the run wrote fewer than {n} predictions")
    return rates[False], rates[True]


def pipeline_table(n: int, kinds: list[str], repeats: int) -> None:
    from pipelines.kafka.broker import EmbeddedBroker

    print(f"\nscinol run --bounded (exact mode, embedded broker), {n} events, best of {repeats}; events/s")
    print(f"{'events':7} {'per-event decode':>16} {'columnar decode':>16} {'x':>5}")
    with EmbeddedBroker() as broker:
        for kind in kinds:
            slow, fast = pipeline_rates(broker, kind, make_events(kind, n), n, repeats)
            print(f"{kind:7} {slow:16,.0f} {fast:16,.0f} {fast / slow:5.2f}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", default="dense,sparse,named")
    ap.add_argument("--pipeline", type=int, default=0, metavar="N",
                    help="also run the exact pipeline over N events, per-event and columnar decode")
    args = ap.parse_args(argv)
    codec = Codec()
    print(f"{args.n} events per pass, batches of {args.batch}, best of {args.repeats}; events/s")
    print(f"{'events':7} {'bytes/ev':>8} | {'decode: per-event':>17} {'fastavro only':>13} {'columnar':>11} {'x':>5} "
          f"| {'encode: per-record':>18} {'columnar':>11} {'x':>5}")
    for kind in args.kinds.split(","):
        frames = [codec.encode("scinol.Event", e) for e in make_events(kind, args.n)]
        slow, fastavro_only, fast = decode_rates(codec, frames, args.batch, args.repeats)
        enc_slow, enc_fast = encode_rates(codec, frames, args.batch, args.repeats)
        size = sum(map(len, frames)) / len(frames)
        print(f"{kind:7} {size:8.0f} | {slow:17,.0f} {fastavro_only:13,.0f} {fast:11,.0f} {fast / slow:5.1f} "
              f"| {enc_slow:18,.0f} {enc_fast:11,.0f} {enc_fast / enc_slow:5.1f}", flush=True)
    if args.pipeline:
        pipeline_table(args.pipeline, args.kinds.split(","), args.repeats)


if __name__ == "__main__":
    main()

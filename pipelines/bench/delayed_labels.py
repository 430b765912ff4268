"""Delayed labels in process, without Kafka: the learning curve of a stream
whose labels arrive D events after their events beside the same stream with
its labels inline, and what late labels and ``-q`` crosses cost in events/s.

Both go through :class:`pipelines.exact.model_runner.ModelRunner`, the
object the exact-mode pipeline keeps per model, fed as the pipeline feeds
it. The curve is the progressive logistic loss in label-arrival order (the
README's "Delayed labels"): the loss of the prediction made when the event
arrived, counted when its label arrives. With D = 0 every label comes right
after its event, so the curve is the inline one exactly.

    python -m pipelines.bench.delayed_labels [--events N] [--out docs]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import NamedTuple

import numpy as np

from learners import make_learner
from learners.datasets import toy_examples
from pipelines.exact.model_runner import LabelSettings, ModelRunner
from schemas.codec import Codec

T0 = 1_700_000_000_000
DELAYS = (0, 100, 1000, 10_000)
RANDOM = 10_000
"""The random delay: each label 0..RANDOM events after its event, uniformly."""
CODEC = Codec()


class Position(NamedTuple):  # what the pipeline hands ModelRunner with each record
    topic: str
    partition: int
    offset: int
    key: bytes | None = None


def toy_events(n: int, seed: int = 0, namespaces: bool = False) -> tuple[np.ndarray, list[dict]]:
    """(labels ±1, Event records) of the §4.1 toy stream (Kempka et al. 2019);
    ``namespaces``: features named ``a^x0..a^x10``, ``b^x11..b^x20`` so that
    ``-q ab`` has two namespaces to cross."""
    X, y = toy_examples(n, seed)
    events = []
    for i, (row, label) in enumerate(zip(X.tolist(), y.tolist())):
        values = {f"{'a' if j <= 10 else 'b'}^x{j}": v for j, v in enumerate(row)} if namespaces else row
        events.append({"id": f"e{i}", "timestamp": T0 + i, "model": "m", "features": {"values": values},
                       "label": label, "weight": None})
    return y, events


def schedule(due: np.ndarray) -> list[tuple[str, int, int]]:
    """The merged order of events and labels: event t arrives at time t, the
    label of event i after event ``due[i]`` (labels due past the end come
    after the last event, in due order). Runs of one kind as ("events", lo,
    hi) and ("labels", lo, hi), the latter indexing ``np.argsort(due)``."""
    n = len(due)
    per_event = np.bincount(np.minimum(due, n - 1), minlength=n)
    runs, lo, done = [], 0, 0
    for t in np.flatnonzero(per_event).tolist():
        runs.append(("events", lo, t + 1))
        runs.append(("labels", done, done + int(per_event[t])))
        lo, done = t + 1, done + int(per_event[t])
    if lo < n:
        runs.append(("events", lo, n))
    return runs


def inline_losses(events: list[dict], make, batch: int = 1000) -> np.ndarray:
    """Progressive losses of the stream with labels on its events (event order)."""
    runner = ModelRunner("m", make)
    items = [(Position("events", 0, i), e) for i, e in enumerate(events)]
    out = [p["loss"] for lo in range(0, len(items), batch) for p in runner.process(items[lo:lo + batch])]
    return np.array(out)


def delayed_losses(events: list[dict], labels: np.ndarray, due: np.ndarray, make) -> tuple[np.ndarray, list[str]]:
    """(progressive losses, event ids) in label-arrival order, the label of
    event i arriving after event ``due[i]``, through the labels-topic path."""
    n = len(events)
    runner = ModelRunner("m", make, labels=LabelSettings("labels", math.inf, n + 1))
    items = [(Position("events", 0, i), {**e, "label": None}) for i, e in enumerate(events)]
    order = np.argsort(due, kind="stable").tolist()
    label_items = [(Position("labels", 0, k), {"event_id": f"e{i}", "model": "m", "label": float(labels[i]),
                                               "timestamp": T0 + int(due[i]), "weight": None})
                   for k, i in enumerate(order)]
    losses, ids = [], []
    for kind, lo, hi in schedule(due):
        if kind == "events":
            runner.process(items[lo:hi])
            continue
        out, _, _, dead = runner.process_labels(label_items[lo:hi])
        if dead:
            raise RuntimeError(f"labels went to the dead letters: {dead[:1]}")
        losses.extend(p["loss"] for p in out)
        ids.extend(p["event_id"] for p in out)
    return np.array(losses), ids


def progressive(losses: np.ndarray) -> np.ndarray:
    return np.cumsum(losses) / np.arange(1, len(losses) + 1)


def curves(n: int, seed: int = 0, delays=DELAYS, random_delay: int | None = RANDOM) -> dict[str, np.ndarray]:
    """Label name → progressive loss after each label learned: "inline",
    "D = d" per delay, and "D ~ U{0..R}" for the random delay."""
    y, events = toy_events(n, seed)
    make = lambda: make_learner("scinol2", "logistic")  # noqa: E731
    out = {"inline": progressive(inline_losses(events, make))}
    dues = {f"D = {d:,}": np.arange(n) + d for d in delays}
    if random_delay:
        rng = np.random.default_rng(seed + 1)
        dues[f"D ~ U{{0..{random_delay:,}}}"] = np.arange(n) + rng.integers(0, random_delay + 1, size=n)
    for name, due in dues.items():
        out[name] = progressive(delayed_losses(events, y, due, make)[0])
    return out


def figure(result: dict[str, np.ndarray], path: str, n: int) -> None:
    from pipelines.bench.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    x = np.arange(1, n + 1)
    for name, curve in result.items():
        inline = name == "inline"
        ax.plot(x, curve, "k--" if inline else "-", lw=2.4 if inline else 1.3, label=name, zorder=3 if inline else 2)
    ax.axhline(math.log(2), color="gray", lw=0.8, ls=":")
    ax.annotate("zero model (ln 2)", (n, math.log(2)), textcoords="offset points", xytext=(-4, 3), ha="right",
                fontsize=8)
    ax.set_xscale("log")
    ax.set_ylim(0.0, 1.2)
    ax.set_xlabel("labels learned (label-arrival order)")
    ax.set_ylabel("progressive logistic loss")
    ax.set_title(f"ScInOL2 on the §4.1 toy stream ({n:,} events): labels D events late vs inline", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(result: dict[str, np.ndarray]) -> str:
    half = len(next(iter(result.values()))) // 2
    lines = ["| labels | final progressive loss | progressive loss at half the stream |", "|---|---|---|"]
    lines += [f"| {name} | {c[-1]:.4f} | {c[half - 1]:.4f} |" for name, c in result.items()]
    return "\n".join(lines)


def columnar_batches(events: list[dict], batch: int, hash_bits: int) -> list:
    """The events as the pipeline hands them to ModelRunner: encoded, then
    decoded a batch at a time into columns, each batch an :class:`EventRows`
    of partition 0 of topic ``events``."""
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.records.event_decoder import EventDecoder
    from pipelines.records.event_rows import EventRows

    decoder = EventDecoder(CODEC, "logistic", hash_bits=hash_bits)
    messages = [KafkaMessage("events", 0, i, e["timestamp"], None, CODEC.encode("scinol.Event", e))
                for i, e in enumerate(events)]
    out = []
    for lo in range(0, len(messages), batch):
        part = messages[lo:lo + batch]
        cols = decoder.decode([m.value for m in part])
        (_, rows), = EventRows.split(cols, np.ones(len(part), bool), part)
        out.append(rows)
    return out


def _timed(base, other, repeats: int) -> tuple[float, float]:
    """Best of ``repeats`` wall times of ``base()`` and ``other()``, run in
    turn so that a busy machine slows both alike."""
    best = [math.inf, math.inf]
    for _ in range(repeats):
        for k, run in enumerate((base, other)):
            t0 = time.perf_counter()
            run()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0], best[1]


def late_label_speed(n: int, batch: int, repeats: int) -> tuple[float, float]:
    """(events/s with labels inline, events/s with each batch's labels
    arriving one batch later through process_labels_encoded), same events,
    predictions encoded as the pipeline encodes them."""
    y, events = toy_events(n)
    inline = columnar_batches(events, batch, 18)
    bare = columnar_batches([{**e, "label": None} for e in events], batch, 18)
    labels = [[(Position("labels", 0, lo + k), {"event_id": f"e{lo + k}", "model": "m", "label": float(y[lo + k]),
                                                 "timestamp": T0 + lo + k + batch, "weight": None})
               for k in range(len(part))] for lo, part in zip(range(0, n, batch), bare)]
    make = lambda: make_learner("scinol2", "logistic")  # noqa: E731

    def with_inline():
        runner = ModelRunner("m", make)
        for part in inline:
            runner.process_encoded(part, CODEC, "predictions")

    def with_late():
        runner = ModelRunner("m", make, labels=LabelSettings("labels", math.inf, n + 1))
        for k, part in enumerate(bare):
            runner.process_encoded(part, CODEC, "predictions")
            if k:
                runner.process_labels_encoded(labels[k - 1], CODEC, "predictions")
        runner.process_labels_encoded(labels[-1], CODEC, "predictions")
        if runner.labels_learned != n:
            raise RuntimeError(f"learned {runner.labels_learned} labels of {n}")

    with_inline()  # compiles the kernels before the clock starts
    t_inline, t_late = _timed(with_inline, with_late, repeats)
    return n / t_inline, n / t_late


def interaction_speed(n: int, batch: int, repeats: int, cross: str = "ab") -> tuple[float, float]:
    """(events/s without crosses, events/s with ``-q cross``), same named events."""
    _, events = toy_events(n, namespaces=True)
    items = columnar_batches(events, batch, 18)

    def learn(interactions):
        def go():
            runner = ModelRunner("m", lambda: make_learner("scinol2", "logistic", interactions=interactions))
            for part in items:
                runner.process(part)
        return go

    learn(None)(), learn([cross])()  # compile
    t_plain, t_crossed = _timed(learn(None), learn([cross]), repeats)
    return n / t_plain, n / t_crossed


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=_at_least_one, default=50_000, help="events of the learning-curve stream")
    p.add_argument("--speed-events", type=_at_least_one, default=100_000, help="events of the throughput figures")
    p.add_argument("--batch", type=_at_least_one, default=2000,
                   help="events per ModelRunner call (the pipeline's --max-batch)")
    p.add_argument("--repeats", type=_at_least_one, default=3, help="best of N for the throughput figures")
    p.add_argument("--out", default="docs", help="folder of delayed_labels.png")
    p.add_argument("--no-speed", action="store_true", help="only the learning curve")
    args = p.parse_args(argv)
    started = time.perf_counter()
    result = curves(args.events)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "delayed_labels.png")
    figure(result, path, args.events)
    print(f"{path}: progressive loss in label-arrival order, {args.events:,} events\n{table(result)}")
    if not args.no_speed:
        n, b, r = args.speed_events, args.batch, args.repeats
        inline, late = late_label_speed(n, b, r)
        plain, crossed = interaction_speed(n, b, r)
        print(f"\nModelRunner events/s, {n:,} events in batches of {b:,}, best of {r}:")
        print(f"| labels inline | {inline:,.0f} | labels one batch late (process_labels_encoded) | {late:,.0f} "
              f"| ratio {late / inline:.2f} |")
        print(f"| no crosses | {plain:,.0f} | -q ab | {crossed:,.0f} | ratio {crossed / plain:.2f} |")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Crash trials of ``scinol run`` against a real broker (tests/test_faults.py
runs a few, benchmarks/fault_trials.py the full set).

A trial streams two models' events, each model in its own partition (so
each model's order is fixed whatever the runner's scheduling), with poison
messages at fixed offsets; runs ``scinol run`` (unbounded) and kills it -9
according to a plan of faults — at a random time, after a random
checkpoint, or inside a checkpoint write — possibly corrupting the newest
checkpoint in between; then runs it once more ``--bounded`` to the end and
checks, from what is in Kafka and on disk:

- every valid event has a prediction (``events_lost`` counts those without);
- each model's final checkpoint covers every event once: its event count,
  its trial count ``t`` and every state array equal the uninterrupted
  reference bit for bit (``events_double_applied`` counts surplus updates);
- every poison message is a dead letter with the expected reason, and
  nothing else is.
"""

from __future__ import annotations

import collections
import os
import random
import subprocess
import time
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.support.faultkit import REPO, kill9, scinol_run_command, start_scinol_run, wait_for
from learners import make_learner
from learners.datasets import toy_examples
from pipelines.state.checkpoints import CheckpointStore
from pipelines.records.events import dense_events
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from schemas.codec import Codec

MODELS = ("a", "b")  # model MODELS[p] lives in partition p
RUN_FLAGS = ("--checkpoint-every", "500", "--max-batch", "100", "--max-message-bytes", "65536")


# --------------------------------------------------------------------------- the stream

@dataclass
class Stream:
    n_per_model: int
    data: dict = field(default_factory=dict)  # model -> (X, y)
    events: dict = field(default_factory=dict)  # model -> [Event]
    poison: dict = field(default_factory=dict)  # (partition, offset) -> reason it must get
    values: dict = field(default_factory=dict)  # partition -> [bytes] in offset order

    @property
    def valid_ids(self) -> set[str]:
        return {e["id"] for events in self.events.values() for e in events}


def poison_messages(codec: Codec, template: dict) -> list[tuple[bytes, str]]:
    """One message per reason a trial exercises, with the reason it must get."""
    def bad(**change):
        return codec.encode("scinol.Event", {**template, **change})
    return [
        (b"\x00\x00\x00", "undecodable"),
        (b"\x00\x00\x00\x7f\xff" + b"x", "unknown_schema_id"),
        (bad(features={"values": [float("nan")] * 21}), "non_finite_feature"),
        # below the codec's structural bound (2**40), far above the pipeline's:
        # before the bound existed this one event made the learner allocate 2**40 coordinates
        (bad(features={"indices": [(1 << 40) - 1], "values": [1.0]}), "index_out_of_range"),
        (bad(label=7.0), "bad_label"),
        (b"\x00\x00\x00\x00\x02" + bytes(70_000), "oversized"),  # over RUN_FLAGS' --max-message-bytes
    ]


def make_stream(n_per_model: int, seed: int = 0, unlabelled_every: int = 13) -> Stream:
    codec = Codec()
    stream = Stream(n_per_model)
    for p, model in enumerate(MODELS):
        X, y = toy_examples(n_per_model, seed * 10 + p)
        y = y.copy()
        y[::unlabelled_every] = np.nan  # predict-only events are part of the stream too
        events = list(dense_events(X, y, f"{model}-", model=model, start_ms=1_700_000_000_000))
        stream.data[model], stream.events[model] = (X, y), events
        poison = poison_messages(codec, events[0])
        at = {int(n_per_model * (k + 1) / (len(poison) + 1)): msg for k, msg in enumerate(poison)}
        values = []
        for i, event in enumerate(events):
            if i in at:
                value, reason = at[i]
                stream.poison[(p, len(values))] = reason
                values.append(value)
            values.append(codec.encode("scinol.Event", event))
        stream.values[p] = values
    return stream


def produce_stream(bootstrap: str, topic: str, stream: Stream) -> None:
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, len(MODELS))])
    errors = []
    # idempotent: a retried batch (a broker slow under load) must not land after the one behind it
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "message.max.bytes": 2_000_000,
                         "enable.idempotence": True})
    for p, values in stream.values.items():
        for value in values:
            while True:
                try:
                    producer.produce(topic, value=value, partition=p,
                                     on_delivery=lambda err, msg: err and errors.append(err))
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(60) == 0 and not errors, errors[:1]


def reference_learners(stream: Stream) -> dict:
    """What an uninterrupted run ends with: each model's events learned in order."""
    out = {}
    for model, (X, y) in stream.data.items():
        learner = make_learner("scinol2", "logistic")
        learner.learn(X, y)
        out[model] = learner
    return out


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0, raw: bool = False,
               settle: float = 30.0) -> list[tuple[int, int, dict]]:
    """Every record of ``topic`` as (partition, offset, decoded), read to the
    end of each partition (``raw``: the value's bytes, not decoded), as a
    ``read_committed`` consumer (librdkafka's default) sees it once no
    transaction on the topic is left undecided (see :func:`wait_until_stable`)."""
    decode = bytes if raw else Codec().decode
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"trial-read-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(meta.partitions)
        wait_until_stable(bootstrap, topic, partitions, settle)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending, out = set(partitions), []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(5000, timeout=0.5):
                err = m.error()
                if err is None:
                    out.append((m.partition(), m.offset(), decode(m.value())))
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
        assert not pending, f"{topic}: no end of partitions {sorted(pending)} within {timeout} s"
        return out
    finally:
        consumer.close()


def wait_until_stable(bootstrap: str, topic: str, partitions: list[int], timeout: float) -> None:
    """Wait until each partition's last stable offset is its end. Kafka
    answers a producer's commit_transaction once the decision is logged and
    writes the commit markers after that; until they are in, a
    ``read_committed`` consumer's end of the partition is the transaction's
    first offset, and a read right after a run ended would miss the run's
    last transaction (and all after it). AssertionError if a transaction is
    still open after ``timeout`` seconds."""
    views = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"trial-ends-{time.time_ns()}",
                       "isolation.level": level}) for level in ("read_committed", "read_uncommitted")]
    try:
        deadline = time.monotonic() + timeout
        while True:
            ends = {p: [view.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                        for view in views] for p in partitions}
            undecided = {p: (stable, end) for p, (stable, end) in ends.items() if stable < end}
            if not undecided:
                return
            if time.monotonic() >= deadline:
                raise AssertionError(f"{topic}: a transaction still open after {timeout:.0f} s "
                                     f"(partition: (last stable offset, end)) {undecided}")
            time.sleep(0.2)
    finally:
        for view in views:
            view.close()


# --------------------------------------------------------------------------- faults

@dataclass
class Fault:
    """One fault: ``kind`` is kill-random-time, kill-after-checkpoint,
    kill-in-write (``point`` and ``nth`` pass), or corrupt-newest
    (``how`` truncate|flip, of ``model``)."""
    kind: str
    point: str = ""
    nth: int = 1
    how: str = ""
    model: str = MODELS[0]

    def __str__(self) -> str:
        if self.kind == "kill-in-write":
            return f"kill -9 in {self.point}@{self.nth}"
        if self.kind == "corrupt-newest":
            return f"{self.how} newest checkpoint of {self.model}"
        return f"kill -9 {self.kind[5:]}"


@dataclass
class TrialResult:
    name: str
    faults: list[str]
    faults_injected: int = 0  # the faults that hit what they aimed at
    events: int = 0
    events_lost: int = 0
    events_double_applied: int = 0
    duplicate_predictions: int = 0
    models_identical: bool = False
    dead_letters: collections.Counter = field(default_factory=collections.Counter)
    dead_letters_as_expected: bool = False
    fallback_warnings: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what each kill hit

    @property
    def ok(self) -> bool:
        return (not self.errors and self.events_lost == 0 and self.events_double_applied == 0
                and self.models_identical and self.dead_letters_as_expected)


def _checkpoint_count(ckpt_dir: str, model: str) -> int:
    """Events covered by the model's newest checkpoint with a sidecar (0: none)."""
    folder = os.path.join(ckpt_dir, model)
    try:
        names = [n for n in os.listdir(folder) if n.startswith("ckpt-") and n.endswith(".json")]
    except FileNotFoundError:
        return 0
    return max((int(n[5:17]) for n in names), default=0)


def _corrupt_newest(ckpt_dir: str, model: str, how: str) -> str:
    folder = os.path.join(ckpt_dir, model)
    newest = sorted(n for n in os.listdir(folder) if n.startswith("ckpt-") and n.endswith(".scinol"))[-1]
    path = os.path.join(folder, newest)
    data = bytearray(open(path, "rb").read())
    if how == "truncate":
        data = data[: len(data) // 2]
    else:  # flip one bit in the middle of the file (inside an array's data)
        data[len(data) // 2] ^= 0x10
    with open(path, "wb") as f:
        f.write(data)
    return path


def _faulted_run(cmd, fault: Fault, rng: random.Random, ckpt_dir: str, work: str, index: int) -> tuple[str, bool]:
    """Run ``scinol run`` until the fault kills it; returns what happened and
    whether the fault hit what it aimed at (a checkpoint write can only be
    hit while there is something left to checkpoint)."""
    marker = os.path.join(work, f"pause-{index}")
    env = {}
    if fault.kind == "kill-in-write":
        env = {"SCINOL_FAULT_PAUSE": f"{fault.point}@{fault.nth}", "SCINOL_FAULT_MARKER": marker}
    with open(os.path.join(work, f"run-{index}.log"), "w") as err:
        proc = start_scinol_run(cmd, env, stderr=err)
        try:
            if fault.kind == "kill-random-time":
                delay = rng.uniform(0.5, 6.0)  # start-up takes ~2 s: before, during and after the work
                alive = not wait_for(lambda: proc.poll() is not None, delay)
                what, hit = f"killed at {delay:.2f} s", True
            elif fault.kind == "kill-after-checkpoint":
                target = rng.randrange(1000, 3000, 500)  # >= 2 checkpoints (every 500): one can be damaged
                hit = wait_for(lambda: _checkpoint_count(ckpt_dir, fault.model) >= target, 45, proc)
                time.sleep(rng.uniform(0.0, 0.2))
                alive = proc.poll() is None
                what = f"killed {'after' if hit else 'WITHOUT'} a checkpoint at >= {target} events"
            elif fault.kind == "kill-in-write":
                hit = wait_for(lambda: os.path.exists(marker), 120, proc)  # first run compiles kernels
                alive = proc.poll() is None
                what = f"killed inside {fault.point} (pass {fault.nth})" if hit else "pause point NOT reached"
            else:
                raise ValueError(fault.kind)
        finally:
            kill9(proc)
    if not alive:
        raise RuntimeError(f"scinol run exited by itself (status {proc.returncode}) before the fault; see "
                           f"{err.name}")
    covered = ", ".join(f"{m} {_checkpoint_count(ckpt_dir, m)}" for m in MODELS)
    temps = sum(n.endswith(".tmp") for m in MODELS if os.path.isdir(os.path.join(ckpt_dir, m))
                for n in os.listdir(os.path.join(ckpt_dir, m)))
    return f"{what}; checkpoints then covered {covered} events; {temps} temp files left", hit


def run_trial(bootstrap: str, name: str, faults: list[Fault], stream: Stream, work: str, seed: int,
              references: dict | None = None) -> TrialResult:
    """One trial on a fresh topic and checkpoint directory under ``work``."""
    rng = random.Random(seed)
    os.makedirs(work, exist_ok=True)
    topic = f"trial-{name}-{seed}-{time.time_ns()}"
    ckpt_dir = os.path.join(work, "ckpt")
    result = TrialResult(name, [str(f) for f in faults])
    start = time.monotonic()
    produce_stream(bootstrap, topic, stream)
    cmd = scinol_run_command(bootstrap, topic, ckpt_dir, *RUN_FLAGS)
    try:
        for i, fault in enumerate(faults):
            if fault.kind == "corrupt-newest":
                folder = os.path.join(ckpt_dir, fault.model)
                written = [n for n in os.listdir(folder) if n.endswith(".scinol")] if os.path.isdir(folder) else []
                if len(written) < 2:
                    raise RuntimeError("corrupt-newest needs two checkpoints of the model; the kill came too early")
                _corrupt_newest(ckpt_dir, fault.model, fault.how)
                result.faults_injected += 1
            else:
                note, hit = _faulted_run(cmd, fault, rng, ckpt_dir, work, i)
                result.notes.append(note)
                result.faults_injected += hit
        final_log = os.path.join(work, "final.log")
        with open(final_log, "w") as err:
            subprocess.run(cmd + ["--bounded"], cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=err,
                           timeout=300)
        with open(final_log) as f:
            result.fallback_warnings = f.read().count("skipping checkpoint")
        _verify_as_written(bootstrap, topic, ckpt_dir, stream, references, result)
    except Exception as exc:  # noqa: BLE001 - a trial reports, the caller asserts
        result.errors.append(f"{type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - start
    return result


def same_state(a, b) -> bool:
    sa, sb = a.state, b.state
    return (set(sa.arrays) == set(sb.arrays) and sa.scalars == sb.scalars
            and all(sa.arrays[k].shape == sb.arrays[k].shape and np.array_equal(sa.arrays[k], sb.arrays[k])
                    for k in sa.arrays))


def _verify_as_written(bootstrap, topic, ckpt_dir, stream: Stream, references: dict | None,
                       result: TrialResult) -> None:
    """:func:`_verify` against the stream as the topic holds it: the pipeline
    learns the topic's order, and a feeder's retry may have moved records
    (noted; ``references``, learned from ``stream``, then do not apply)."""
    written, reordered = _stream_as_written(bootstrap, topic, stream)
    if reordered:
        result.notes.append(f"the feeder's records landed out of order, learned as written: {reordered}")
    if reordered or references is None:
        references = reference_learners(written)
    _verify(bootstrap, topic, ckpt_dir, written, references, result)


def _verify(bootstrap, topic, ckpt_dir, stream: Stream, references: dict, result: TrialResult) -> None:
    predicted = collections.Counter(r["event_id"] for _, _, r in read_topic(bootstrap, topic + ".pred"))
    valid = stream.valid_ids
    result.events = len(valid)
    unpredicted = sorted(valid - set(predicted), key=lambda i: (len(i), i))  # "a-99" before "a-100"
    result.events_lost = len(unpredicted)
    if unpredicted:  # which ones tell a lost batch mid-stream from the last one
        result.notes.append(f"no prediction for {len(unpredicted)} events: {unpredicted[:2]} ... {unpredicted[-2:]}")
    result.duplicate_predictions = sum(predicted.values()) - len(predicted)
    if set(predicted) - valid:
        result.errors.append(f"predictions for unknown events {sorted(set(predicted) - valid)[:3]}")
    store = CheckpointStore(ckpt_dir)
    identical = True
    for model in MODELS:
        final = store.latest(model)
        X, y = stream.data[model]
        labelled = int(np.sum(~np.isnan(y)))
        if final is None:
            result.errors.append(f"model {model}: no checkpoint")
            identical = False
            continue
        surplus = max(0, final.event_count - len(y)) + max(0, final.learner.n_examples - labelled)
        result.events_double_applied += surplus
        result.events_lost += max(0, len(y) - final.event_count)
        identical &= same_state(final.learner, references[model])
    result.models_identical = identical
    dead = {(p, o): r["reason"] for p, o, r in
            ((r["partition"], r["offset"], r) for _, _, r in read_topic(bootstrap, topic + ".dlq"))}
    result.dead_letters = collections.Counter(dead.values())
    result.dead_letters_as_expected = dead == stream.poison


# --------------------------------------------------------------------------- broker faults

def _produce_paced(bootstrap: str, topic: str, stream: Stream, start: int, seconds: float) -> None:
    """Produce each partition's values from ``start`` on, spread over ``seconds``."""
    # (quiet: this client's own reconnect messages during the fault are not the pipeline's)
    # idempotent, as the pipeline's own producer: without it a retry during
    # the fault can reorder or repeat the input, and the learned order with it.
    # One request in flight: with more, a request failed at the crash makes
    # the broker refuse the next ones as out of sequence, and librdkafka then
    # bumps the epoch and sends them again, which once reordered a partition
    # (librdkafka issue #4953 shows the same path repeating records).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "message.max.bytes": 2_000_000,
                         "enable.idempotence": True, "max.in.flight.requests.per.connection": 1,
                         "log_level": 0})
    rows = [(p, v) for i in range(start, max(map(len, stream.values.values())))
            for p, values in stream.values.items() if i < len(values) for v in [values[i]]]
    errors, t0 = [], time.monotonic()
    for k, (p, value) in enumerate(rows):
        ahead = k * seconds / len(rows) - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
        while True:
            try:
                producer.produce(topic, value=value, partition=p, on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0 and not errors, errors[:1]


def _stream_as_written(bootstrap: str, topic: str, stream: Stream) -> tuple[Stream, str | None]:
    """The stream as the topic holds it (see :func:`reorder_stream`)."""
    written = collections.defaultdict(list)
    for p, _, value in read_topic(bootstrap, topic, raw=True):
        written[p].append(value)
    return reorder_stream(stream, written)


def reorder_stream(stream: Stream, written: dict) -> tuple[Stream, str | None]:
    """The stream in the order ``written`` (partition -> values) holds it,
    and a note when that is not the order it was fed in. The pipeline must
    learn what the topic holds, in the topic's order; a broker killed under
    the feeder's idempotent producer has once left a partition with as many
    records as were fed, not in the order fed: the feeder's and the broker's
    doing, not the pipeline's. Records lost, repeated or unknown leave
    nothing to compare with: RuntimeError."""
    if all(list(written.get(p, ())) == list(values) for p, values in stream.values.items()):
        return stream, None
    out, moved = Stream(stream.n_per_model), []
    for p, values in stream.values.items():
        model, have = MODELS[p], list(written.get(p, ()))
        where = {value: k for k, value in enumerate(values)}
        order = [where.get(v, -1) for v in have]
        if sorted(order) != list(range(len(values))):
            raise RuntimeError(f"input partition {p} does not hold the stream fed to it (test harness, not the "
                               f"pipeline): {len(have)} records for {len(values)} produced, "
                               f"{order.count(-1)} unknown")
        poison = {k: reason for (q, k), reason in stream.poison.items() if q == p}
        number = {k: n for n, k in enumerate(k for k in range(len(values)) if k not in poison)}
        events = [number[k] for k in order if k in number]  # the events' numbers in the written order
        X, y = stream.data[model]
        out.data[model] = (X[events], y[events])
        out.events[model] = [stream.events[model][n] for n in events]
        out.poison.update({(p, at): poison[k] for at, k in enumerate(order) if k in poison})
        out.values[p] = have
        first = next((at for at, k in enumerate(order) if at != k), None)
        if first is not None:
            moved.append(f"partition {p} reordered from offset {first}: {order[first:first + 4]}")
    return out, "; ".join(moved)


def run_broker_fault_trial(kind: str, seconds: float, stream: Stream, work: str,
                           extra_flags: tuple = (), broker_kind: str = "tansu") -> TrialResult:
    """``scinol run`` through a broker (``broker_kind``: tansu or kafka) that
    is paused (kind ``sigstop``), whose port refuses connections
    (``refuse``), or that is killed and restarted on its data (``restart``,
    Apache Kafka only: tansu keeps its data in memory) for ``seconds`` while
    events keep coming; it must finish by itself with everything learned
    once."""
    if kind == "restart" and broker_kind != "kafka":
        raise ValueError("a broker restart keeps the data on Apache Kafka only")
    import threading

    from tests.support.faultkit import ProxiedBroker, pause_process

    os.makedirs(work, exist_ok=True)
    what = {"sigstop": "SIGSTOP", "refuse": "port refusing", "restart": "killed and restarted, down"}[kind]
    result = TrialResult(f"broker-{kind}", [f"broker {what} {seconds:.0f} s"])
    start = time.monotonic()
    topic, ckpt_dir = f"broker-{kind}-{time.time_ns()}", os.path.join(work, "ckpt")
    lengths = {len(v) for v in stream.values.values()}
    assert len(lengths) == 1, "the partitions must be equally long (--stop-after)"
    half = lengths.pop() // 2
    try:
        with ProxiedBroker(broker_kind) as broker:
            first = Stream(stream.n_per_model, values={p: v[:half] for p, v in stream.values.items()})
            produce_stream(broker.bootstrap, topic, first)
            cmd = scinol_run_command(broker.bootstrap, topic, ckpt_dir, *RUN_FLAGS, "--stop-after",
                                     str(half * 2), *extra_flags)
            log_path = os.path.join(work, "run.log")
            with open(log_path, "w") as err:
                proc = start_scinol_run(cmd, stderr=err)
                try:
                    if not wait_for(lambda: _checkpoint_count(ckpt_dir, MODELS[0]) >= 500, 120, proc):
                        raise RuntimeError(f"the pipeline did not get going; see {log_path}")
                    # the rest of the events keep coming before, during and after the fault
                    feeder = threading.Thread(target=_produce_paced,
                                              args=(broker.bootstrap, topic, stream, half, seconds + 4))
                    feeder.start()
                    time.sleep(1.0)
                    result.faults_injected = 1
                    if kind == "sigstop":
                        pause_process(broker.pid, seconds)
                    elif kind == "restart":
                        broker.broker.restart(kill=True, down_for=seconds)
                    else:
                        broker.proxy.refuse()
                        assert broker.proxy.refusing()
                        time.sleep(seconds)
                        broker.proxy.accept()
                    feeder.join()
                    proc.wait(timeout=300)
                finally:
                    kill9(proc)
            with open(log_path) as f:
                text = f.read()
            if proc.returncode != 0:  # the log's end in the error: CI keeps no files
                tail = "\n".join(text.splitlines()[-25:])
                raise RuntimeError(f"scinol run failed with status {proc.returncode}; {log_path} ends:\n{tail}")
            reports = text.count("broker trouble") + text.count("has not acknowledged")
            result.notes.append(f"{text.count('broker trouble')} broker-trouble and {text.count('has not acknowledged')}"
                                f" delivery-wait warnings, {text.count('working again')} recoveries reported")
            result.fallback_warnings = reports
            _verify_as_written(broker.bootstrap, topic, ckpt_dir, stream, None, result)
    except Exception as exc:  # noqa: BLE001
        result.errors.append(f"{type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - start
    return result

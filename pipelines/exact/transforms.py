"""The exact-mode pipeline's Beam transforms (DESIGN.md §3).

    Kafka events ─► ReadFromKafka ─► DecodeEvents ─bad─► dead letters ─► <topic>.dlq
                                         │ (model, [(message, event), ...])
                                         ▼
                                   LearnModels (stateful, keyed by model)
                                     │ produces predictions │ checkpoint headers
                                     ▼ (flushed before      ▼
                              predictions topic   each   checkpoint topic (compacted)
                                                checkpoint)

Batches, not records, cross each step. The learner math is in ``learners``;
the per-model bookkeeping in :mod:`pipelines.exact.model_runner`; nothing here is
runner-specific.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import NamedTuple

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow

from learners import make_learner

from pipelines.state.checkpoints import CheckpointStore, checkpoint_record
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, DEFAULT_MAX_MESSAGE_BYTES, dead_letter, screen
from pipelines.exact.model_runner import ModelRunner

log = logging.getLogger(__name__)
NAMESPACE = "scinol"


class Position(NamedTuple):
    """Where an event came from: what a checkpoint's offsets refer to."""

    topic: str
    partition: int
    offset: int


class LearnerConfig(NamedTuple):
    learner: str = "scinol2"
    loss: str = "logistic"
    params: dict = {}
    n_classes: int | None = None
    bias: bool = True
    hash_bits: int = 18
    loss_param: float | None = None

    def make(self):
        return make_learner(self.learner, self.loss, n_classes=self.n_classes, bias=self.bias,
                            hash_bits=self.hash_bits, loss_param=self.loss_param, **self.params)


class DecodeEvents(beam.DoFn):
    """A batch of Kafka messages → per-model batches of valid events; every
    message that is not a valid Event becomes a DeadLetter record (tag
    ``dead``) with its reason, original bytes, topic, partition and offset."""

    DEAD = "dead"

    def __init__(self, loss: str, n_classes: int | None, registry_url: str | None = None, *,
                 max_index: int = DEFAULT_MAX_INDEX, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        self.loss, self.n_classes, self.registry_url = loss, n_classes, registry_url
        self.max_index, self.max_message_bytes = max_index, max_message_bytes  # see pipelines.records.dead_letters

    def setup(self):
        from schemas.codec import Codec, DecodeError, validate_event

        self.codec = Codec(self.registry_url)
        self.decode_error, self.validate = DecodeError, validate_event
        self.events = Metrics.counter(NAMESPACE, "events")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")

    def process(self, batch):
        by_model: dict[str, list] = {}
        for msg in batch:
            event, problem = screen(self.codec, msg.value, self.loss, self.n_classes, max_index=self.max_index,
                                    max_message_bytes=self.max_message_bytes)
            if problem is not None:
                self.dead.inc()
                Metrics.counter(NAMESPACE, f"dead_letters_{problem[0]}").inc()
                yield beam.pvalue.TaggedOutput(self.DEAD, dead_letter(msg, *problem))
                continue
            by_model.setdefault(event["model"], []).append((Position(msg.topic, msg.partition, msg.offset), event))
        self.events.inc(len(batch))
        yield from by_model.items()


class LearnModels(beam.DoFn):
    """Stateful, keyed by model name: one :class:`ModelRunner` per model, so
    each model sees its events in arrival (offset) order. Produces the
    Prediction records to the predictions topic itself, and emits
    ModelCheckpoint headers (tag ``checkpoints``) every N events / T seconds
    and when the input ends.

    The model lives in worker memory; its durability is the checkpoint plus
    the Kafka offsets it covers (DESIGN.md §4): a restarted pipeline resumes
    from there. A checkpoint is written only after the predictions it covers
    are acknowledged by Kafka (flush first), so a crash at any moment loses
    no prediction; predictions made after the last checkpoint are made again
    on restart (at-least-once), updates are applied exactly once."""

    CHECKPOINTS = "checkpoints"
    EVENTS = ReadModifyWriteStateSpec("events", VarIntCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, config: LearnerConfig, checkpoint_dir: str | None, every_events: int | None,
                 every_seconds: float | None, progress_seconds: float | None = 5.0, *, bootstrap: str,
                 predictions_topic: str, kafka_config: dict | None = None, registry_url: str | None = None):
        self.config, self.checkpoint_dir = config, checkpoint_dir
        self.bootstrap, self.predictions_topic = bootstrap, predictions_topic
        self.kafka_config, self.registry_url = dict(kafka_config or {}), registry_url
        self.every_events, self.every_seconds = every_events, every_seconds
        self.progress_seconds = progress_seconds

    def setup(self):
        self.runners: dict[str, ModelRunner] = {}
        self.store = CheckpointStore(self.checkpoint_dir) if self.checkpoint_dir else None
        from schemas.codec import Codec

        from pipelines.kafka.producer import KafkaWriter

        self.codec = Codec(self.registry_url)
        self.writer = KafkaWriter(self.bootstrap, self.predictions_topic, self.kafka_config)
        self.predictions = Metrics.counter(NAMESPACE, "predictions")
        self.started = time.monotonic()
        self.last_report = self.started

    def _runner(self, model: str) -> ModelRunner:
        runner = self.runners.get(model)
        if runner is None:
            runner = self.runners[model] = ModelRunner(model, self.config.make, self.store, self.every_events,
                                                       self.every_seconds)
            if runner.restored_from:
                log.warning("model %r restored from %s (%d events)", model, runner.restored_from, runner.events)
        return runner

    def process(self, element, events=beam.DoFn.StateParam(EVENTS), end=beam.DoFn.TimerParam(END)):
        model, items = element
        runner = self._runner(model)
        predictions = runner.process(items)
        events.write(runner.events)
        end.set(GlobalWindow().max_timestamp())  # fires when the input is done (bounded runs)
        encode = self.codec.encode
        for p in predictions:
            self.writer.produce(encode("scinol.Prediction", p))
        self.predictions.inc(len(predictions))
        if runner.labelled:  # gauges hold integers: parts per million
            Metrics.gauge(NAMESPACE, f"mean_loss_ppm_{model}").set(int(runner.mean_loss * 1e6))
            if runner.accuracy is not None:
                Metrics.gauge(NAMESPACE, f"accuracy_ppm_{model}").set(int(runner.accuracy * 1e6))
        if runner.checkpoint_due():
            yield self._checkpoint(runner)
        self._report()

    def _checkpoint(self, runner: ModelRunner):
        self.writer.flush()  # the predictions the checkpoint covers are in Kafka first
        return beam.pvalue.TaggedOutput(self.CHECKPOINTS, checkpoint_record(runner.checkpoint()))

    def finish_bundle(self):
        self.writer.flush()

    @on_timer(END)
    def at_end(self, key=beam.DoFn.KeyParam):
        runner = self.runners.get(key)
        if runner is not None and self.store is not None and runner.unsaved:
            yield self._checkpoint(runner)
        self._report(force=True)

    def _report(self, force: bool = False):
        """One console line every few seconds: events/s and progressive loss."""
        now = time.monotonic()
        if self.progress_seconds is None or (not force and now - self.last_report < self.progress_seconds):
            return
        self.last_report = now
        total = sum(r.events for r in self.runners.values())
        rate = total / max(now - self.started, 1e-9)
        parts = []
        for name, r in sorted(self.runners.items()):
            acc = "" if r.accuracy is None else f" acc {r.accuracy:.4f}"
            parts.append(f"{name}: {r.events} events, loss {r.mean_loss:.4f}{acc}")
        print(f"[scinol] {rate:,.0f} events/s | " + " | ".join(parts), file=sys.stderr, flush=True)


class EncodeRecords(beam.DoFn):
    """Records → Confluent-framed Avro bytes, batched for the sink; ``key``
    names the field used as the Kafka key (None: no key)."""

    def __init__(self, record_type: str, key: str | None = None, registry_url: str | None = None):
        self.record_type, self.key, self.registry_url = record_type, key, registry_url

    def setup(self):
        from schemas.codec import Codec

        self.codec = Codec(self.registry_url)

    def process(self, record):
        value = self.codec.encode(self.record_type, record)
        yield (record[self.key].encode() if self.key else None, value)

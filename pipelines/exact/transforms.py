"""The exact-mode pipeline's Beam transforms.

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

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow

from pipelines.config import RunConfig
from pipelines.kafka.producer import KafkaWriter
from pipelines.records.predictions import prediction_key
from pipelines.state.checkpoints import CheckpointStore, checkpoint_record
from pipelines.steps import NAMESPACE

from .model_runner import ModelRunner

log = logging.getLogger(__name__)

class LearnModels(beam.DoFn):
    """Stateful, keyed by model name: one :class:`ModelRunner` per model, so
    each model sees its events in arrival (offset) order. Produces the
    Prediction records to the predictions topic itself, and emits
    ModelCheckpoint headers (tag ``checkpoints``) every N events / T seconds
    and when the input ends.

    The model lives in worker memory; its durability is the checkpoint plus
    the Kafka offsets it covers: a restarted pipeline resumes
    from there. A checkpoint is written only after the predictions it covers
    are acknowledged by Kafka (flush first), so a crash at any moment loses
    no prediction; predictions made after the last checkpoint are made again
    on restart (at-least-once), updates are applied exactly once."""

    CHECKPOINTS = "checkpoints"
    EVENTS = ReadModifyWriteStateSpec("events", VarIntCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def setup(self):
        self.runners: dict[str, ModelRunner] = {}
        cfg = self.cfg
        self.store = CheckpointStore(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        self.codec = cfg.codec()
        self.writer = KafkaWriter(cfg.bootstrap, cfg.predictions_topic, cfg.kafka_config)
        self.predictions = Metrics.counter(NAMESPACE, "predictions")
        self.started = time.monotonic()
        self.last_report = self.started

    def _runner(self, model: str) -> ModelRunner:
        runner = self.runners.get(model)
        if runner is None:
            runner = self.runners[model] = ModelRunner(model, self.cfg.learner.make, self.store,
                                                       self.cfg.checkpoint_every, self.cfg.checkpoint_seconds)
            if runner.restored_from:
                log.warning("model %r restored from %s (%d events)", model, runner.restored_from, runner.events)
        return runner

    def process(self, element, events=beam.DoFn.StateParam(EVENTS), end=beam.DoFn.TimerParam(END)):
        model, items = element
        runner = self._runner(model)
        items = runner.fresh(items)
        predictions = runner.process(items)
        events.write(runner.events)
        end.set(GlobalWindow().max_timestamp())  # fires when the input is done (bounded runs)
        encode, topic = self.codec.encode, self.cfg.predictions_topic
        for (position, event), p in zip(items, predictions):
            self.writer.produce(encode("scinol.Prediction", p, topic), prediction_key(event, position))
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

    def teardown(self):
        self.writer.close()

    @on_timer(END)
    def at_end(self, key=beam.DoFn.KeyParam):
        runner = self.runners.get(key)
        if runner is not None and self.store is not None and runner.unsaved:
            yield self._checkpoint(runner)
        self._report(force=True)

    def _report(self, force: bool = False):
        """One console line every few seconds: events/s and progressive loss."""
        now = time.monotonic()
        every = self.cfg.progress_seconds
        if every is None or (not force and now - self.last_report < every):
            return
        self.last_report = now
        total = sum(r.events for r in self.runners.values())
        rate = total / max(now - self.started, 1e-9)
        parts = []
        for name, r in sorted(self.runners.items()):
            acc = "" if r.accuracy is None else f" acc {r.accuracy:.4f}"
            parts.append(f"{name}: {r.events} events, loss {r.mean_loss:.4f}{acc}")
        print(f"[scinol] {rate:,.0f} events/s | " + " | ".join(parts), file=sys.stderr, flush=True)

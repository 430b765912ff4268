"""Sharded mode's combine step, keyed by model: the shards' partial sums
combined in sequence order (:class:`pipelines.sharded.combiner.Combiner`)
into the predictions and the feedback records, and the checkpoint cuts
asked for. Keyed by model, not by event: it owns the model's global scalars
(the trial count t, KT's wealth...), which must advance in sequence order;
the K partial sums of an event meet in its per-event table."""

from __future__ import annotations

import functools
import logging

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines import telemetry
from pipelines.kafka.producer import KafkaWriter
from pipelines.records.feedback import feedback_values
from pipelines.steps import NAMESPACE, KeptCells

from .combiner import Combiner
from .keyed_step import KeyedStep

log = logging.getLogger(__name__)


class CombineStep(KeyedStep, beam.DoFn):
    """Keyed by model: sums the shards' partial sums in sequence order,
    produces the Predictions and the Feedback records itself, and asks for a
    checkpoint cut every N events / T seconds by marking a feedback record.

    Predictions are acknowledged by Kafka before a feedback record that
    marks a checkpoint cut is sent, and at the end of every bundle, so no
    cut (and no runner checkpoint, taken between bundles) covers an event
    whose prediction could still be lost. Other feedback goes out at once:
    a shard that applied it before a crash loses that state too, and the
    run restarts from the last cut."""

    def setup(self):
        super().setup()
        cfg = self.cfg
        self.codec = cfg.codec()
        self.predictions = KafkaWriter(cfg.bootstrap, cfg.predictions_topic, cfg.kafka_config,
                                       count_delivered=False)
        # Feedback is on the critical path of every shard: send at once.
        self.feedback = KafkaWriter(cfg.bootstrap, cfg.feedback, {"linger.ms": 0, **cfg.kafka_config})
        self.predicted = Metrics.counter(NAMESPACE, "predictions")
        self.waited = Metrics.counter(NAMESPACE, "waited_batches")

    def _combiner(self, model: str, cells: KeptCells) -> Combiner:
        combiner = self._stored(model, cells)
        if combiner is None:
            cfg, learner = self.cfg, self.learner
            algo = learner.algorithm
            cut = self.cut(model)
            args = (algo, learner.loss, learner.loss_param, learner.n_outputs, cfg.shards, model, self.run.run_id)
            if cut is not None:
                combiner = Combiner(*args, cut.scalars, cut.seq, cut.learned)
                log.warning("model %r restored from checkpoint cut %s (%d events)", model, cut.path, cut.seq)
            else:
                combiner = Combiner(*args, algo.init_state(0, learner.n_outputs).scalars)
            if cfg.labels_topic:  # a cut made without delayed labels has nothing held
                late = cut is not None and cut.head.get("late_labels")
                combiner.hold_predictions(cut.part("combiner")[1] if late else None)
            self.kept.set(model, combiner)
        return combiner

    def process(self, element, saved=beam.DoFn.StateParam(KeyedStep.STATE),
                generation=beam.DoFn.StateParam(KeyedStep.GENERATION), deltas=beam.DoFn.StateParam(KeyedStep.DELTAS)):
        cells = KeptCells(saved, generation, deltas)
        (model, _salt), part = element
        combiner = self._combiner(model, cells)
        waited = combiner.inbox.waited
        partials = [p for ready in combiner.inbox.offer(part.span, part, part.size) if not ready.is_replay
                    for p in ready.payload.payload]  # each shard's in the order it sent them
        self.waited.inc(combiner.inbox.waited - waited)
        topic = self.cfg.predictions_topic
        runs = combiner.add(partials, encode_for=(self.codec, topic))
        self._keep(model, cells)
        if not runs:
            if combiner.parts:
                self._late_cuts(model, combiner, runs)
            return
        encode = functools.partial(self.codec.encode, "scinol.Prediction", topic=topic)
        for run in runs:
            self.predictions.produce_values(run.encoded(encode), keys=run.keys)
        n = sum(len(run) for run in runs)
        self._telemetry(model, combiner, runs)
        combiner.cadence.since += n
        if combiner.predicted is not None:
            self._late_cuts(model, combiner, runs)
        elif self.store is not None and combiner.cadence.due(self.cfg):
            runs[-1].feedback.checkpoints[-1] = True
            combiner.cadence.restart()
        if any(run.feedback.checkpoints.any() for run in runs):
            self.predictions.flush()  # before the cut's feedback: see the class docstring
        self._send_feedback(model, runs)
        self.predicted.inc(n)
        telemetry.count("predictions", n, model=model)

    @staticmethod
    def _telemetry(model: str, combiner: Combiner, runs) -> None:
        """The prediction latencies and the progressive loss, as exact mode serves them."""
        if not telemetry.serving():
            return
        for run in runs:
            if run.event_ms is not None:
                telemetry.latencies(model, run.event_ms)
        metrics = combiner.metrics
        if metrics.labelled:
            telemetry.gauge("progressive_loss", metrics.mean_loss, model=model)
            if metrics.accuracy is not None:
                telemetry.gauge("progressive_accuracy", metrics.accuracy, model=model)

    def _send_feedback(self, model: str, runs) -> None:
        """One FeedbackBatch message per batch (two or more for a very wide model)."""
        faults = self.run.faults
        columns = [run.feedback.faulted(faults.drop, faults.duplicate) for run in runs]
        for value in feedback_values(columns, self.codec, self.cfg.feedback):
            self.feedback.produce(value, model.encode())
        self.feedback.poll()

    def _late_cuts(self, model: str, combiner: Combiner, runs) -> None:
        """With delayed labels, cuts where the Router asked for them: this
        step's part (the predictions held for labels) is written, then the
        cut's feedback is marked for the shards."""
        Metrics.gauge(NAMESPACE, f"held_predictions_{model}").set(len(combiner.predicted))
        parts, combiner.parts = combiner.parts, []
        if self.store is None or not parts:
            return
        marked = [seq for seq, _ in parts]
        for seq, aux in parts:
            self.store.save_part(model, seq, "combiner", aux, {})
        for run in runs:
            run.feedback.checkpoints[np.isin(run.feedback.seqs, marked)] = True

    def finish_bundle(self):
        self.predictions.flush()
        self.feedback.flush()

    def teardown(self):
        self.predictions.close()
        self.feedback.close()

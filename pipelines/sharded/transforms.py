"""Sharded mode's Beam transforms The protocol itself is in
:mod:`pipelines.sharded.protocol`; this module only routes its messages.

    events topic ─┐                      ┌─► DeadLetters ─► <topic>.dlq (and a record on the feedback topic)
                  ├─► ReadFromKafkaRanges ─► DecodeShardedInput
    feedback topic┘   (one source stage)     │ (model, events | feedback)
          ▲                                  ▼
          │                        RouteEvents (keyed by model): sequence numbers, K slices
          │                                  │ ((model, shard), slices | feedback)
          │                                  ▼
          │                        ShardStep (keyed by model, shard): predict / update
          │                                  │ (model, partial sums)
          │                                  ▼
          └──── Feedback ───────── CombineStep (keyed by model) ─► predictions topic

Both topics are read by one source so that every step is fused with it: on
the FnApiRunner nothing then waits for a fusion break. The
combine step is keyed by model, not by event: it owns the model's global
scalars (the trial count t, KT's wealth...), which must advance in sequence
order; the K partial sums of an event meet in its per-event table.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from pipelines.config import RunConfig
from pipelines.kafka.producer import KafkaWriter
from pipelines.state.cuts import CutStore
from pipelines.steps import NAMESPACE, DecodeEvents
from schemas.codec import DecodeError

from .protocol import Combiner, Router, ShardRunner

log = logging.getLogger(__name__)

EVENTS, FEEDBACK, SLICES = "events", "feedback", "slices"


class FeedbackFaults(NamedTuple):
    """Fault injection for tests and fault trials: sequence numbers whose
    feedback the combine step drops, or sends twice."""

    drop: frozenset = frozenset()
    duplicate: frozenset = frozenset()


class ShardedRun(NamedTuple):
    """What the driver decided for this run: its id (shards ignore other
    runs' feedback) and the checkpoint cut each model restarts from."""

    run_id: str
    resume: dict  # model -> sequence number of the cut to start from
    faults: FeedbackFaults = FeedbackFaults()


class _Sharded:
    """What the three sharded steps share: the run's config and cut store."""

    def __init__(self, cfg: RunConfig, run: ShardedRun):
        self.cfg, self.run = cfg, run

    def setup(self):
        self.store = CutStore(self.cfg.checkpoint_dir, source=self.cfg.source) if self.cfg.checkpoint_dir else None

    def cut(self, model: str):
        """The cut ``model`` restarts from: the driver chose and verified it at
        start (newer ones this run writes are not it); None: start fresh."""
        seq = self.run.resume.get(model)
        if self.store is None or seq is None:
            return None
        return self.store.at(model, seq, self.cfg.shards)


def skip_record(run_id: str, partition: int, offset: int) -> dict:
    """The feedback topic's record for an event that has no model sequence
    place (a dead letter, or one learned before a restart): it tells a
    bounded run's feedback reader that the event is accounted for."""
    return {"event_id": "", "model": "", "run_id": run_id, "seq": -1, "partition": partition, "offset": offset,
            "g": [], "scalars": {}, "checkpoint": False}


class DecodeShardedInput(DecodeEvents):
    """Batches from both topics → (model, (EVENTS, [(Position, event)...]))
    or (model, (FEEDBACK, [record...])); bad events to the ``dead`` tag."""

    def process(self, batch):
        if batch and batch[0].topic == self.cfg.feedback:
            by_model: dict[str, list] = {}
            for msg in batch:
                try:
                    rec = self.codec.decode(msg.value, expected="scinol.Feedback")
                except DecodeError as exc:
                    Metrics.counter(NAMESPACE, "feedback_undecodable").inc()
                    log.warning("feedback topic %s[%d] offset %d: %s; ignored", msg.topic, msg.partition,
                                msg.offset, exc)
                    continue
                if rec["model"]:
                    by_model.setdefault(rec["model"], []).append(rec)
            for model, records in by_model.items():
                yield model, (FEEDBACK, records)
            return
        for out in super().process(batch):
            yield out if isinstance(out, beam.pvalue.TaggedOutput) else (out[0], (EVENTS, out[1]))


class RouteEvents(_Sharded, beam.DoFn):
    """Keyed by model: numbers the events, splits them over the shards, and
    forwards this run's feedback to every shard of the model."""

    ROUTED = ReadModifyWriteStateSpec("routed", VarIntCoder())

    def setup(self):
        super().setup()
        self.routers: dict[str, Router] = {}
        self.skips = None
        self.foreign = Metrics.counter(NAMESPACE, "feedback_other_runs")

    def _router(self, model: str) -> Router:
        router = self.routers.get(model)
        if router is None:
            learner = self.cfg.learner.make()
            cut = self.cut(model)
            router = self.routers[model] = Router(self.cfg.shards, learner.hasher, learner.bias,
                                                  cut.seq if cut else 0, cut.offsets if cut else None,
                                                  interactions=learner.interactions)
        return router

    def process(self, element, routed=beam.DoFn.StateParam(ROUTED)):
        model, (kind, payload) = element
        if kind == FEEDBACK:
            mine = [r for r in payload if r["run_id"] == self.run.run_id]
            if len(mine) < len(payload):
                self.foreign.inc(len(payload) - len(mine))
            if mine:
                for s in range(self.cfg.shards):
                    yield (model, s), (FEEDBACK, mine)
            return
        router = self._router(model)
        per_shard, skipped = router.route(payload)
        if skipped:
            self._skip(skipped)
        routed.write(router.seq)
        for s, slices in enumerate(per_shard):
            if slices:
                yield (model, s), (SLICES, slices)

    def _skip(self, positions) -> None:
        if self.skips is None:
            self.skips = (KafkaWriter(self.cfg.bootstrap, self.cfg.feedback, self.cfg.kafka_config),
                          self.cfg.codec())
        writer, codec = self.skips
        for pos in positions:
            record = skip_record(self.run.run_id, pos.partition, pos.offset)
            writer.produce(codec.encode("scinol.Feedback", record, self.cfg.feedback))

    def finish_bundle(self):
        if self.skips is not None:
            self.skips[0].flush()

    def teardown(self):
        if self.skips is not None:
            self.skips[0].close()


class ShardStep(_Sharded, beam.DoFn):
    """Keyed by (model, shard): one :class:`ShardRunner` each. Writes its
    part of a checkpoint cut when it has applied the feedback marked for
    one. Feedback awaited longer than the feedback timeout is given up
    (reported) when the feedback reader's heartbeat comes, so a lost record
    never stalls the shard.

    (No timers: on the FnApiRunner a watermark timer in a stage fused with
    the source fires after every bundle, and a processing-time timer still
    pending fails the run when it ends; the feedback reader's control
    records do both jobs, on every runner.)"""

    APPLIED = ReadModifyWriteStateSpec("applied", VarIntCoder())

    def setup(self):
        super().setup()
        self.runners: dict[tuple, ShardRunner] = {}
        self.duplicates = Metrics.counter(NAMESPACE, "feedback_duplicates")
        self.missing = Metrics.counter(NAMESPACE, "feedback_missing")

    def _runner(self, key) -> ShardRunner:
        runner = self.runners.get(key)
        if runner is None:
            cfg, (model, s) = self.cfg, key
            learner = cfg.learner.make()
            algo = learner.algorithm
            cut = self.cut(model)
            if cut is not None:
                coords, state, _ = cut.shard(s)
                runner = ShardRunner(algo, learner.n_outputs, s, cfg.max_staleness, state.scalars, state, coords,
                                     cut.seq, cut.offsets if s == 0 else None, cut.learned, cfg.feedback_timeout)
            else:
                scalars = algo.init_state(0, learner.n_outputs).scalars
                runner = ShardRunner(algo, learner.n_outputs, s, cfg.max_staleness, scalars,
                                     feedback_timeout=cfg.feedback_timeout)
            self.runners[key] = runner
        return runner

    def process(self, element, applied=beam.DoFn.StateParam(APPLIED)):
        key, (kind, payload) = element
        runner = self._runner(key)
        dup, miss = runner.duplicates, len(runner.missing)
        if kind == SLICES:
            partials = runner.add(payload)
        else:
            partials = runner.feedback(payload, on_cut=lambda seq: self._save(key, runner, seq))
        if runner.duplicates > dup:
            self.duplicates.inc(runner.duplicates - dup)
        if len(runner.missing) > miss:
            self.missing.inc(len(runner.missing) - miss)
        applied.write(runner.applied)
        if partials:
            yield key[0], partials

    def _save(self, key, runner: ShardRunner, seq: int) -> None:
        if self.store is None:
            return
        model, s = key
        coords, state, header = runner.part()
        self.store.save_shard(model, seq, s, self.cfg.shards, coords, state,
                              {**header, **self.cfg.learner.make().header()})


class CombineStep(_Sharded, beam.DoFn):
    """Keyed by model: sums the shards' partial sums in sequence order,
    produces the Predictions and the Feedback records itself, and asks for a
    checkpoint cut every N events / T seconds by marking a feedback record.

    Each batch's predictions are acknowledged by Kafka before its feedback
    is sent, so no shard applies an update (and no cut covers an event)
    whose prediction could still be lost."""

    COMBINED = ReadModifyWriteStateSpec("combined", VarIntCoder())

    def setup(self):
        super().setup()
        cfg = self.cfg
        self.codec = cfg.codec()
        self.predictions = KafkaWriter(cfg.bootstrap, cfg.predictions_topic, cfg.kafka_config)
        # Feedback is on the critical path of every shard: send at once.
        self.feedback = KafkaWriter(cfg.bootstrap, cfg.feedback, {"linger.ms": 0, **cfg.kafka_config})
        self.combiners: dict[str, Combiner] = {}
        self.since_cut: dict[str, int] = {}
        self.last_cut: dict[str, float] = {}
        self.predicted = Metrics.counter(NAMESPACE, "predictions")

    def _combiner(self, model: str) -> Combiner:
        combiner = self.combiners.get(model)
        if combiner is None:
            cfg = self.cfg
            learner = cfg.learner.make()
            algo = learner.algorithm
            cut = self.cut(model)
            args = (algo, learner.loss, learner.loss_param, learner.n_outputs, cfg.shards, model, self.run.run_id)
            if cut is not None:
                combiner = Combiner(*args, cut.scalars, cut.seq, cut.learned)
                log.warning("model %r restored from checkpoint cut %s (%d events)", model, cut.path, cut.seq)
            else:
                combiner = Combiner(*args, algo.init_state(0, learner.n_outputs).scalars)
            self.combiners[model] = combiner
            self.since_cut[model] = 0
            self.last_cut[model] = time.monotonic()
        return combiner

    def process(self, element, combined=beam.DoFn.StateParam(COMBINED)):
        model, partials = element
        combiner = self._combiner(model)
        done = combiner.add(partials)
        if not done:
            return
        encode, topic = self.codec.encode, self.cfg.predictions_topic
        for d in done:
            self.predictions.produce(encode("scinol.Prediction", d.prediction, topic), d.key)
        self.predictions.flush()
        self.since_cut[model] += len(done)
        if self._cut_due(model):
            done[-1].feedback["checkpoint"] = True
            self.since_cut[model] = 0
            self.last_cut[model] = time.monotonic()
        self._send_feedback(model, done)
        self.predicted.inc(len(done))
        combined.write(combiner.seq)

    def _send_feedback(self, model: str, done) -> None:
        key, faults, encode, topic = model.encode(), self.run.faults, self.codec.encode, self.cfg.feedback
        for d in done:
            seq = d.feedback["seq"]
            if seq in faults.drop:
                continue
            value = encode("scinol.Feedback", d.feedback, topic)
            self.feedback.produce(value, key)
            if seq in faults.duplicate:
                self.feedback.produce(value, key)
        self.feedback.poll()

    def _cut_due(self, model: str) -> bool:
        cfg = self.cfg
        if self.store is None:
            return False
        if cfg.checkpoint_every and self.since_cut[model] >= cfg.checkpoint_every:
            return True
        return bool(cfg.checkpoint_seconds) and time.monotonic() - self.last_cut[model] >= cfg.checkpoint_seconds

    def finish_bundle(self):
        self.predictions.flush()
        self.feedback.flush()

    def teardown(self):
        self.predictions.close()
        self.feedback.close()

"""Sharded mode's Beam transforms (DESIGN.md §3). The protocol itself is in
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
the FnApiRunner nothing then waits for a fusion break (DESIGN §3). The
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

from pipelines.state.cuts import CutStore
from pipelines.sharded.protocol import Combiner, Router, ShardRunner
from pipelines.exact.transforms import NAMESPACE, DecodeEvents, LearnerConfig

log = logging.getLogger(__name__)

EVENTS, FEEDBACK, SLICES = "events", "feedback", "slices"


class FeedbackFaults(NamedTuple):
    """Fault injection for tests and fault trials: sequence numbers whose
    feedback the combine step drops, or sends twice."""

    drop: frozenset = frozenset()
    duplicate: frozenset = frozenset()


class ShardedConfig(NamedTuple):
    learner: LearnerConfig
    n_shards: int
    staleness: int
    run_id: str
    bootstrap: str
    predictions_topic: str
    feedback_topic: str
    feedback_timeout: float = 30.0
    checkpoint_dir: str | None = None
    every_events: int | None = None
    every_seconds: float | None = None
    resume: dict = {}  # model -> sequence number of the cut to start from
    kafka_config: dict = {}
    registry_url: str | None = None
    faults: FeedbackFaults = FeedbackFaults()

    def store(self) -> CutStore | None:
        return CutStore(self.checkpoint_dir) if self.checkpoint_dir else None

    def cut(self, store, model: str):
        seq = self.resume.get(model)
        if store is None or seq is None:
            return None
        # The driver chose and verified this cut at start; newer ones this run writes are not it.
        return store.at(model, seq, self.n_shards)


def skip_record(run_id: str, partition: int, offset: int) -> dict:
    """The feedback topic's record for an event that has no model sequence
    place (a dead letter, or one learned before a restart): it tells a
    bounded run's feedback reader that the event is accounted for."""
    return {"event_id": "", "model": "", "run_id": run_id, "seq": -1, "partition": partition, "offset": offset,
            "g": [], "scalars": {}, "checkpoint": False}


class DecodeShardedInput(DecodeEvents):
    """Batches from both topics → (model, (EVENTS, [(Position, event)...]))
    or (model, (FEEDBACK, [record...])); bad events to the ``dead`` tag."""

    def __init__(self, loss, n_classes, feedback_topic: str, registry_url=None, **limits):
        super().__init__(loss, n_classes, registry_url, **limits)
        self.feedback_topic = feedback_topic

    def process(self, batch):
        if batch and batch[0].topic == self.feedback_topic:
            by_model: dict[str, list] = {}
            for msg in batch:
                try:
                    rec = self.codec.decode(msg.value, expected="scinol.Feedback")
                except self.decode_error as exc:
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


class RouteEvents(beam.DoFn):
    """Keyed by model: numbers the events, splits them over the shards, and
    forwards this run's feedback to every shard of the model."""

    ROUTED = ReadModifyWriteStateSpec("routed", VarIntCoder())

    def __init__(self, config: ShardedConfig):
        self.config = config

    def setup(self):
        self.routers: dict[str, Router] = {}
        self.store = self.config.store()
        self.skips = None
        self.foreign = Metrics.counter(NAMESPACE, "feedback_other_runs")

    def _router(self, model: str) -> Router:
        router = self.routers.get(model)
        if router is None:
            learner = self.config.learner.make()
            cut = self.config.cut(self.store, model)
            router = self.routers[model] = Router(self.config.n_shards, learner.hasher, learner.bias,
                                                  cut.seq if cut else 0, cut.offsets if cut else None)
        return router

    def process(self, element, routed=beam.DoFn.StateParam(ROUTED)):
        model, (kind, payload) = element
        k = self.config.n_shards
        if kind == FEEDBACK:
            mine = [r for r in payload if r["run_id"] == self.config.run_id]
            if len(mine) < len(payload):
                self.foreign.inc(len(payload) - len(mine))
            if mine:
                for s in range(k):
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
        from schemas.codec import Codec

        from pipelines.kafka.producer import KafkaWriter

        if self.skips is None:
            self.skips = (KafkaWriter(self.config.bootstrap, self.config.feedback_topic, self.config.kafka_config),
                          Codec(self.config.registry_url))
        writer, codec = self.skips
        for pos in positions:
            writer.produce(codec.encode("scinol.Feedback", skip_record(self.config.run_id, pos.partition, pos.offset)))

    def finish_bundle(self):
        if self.skips is not None:
            self.skips[0].flush()


class ShardStep(beam.DoFn):
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

    def __init__(self, config: ShardedConfig):
        self.config = config

    def setup(self):
        self.runners: dict[tuple, ShardRunner] = {}
        self.store = self.config.store()
        self.duplicates = Metrics.counter(NAMESPACE, "feedback_duplicates")
        self.missing = Metrics.counter(NAMESPACE, "feedback_missing")

    def _runner(self, key) -> ShardRunner:
        runner = self.runners.get(key)
        if runner is None:
            cfg = self.config
            model, s = key
            learner = cfg.learner.make()
            algo = learner.algorithm
            cut = cfg.cut(self.store, model)
            if cut is not None:
                coords, state, _ = cut.shard(s)
                runner = ShardRunner(algo, learner.n_outputs, s, cfg.staleness, state.scalars, state, coords,
                                     cut.seq, cut.offsets if s == 0 else None, cut.learned, cfg.feedback_timeout)
            else:
                scalars = algo.init_state(0, learner.n_outputs).scalars
                runner = ShardRunner(algo, learner.n_outputs, s, cfg.staleness, scalars,
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
        self.store.save_shard(model, seq, s, self.config.n_shards, coords, state,
                              {**header, **self.config.learner.make().header()})


class CombineStep(beam.DoFn):
    """Keyed by model: sums the shards' partial sums in sequence order,
    produces the Predictions and the Feedback records itself, and asks for a
    checkpoint cut every N events / T seconds by marking a feedback record.

    Each batch's predictions are acknowledged by Kafka before its feedback
    is sent, so no shard applies an update (and no cut covers an event)
    whose prediction could still be lost."""

    COMBINED = ReadModifyWriteStateSpec("combined", VarIntCoder())

    def __init__(self, config: ShardedConfig):
        self.config = config

    def setup(self):
        from schemas.codec import Codec

        from pipelines.kafka.producer import KafkaWriter

        cfg = self.config
        self.codec = Codec(cfg.registry_url)
        self.predictions = KafkaWriter(cfg.bootstrap, cfg.predictions_topic, cfg.kafka_config)
        # Feedback is on the critical path of every shard: send at once.
        self.feedback = KafkaWriter(cfg.bootstrap, cfg.feedback_topic, {"linger.ms": 0, **cfg.kafka_config})
        self.store = cfg.store()
        self.combiners: dict[str, Combiner] = {}
        self.since_cut: dict[str, int] = {}
        self.last_cut: dict[str, float] = {}
        self.predicted = Metrics.counter(NAMESPACE, "predictions")

    def _combiner(self, model: str) -> Combiner:
        combiner = self.combiners.get(model)
        if combiner is None:
            cfg = self.config
            learner = cfg.learner.make()
            algo = learner.algorithm
            cut = cfg.cut(self.store, model)
            if cut is not None:
                combiner = Combiner(algo, learner.loss, learner.loss_param, learner.n_outputs, cfg.n_shards, model,
                                    cfg.run_id, cut.scalars, cut.seq, cut.learned)
                log.warning("model %r restored from checkpoint cut %s (%d events)", model, cut.path, cut.seq)
            else:
                combiner = Combiner(algo, learner.loss, learner.loss_param, learner.n_outputs, cfg.n_shards, model,
                                    cfg.run_id, algo.init_state(0, learner.n_outputs).scalars)
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
        encode, faults = self.codec.encode, self.config.faults
        for d in done:
            self.predictions.produce(encode("scinol.Prediction", d.prediction))
        self.predictions.flush()
        self.since_cut[model] += len(done)
        if self._cut_due(model):
            done[-1].feedback["checkpoint"] = True
            self.since_cut[model] = 0
            self.last_cut[model] = time.monotonic()
        key = model.encode()
        for d in done:
            seq = d.feedback["seq"]
            if seq in faults.drop:
                continue
            value = encode("scinol.Feedback", d.feedback)
            self.feedback.produce(value, key)
            if seq in faults.duplicate:
                self.feedback.produce(value, key)
        self.feedback.producer.poll(0)
        self.predicted.inc(len(done))
        combined.write(combiner.seq)

    def _cut_due(self, model: str) -> bool:
        cfg = self.config
        if self.store is None:
            return False
        if cfg.every_events and self.since_cut[model] >= cfg.every_events:
            return True
        return bool(cfg.every_seconds) and time.monotonic() - self.last_cut[model] >= cfg.every_seconds

    def finish_bundle(self):
        self.predictions.flush()
        self.feedback.flush()

"""Sharded mode's Beam transforms. The protocol itself is in
:mod:`pipelines.sharded` (router, shard, combiner); this module only routes its messages.

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

With delayed labels (``--labels-topic``) the labels topic is read by the
same source; the route step joins each label to its waiting event
(:class:`pipelines.sharded.router.Router`), writes unusable labels to the
dead-letter topic itself, and decides the checkpoint cuts (see
:data:`pipelines.state.cuts.LATE_PARTS`).

Both topics are read by one source so that every step is fused with it: on
the FnApiRunner nothing then waits for a fusion break. The
combine step is keyed by model, not by event: it owns the model's global
scalars (the trial count t, KT's wealth...), which must advance in sequence
order; the K partial sums of an event meet in its per-event table.
"""

from __future__ import annotations

import functools
import logging
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.coders import VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec

from pipelines import telemetry
from pipelines.config import RunConfig
from pipelines.kafka.producer import KafkaWriter
from pipelines.records.dead_letters import dead_letter_message
from pipelines.records.feedback import FeedbackReader, end_markers, feedback_values
from pipelines.records.labels import PendingStore
from pipelines.state.cuts import CutStore
from pipelines.records.parts import EVENTS, FEEDBACK, LABELS, Decoded, Part
from pipelines.steps import NAMESPACE, DecodeEvents, KeptAsDeltas, KeptCells, KeptCoder, placement, span_of
from schemas.codec import DecodeError

from . import state_classes
from .combiner import Combiner
from .messages import PARTIALS, SLICES, Partials, label_partition
from .router import Router
from .shard import ShardRunner

log = logging.getLogger(__name__)



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
    """What the three sharded steps share: the run's config and cut store,
    and their per-key objects (Router, ShardRunner, Combiner) kept in the
    key's Beam state, so that a runner which snapshots state with the
    source's position (Flink) restores them with it after a failover. They
    are pickled once per bundle, except the learner's compiled algorithm
    and feature hasher, which are made again from the configuration; a
    shard's per-coordinate arrays as the rows the bundle changed
    (:mod:`pipelines.steps.row_deltas`). On the
    DirectRunner, whose state lasts one run, they stay in memory only: the
    pickling would cost more than half of its speed (measured at staleness
    64: 1,600 → 700 events/s) for nothing."""

    STATE = ReadModifyWriteStateSpec("kept", KeptCoder())
    GENERATION = ReadModifyWriteStateSpec("generation", VarIntCoder())
    DELTAS = BagStateSpec("deltas", KeptCoder())

    def __init__(self, cfg: RunConfig, run: ShardedRun):
        self.cfg, self.run = cfg, run

    def setup(self):
        self.store = CutStore(self.cfg.checkpoint_dir, source=self.cfg.source) if self.cfg.checkpoint_dir else None
        self.learner = self.cfg.learner.make()
        self.shared = {"algorithm": self.learner.algorithm, "hasher": self.learner.hasher}
        self.kept = KeptAsDeltas(self.shared, state_classes())
        self.place = placement(self.cfg)
        self.in_state = self.cfg.runner_restores_state()

    def start_bundle(self):
        self.kept.start_bundle()

    def _stored(self, key, cells: KeptCells):
        """This key's object if it is current in memory or in the state
        store; else None: the caller makes it."""
        if not self.in_state:
            return self.kept.live.get(key)
        value, restored = self.kept.read(key, cells)
        if restored:
            self._restored(key, value)
            self.kept.set(key, value)
        return value

    def _restored(self, key, value) -> None:
        """Called once with an object read back from the state store."""
        log.warning("%s %r restored from the runner's state", type(value).__name__, key)

    def _keep(self, key, cells: KeptCells, approx_bytes: int = 1 << 16) -> None:
        if self.in_state:
            self.kept.keep_deltas(key, cells, approx_bytes)

    def cut(self, model: str):
        """The cut ``model`` restarts from: the driver chose and verified it at
        start (newer ones this run writes are not it); None: start fresh."""
        seq = self.run.resume.get(model)
        if self.store is None or seq is None:
            return None
        return self.store.at(model, seq, self.cfg.shards)


def skip_position(cfg: RunConfig, topic: str, partition: int) -> int:
    """The partition a skip record names: labels-topic partitions coded apart
    from the events topic's (:func:`pipelines.sharded.messages.label_partition`)."""
    return label_partition(partition) if cfg.labels_topic and topic == cfg.labels_topic else partition


def skip_record(run_id: str, partition: int, offset: int) -> dict:
    """The feedback topic's record for an event that has no model sequence
    place (a dead letter, or one learned before a restart): it tells a
    bounded run's feedback reader that the event is accounted for."""
    return {"event_id": "", "model": "", "run_id": run_id, "seq": -1, "partition": partition, "offset": offset,
            "g": [], "scalars": {}, "checkpoint": False}


class DecodeShardedInput(DecodeEvents):
    """Batches from the events, labels and feedback topics →
    ``((topic, partition), Decoded)``: each model's part (events, labels, or
    its FeedbackBatch records as (offset, FeedbackColumns) pairs; the
    records of events with no sequence place, model "", are no model's);
    bad events and labels to the ``dead`` tag."""

    def setup(self):
        super().setup()
        self.feedback_reader = FeedbackReader(self.codec)

    def process(self, batch):
        if not batch or batch[0].topic != self.cfg.feedback:
            yield from super().process(batch)
            return
        by_model: dict[str, list] = {}
        for msg in batch:
            try:
                part = self.feedback_reader.columns(msg.value)
            except DecodeError as exc:
                Metrics.counter(NAMESPACE, "feedback_undecodable").inc()
                log.warning("feedback topic %s[%d] offset %d: %s; ignored", msg.topic, msg.partition,
                            msg.offset, exc)
                continue
            if part.model:
                by_model.setdefault(part.model, []).append((msg.offset, part))
        span = span_of(batch)
        yield span.stream, Decoded(span, [(model, Part(span, FEEDBACK, records)) for model, records in by_model.items()])


class RouteEvents(_Sharded, beam.DoFn):
    """Keyed by model: numbers the events, splits them over the shards, and
    forwards this run's feedback to every shard of the model."""

    def setup(self):
        super().setup()
        self.skips = None
        self.dlq: KafkaWriter | None = None
        self.foreign = Metrics.counter(NAMESPACE, "feedback_other_runs")
        self.replayed = Metrics.counter(NAMESPACE, "replayed_batches")
        self.waited = Metrics.counter(NAMESPACE, "waited_batches")

    def _router(self, model: str, cells: KeptCells) -> Router:
        router = self._stored(model, cells)
        if router is None:
            cfg, learner = self.cfg, self.learner
            cut = self.cut(model)
            pending = PendingStore(cfg.label_ttl * 1000.0, cfg.max_pending) if cfg.labels_topic else None
            router = Router(cfg.shards, learner.hasher, learner.bias, cut.seq if cut else 0,
                            cut.offsets if cut else None, interactions=learner.interactions, pending=pending,
                            max_waiting=cfg.max_waiting)
            if cut is not None and pending is not None and cut.head.get("late_labels"):
                router.restore(*cut.part("router"), cfg.labels_topic)
            elif cut is not None and cut.head.get("late_labels"):
                log.warning("model %r: checkpoint cut %s holds events waiting for labels, but this run has no "
                            "--labels-topic: they are not restored", model, cut.path)
            self.kept.set(model, router)
        return router

    def process(self, element, saved=beam.DoFn.StateParam(_Sharded.STATE),
                generation=beam.DoFn.StateParam(_Sharded.GENERATION), deltas=beam.DoFn.StateParam(_Sharded.DELTAS)):
        cells = KeptCells(saved, generation, deltas)
        (model, _salt), part = element
        router = self._router(model, cells)
        replayed, waited = router.chain.replayed, router.chain.waited
        ready, skipped = router.take(part)
        self.replayed.inc(router.chain.replayed - replayed)
        self.waited.inc(router.chain.waited - waited)
        if skipped:
            self._skip(skipped)
        for part in ready:
            for s, kind, payload in self._route(model, router, part, cells):
                yield self.place.shard(model, s), router.outbox.stamp(kind, payload, s)
        self._keep(model, cells)

    def _route(self, model: str, router: Router, part: Part, cells: KeptCells):
        """(shard, kind, payload) for each shard of one part that is in order."""
        if part.kind == FEEDBACK:
            payload = [cols for _, cols in part.payload]
            mine = [cols for cols in payload if cols.run_id == self.run.run_id]
            if len(mine) < len(payload):
                self.foreign.inc(sum(cols.n for cols in payload if cols.run_id != self.run.run_id))
            if mine and self.cfg.labels_topic and end_markers(mine):
                self._end_cut(model, cells)
            if mine:
                yield from ((s, FEEDBACK, mine) for s in range(self.cfg.shards))
            return
        if part.kind == LABELS:
            per_shard, dead, unrouted = router.route_labels(part.payload)
            self._dead_letters(dead)
            if unrouted:
                self._skip(unrouted)
        elif part.kind == EVENTS:
            per_shard = router.route(part.payload)
        else:  # SKIP: nothing of this model in those offsets
            return
        if router.pending is not None:
            self._dead_letters(router.dropped_labels())  # labels the events topic moved past
            self._late_labels(model, router, per_shard)
        yield from ((s, SLICES, slices) for s, slices in enumerate(per_shard) if slices)

    def _late_labels(self, model: str, router: Router, per_shard) -> None:
        """With delayed labels the Router asks for the checkpoint cuts (every
        N events / T seconds, as the combine step does without them): its
        waiting events are then saved exactly at the cut's event."""
        pending = router.pending
        Metrics.gauge(NAMESPACE, f"pending_events_{model}").set(len(pending.events))
        Metrics.gauge(NAMESPACE, f"pending_labels_{model}").set(len(pending.labels))
        Metrics.gauge(NAMESPACE, f"pending_expired_{model}").set(pending.expired_events)
        router.cadence.since += sum(block.n for block in per_shard[0])
        if self.store is None or not per_shard[0] or not router.cadence.due(self.cfg):
            return
        self._flush()  # the dead letters and skips the cut's offsets cover are in Kafka first
        part = router.mark_cut(per_shard)
        aux = part.pop("aux")
        self.store.save_part(model, part["seq"], "router", aux, part)
        router.cadence.restart()

    def _end_cut(self, model: str, cells: KeptCells) -> None:
        """The feedback reader's end marker: the shards write a last cut at
        the last event; the Router's part of it is its state now."""
        router = self._stored(model, cells)
        if self.store is None or router is None:
            return
        self._flush()
        part = router.part()
        aux = part.pop("aux")
        self.store.save_part(model, part["seq"], "router", aux, part)

    def _dead_letters(self, records: list[dict]) -> None:
        if not records:
            return
        if self.dlq is None:
            self.dlq = KafkaWriter(self.cfg.bootstrap, self.cfg.dlq_topic, self.cfg.kafka_config)
        codec = self._codec()
        for record in records:
            self.dlq.produce_message(dead_letter_message(
                record, codec.encode("scinol.DeadLetter", record, self.cfg.dlq_topic)))
        Metrics.counter(NAMESPACE, "dead_letters").inc(len(records))
        for record in records:
            telemetry.count("dead_letters", reason=record["reason"])

    def _codec(self):
        if self.skips is None:
            self.skips = (KafkaWriter(self.cfg.bootstrap, self.cfg.feedback, self.cfg.kafka_config),
                          self.cfg.codec())
        return self.skips[1]

    def _skip(self, positions) -> None:
        codec = self._codec()
        records = [skip_record(self.run.run_id, skip_position(self.cfg, pos.topic, pos.partition), pos.offset)
                   for pos in positions]
        for value in feedback_values(records, codec, self.cfg.feedback):
            self.skips[0].produce(value)

    def _flush(self):
        if self.skips is not None:
            self.skips[0].flush()
        if self.dlq is not None:
            self.dlq.flush()

    def finish_bundle(self):
        self._flush()

    def teardown(self):
        if self.skips is not None:
            self.skips[0].close()
        if self.dlq is not None:
            self.dlq.close()


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

    def setup(self):
        super().setup()
        self.duplicates = Metrics.counter(NAMESPACE, "feedback_duplicates")
        self.missing = Metrics.counter(NAMESPACE, "feedback_missing")
        self.waited = Metrics.counter(NAMESPACE, "waited_batches")

    def _runner(self, key, cells: KeptCells) -> ShardRunner:
        runner = self._stored(key, cells)
        if runner is None:
            cfg, (model, s) = self.cfg, key
            learner = self.learner
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
            self.kept.set(key, runner)
        return runner

    def _restored(self, key, runner: ShardRunner) -> None:
        super()._restored(key, runner)
        runner.restart_clocks()

    def process(self, element, saved=beam.DoFn.StateParam(_Sharded.STATE),
                generation=beam.DoFn.StateParam(_Sharded.GENERATION), deltas=beam.DoFn.StateParam(_Sharded.DELTAS)):
        cells = KeptCells(saved, generation, deltas)
        (key, _salt), part = element
        runner = self._runner(key, cells)
        dup, miss, waited = runner.duplicates, len(runner.missing), runner.inbox.waited
        partials = []
        for ready in runner.inbox.offer(part.span, part, part.size):  # in the order the route step sent them
            if not ready.is_replay:
                partials += self._apply(key, runner, ready.payload)
        self.waited.inc(runner.inbox.waited - waited)
        if runner.duplicates > dup:
            self.duplicates.inc(runner.duplicates - dup)
        if len(runner.missing) > miss:
            self.missing.inc(len(runner.missing) - miss)
        self._keep(key, cells, runner.approx_bytes())
        if partials:
            yield self.place.model(key[0]), runner.outbox.stamp(PARTIALS, partials, key[1])

    def _apply(self, key, runner: ShardRunner, part: Part) -> list[Partials]:
        if part.kind == SLICES:
            return runner.add(part.payload)
        partials = runner.feedback(part.payload, on_cut=lambda seq: self._save(key, runner, seq))
        if self.cfg.labels_topic and key[1] == 0 and end_markers(part.payload):
            # the combine step writes its part of the last cut too
            partials = partials + [Partials(runner.applied, -1, np.empty((0, 0)), None)]
        return partials

    def _save(self, key, runner: ShardRunner, seq: int) -> None:
        if self.store is None:
            return
        model, s = key
        coords, state, header = runner.part()
        late = {"late_labels": True} if self.cfg.labels_topic else {}
        self.store.save_shard(model, seq, s, self.cfg.shards, coords, state,
                              {**header, **late, **self.learner.header()})
        telemetry.checkpoint_written(model, seq)  # this shard's part of the cut at event ``seq``


class CombineStep(_Sharded, beam.DoFn):
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

    def process(self, element, saved=beam.DoFn.StateParam(_Sharded.STATE),
                generation=beam.DoFn.StateParam(_Sharded.GENERATION), deltas=beam.DoFn.StateParam(_Sharded.DELTAS)):
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

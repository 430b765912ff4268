"""Sharded mode's route step, keyed by model: numbers each model's events
and splits them over the shards (:class:`pipelines.sharded.router.Router`),
forwards this run's feedback to every shard, and writes what has no
sequence place (dead letters, skip records on the feedback topic). With
delayed labels (``--labels-topic``) it joins each label to its waiting
event, writes unusable labels to the dead-letter topic itself, and decides
the checkpoint cuts (see :data:`pipelines.state.cuts.LATE_PARTS`)."""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines import telemetry
from pipelines.config import RunConfig
from pipelines.kafka.producer import KafkaWriter
from pipelines.records.dead_letters import dead_letter_message
from pipelines.records.feedback import end_markers, feedback_values
from pipelines.records.labels import PendingStore
from pipelines.records.parts import EVENTS, FEEDBACK, LABELS, Part
from pipelines.steps import NAMESPACE, KeptCells

from .keyed_step import KeyedStep
from .messages import SLICES, label_partition
from .router import Router

log = logging.getLogger(__name__)


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


class RouteEvents(KeyedStep, beam.DoFn):
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

    def process(self, element, saved=beam.DoFn.StateParam(KeyedStep.STATE),
                generation=beam.DoFn.StateParam(KeyedStep.GENERATION), deltas=beam.DoFn.StateParam(KeyedStep.DELTAS)):
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


"""The exact-mode pipeline's Beam transforms.

    Kafka events ─► ReadFromKafka ─► DecodeEvents ─bad─► dead letters ─► <topic>.dlq
                                         │ (partition, Decoded)
                                         ▼
                                   SequenceParts (keyed by partition): the parts, and SKIP parts
                                         │ (model, Part)
                                         ▼
                                   LearnModels (stateful, keyed by model; each partition in offset order)
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
from apache_beam.coders import BytesCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow

from pipelines import telemetry
from pipelines.config import RunConfig
from pipelines.kafka.producer import KafkaWriter
from pipelines.kafka.transactions import TransactionalOutput
from pipelines.records.dead_letters import dead_letter_message
from pipelines.records.event_rows import event_timestamps_of, prediction_keys_of
from pipelines.state.checkpoints import CheckpointStore, checkpoint_record
from pipelines.state.store import mtime
from pipelines.records.parts import EVENTS, LABELS, Part, waiting_report
from pipelines.steps import (NAMESPACE, WAITING_CLASSES, KeptAsDeltas, KeptCells, KeptCoder, pickle_sharing,
                             unpickle_sharing)

from .model_runner import KEPT_CLASSES, LabelSettings, ModelRunner

log = logging.getLogger(__name__)


class LearnModels(beam.DoFn):
    """Stateful, keyed by model name: one :class:`ModelRunner` per model,
    which applies each partition's parts in offset order whatever order the
    runner delivers them in (a part that comes early waits in the key's
    state; one applied before is dropped and counted). Produces the
    Prediction records to the predictions topic itself, and emits
    ModelCheckpoint headers (tag ``checkpoints``) every N events / T seconds
    and when the input ends.

    Each model is kept in the key's Beam state (the model, the offsets it
    covers, the events awaiting labels; encoded once per bundle) and worked
    on in memory. A runner that snapshots state and source together (Flink)
    restores the model with the input position after a failover; the
    FnApiRunner keeps state for one run only. The checkpoint files are the
    durability across runs: a new run resumes from them and the offsets they
    cover. A checkpoint is written only after the predictions it covers are
    acknowledged by Kafka (flush first), so a crash at any moment loses no
    prediction; predictions made after the last checkpoint (or runner
    snapshot) are made again on restart (at-least-once), updates are applied
    exactly once."""

    CHECKPOINTS = "checkpoints"
    MODEL = ReadModifyWriteStateSpec("model", KeptCoder())
    GENERATION = ReadModifyWriteStateSpec("generation", VarIntCoder())
    DELTAS = BagStateSpec("deltas", KeptCoder())
    WAITING = ReadModifyWriteStateSpec("waiting", BytesCoder())
    """The model's parts that came before an earlier one (pickled; written when they change)."""
    END = TimerSpec("end", TimeDomain.WATERMARK)
    """Set at the end of the global window: fires when the input is done, for
    runs that end (bounded, or unbounded with a stop). The FnApiRunner fires
    it early, after every bundle of a stage fed by an Impulse (the SDF's
    deferred remainders do not hold that stage's input watermark), so a
    firing that finds new events since the last one re-arms it instead of
    writing the final checkpoint; only a firing with nothing new in between
    writes it. On runners that hold the watermark this costs one extra firing
    at the very end."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def setup(self):
        self.kept = KeptAsDeltas({}, KEPT_CLASSES, written_as=ModelRunner.parts)
        self.runners: dict[str, ModelRunner] = self.kept.live
        cfg = self.cfg
        self.store = CheckpointStore(cfg.checkpoint_dir, source=cfg.source) if cfg.checkpoint_dir else None
        self.codec = cfg.codec()
        self.writer = KafkaWriter(cfg.bootstrap, cfg.predictions_topic, cfg.kafka_config, count_delivered=False)
        self.dlq: KafkaWriter | None = None
        self.predictions = Metrics.counter(NAMESPACE, "predictions")
        self.resent = Metrics.counter(NAMESPACE, "predictions_not_resent")
        # Events at offsets the model's state already covers (a replay that
        # overlaps a restored checkpoint), and whole batches applied before
        # (a runner's retry, a replay): both left out, counted.
        self.skipped = Metrics.counter(NAMESPACE, "skipped_as_covered")
        self.outputs: dict[str, TransactionalOutput] = {}  # model -> its writer, with --exactly-once
        self.fired_at: dict[str, int] = {}  # model -> its event count when END last fired
        self.replayed = Metrics.counter(NAMESPACE, "replayed_batches")
        self.waited = Metrics.counter(NAMESPACE, "waited_batches")
        self.started = time.monotonic()
        self.last_report = self.started
        # Compile the learner's kernels now, before the source starts its clock
        # (a first bundle that compiles for seconds would be cut short).
        warm = cfg.learner.make()
        warm.learn([{}], [float("nan")])

    def _runner(self, model: str, cells: KeptCells, waiting) -> ModelRunner:
        """This key's model: the one in memory if it is the newest the state
        store holds, else the store's (a restored job, or a runner that gave
        the key to another instance meanwhile) with the parts waiting for an
        earlier one, else the newest checkpoint file, else fresh."""
        if self.kept.current(model, cells.generation):
            return self.kept.live[model]
        stale = self.outputs.pop(model, None)  # may have been fenced, or be behind another instance's commits
        if stale is not None:
            stale.close()
        parts, restored = self.kept.read(model, cells)
        if parts is not None and not restored:  # this process's own object, from the state cache
            return parts
        cfg = self.cfg
        labels = LabelSettings(cfg.labels_topic, cfg.label_ttl * 1000.0, cfg.max_pending) if cfg.labels_topic \
            else None
        runner = ModelRunner(model, cfg.learner.make, self.store, cfg.checkpoint_every, cfg.checkpoint_seconds,
                             labels, snapshot=parts, max_waiting=cfg.max_waiting)
        early = waiting.read()
        if early:
            runner.chain.restore_waiting(unpickle_sharing(early, {}, WAITING_CLASSES))
        if restored:
            log.warning("model %r restored from the runner's state (%d events, %d parts waiting)", model,
                        runner.events, len(runner.chain))
        elif runner.restored_from:
            log.warning("model %r restored from %s (%d events)", model, runner.restored_from, runner.events)
        self.kept.set(model, runner)
        if cfg.exactly_once and (restored or runner.restored_from):
            self._follow_committed(model, runner)
        return runner

    def _follow_committed(self, model: str, runner: ModelRunner) -> None:
        """A restored model re-applies what was committed past its state in
        the order it was applied then (the transactional writer's order
        journal), so its predictions from here on follow from those committed."""
        inputs = {self.cfg.topic, self.cfg.labels_topic} - {None}
        runs = self._transactional(model).committed_order(runner.offsets, inputs, runner.state_time_ms(mtime))
        if runs:
            log.warning("model %r re-applies what it committed after its state in the committed order: %s", model,
                        ", ".join(f"{t}[{p}] to {o:,}" for (t, p), o in runs[:8]) + (" ..." if len(runs) > 8 else ""))
        for part in runner.follow(runs):
            self._apply(model, runner, part)

    def _keep(self, model: str, cells: KeptCells, waiting) -> None:
        """The model into the runner's state store (encoded when the bundle
        commits, so once per bundle; its large arrays as the rows that
        changed), and the parts waiting for an earlier one when they
        changed: a runner that restores a checkpoint of its own (Flink)
        restores the model with the input position, as one."""
        runner = self.kept.live[model]
        self.kept.keep_deltas(model, cells, runner.approx_bytes())
        if runner.chain.changed:
            runner.chain.changed = False
            items = runner.chain.waiting_items()
            if items:
                waiting.write(pickle_sharing(items, {}))
            else:
                waiting.clear()

    def start_bundle(self):
        self.kept.start_bundle()

    def process(self, element, saved=beam.DoFn.StateParam(MODEL), generation=beam.DoFn.StateParam(GENERATION),
                deltas=beam.DoFn.StateParam(DELTAS), waiting=beam.DoFn.StateParam(WAITING),
                end=beam.DoFn.TimerParam(END)):
        cells = KeptCells(saved, generation, deltas)
        (model, _salt), part = element
        runner = self._runner(model, cells, waiting)
        replayed, skipped, waited = runner.chain.replayed, runner.skipped, runner.chain.waited
        for ready in runner.take(part):
            self._apply(model, runner, ready)
        self.replayed.inc(runner.chain.replayed - replayed)
        self.waited.inc(runner.chain.waited - waited)
        self.skipped.inc(runner.skipped - skipped)
        if self.cfg.bounded or self.cfg.stop_after is not None:
            end.set(GlobalWindow().max_timestamp())
        self._gauges(model, runner)
        if runner.checkpoint_due():
            yield from self._checkpoint(runner)
        self._keep(model, cells, waiting)
        self._report()

    def _apply(self, model: str, runner: ModelRunner, part: Part) -> None:
        """Learn from one part that is in order, and write what it answers."""
        items = part.payload
        if part.kind == LABELS:
            if self.cfg.columnar_encode:
                predictions, keys, answering, dead = runner.process_labels_encoded(items, self.codec,
                                                                                   self.cfg.predictions_topic)
            else:
                predictions, keys, answering, dead = runner.process_labels(items)
                predictions = self._encoded(predictions)
            self._dead_letters(dead)
        elif part.kind == EVENTS:
            if self.cfg.columnar_encode:
                predictions = runner.process_encoded(items, self.codec, self.cfg.predictions_topic)
            else:
                predictions = self._encoded(runner.process(items))
            keys = prediction_keys_of(items)
            if telemetry.serving():
                telemetry.latencies(model, event_timestamps_of(items))
            answering = [position for position, _ in items] if self.cfg.exactly_once else []
            self._dead_letters(runner.dropped_labels())  # labels the events topic moved past
        else:  # SKIP: nothing of this model in those offsets
            return
        self._write_predictions(model, part, predictions, keys, answering)

    def _encoded(self, records: list[dict]) -> list[bytes]:
        encode, topic = self.codec.encode, self.cfg.predictions_topic
        return [encode("scinol.Prediction", p, topic) for p in records]

    def _write_predictions(self, model: str, part: Part, predictions: list[bytes], keys: list,
                           answering: list) -> None:
        """Predictions (encoded Kafka values) to Kafka: queued on the shared
        producer (at least once), or with ``exactly_once`` in one transaction
        per batch that also records the batch's input offsets as answered,
        skipping those a transaction before a restart already committed."""
        if not self.cfg.exactly_once:
            self.writer.produce_values(predictions, keys=keys)
            self.predictions.inc(len(predictions))
            telemetry.count("predictions", len(predictions), model=model)
            return
        out = self._transactional(model)
        messages = [(value, key) for value, key, msg in zip(predictions, keys, answering)
                    if not out.already_written(msg.topic, msg.partition, msg.offset)]
        out.commit(messages, {part.span.stream: part.span.end})
        self.predictions.inc(len(messages))
        telemetry.count("predictions", len(messages), model=model)
        self.resent.inc(len(predictions) - len(messages))

    def _transactional(self, model: str) -> TransactionalOutput:
        """This model's transactional writer; a new one (reading what was
        committed, fencing any older instance) each time the model was
        loaded again rather than kept in memory."""
        out = self.outputs.get(model)
        if out is None:
            out = self.outputs[model] = TransactionalOutput(self.cfg.bootstrap, self.cfg.predictions_topic,
                                                            f"{self.cfg.predictions_topic}-{model}",
                                                            self.cfg.kafka_config, journal=self.cfg.order_topic)
        return out

    def _dead_letters(self, records: list[dict]) -> None:
        """Labels that cannot be used, to the dead-letter topic; written here,
        like the predictions, so they are acknowledged before a checkpoint
        covers their offsets."""
        if not records:
            return
        if self.dlq is None:
            self.dlq = KafkaWriter(self.cfg.bootstrap, self.cfg.dlq_topic, self.cfg.kafka_config)
        for record in records:
            self.dlq.produce_message(dead_letter_message(
                record, self.codec.encode("scinol.DeadLetter", record, self.cfg.dlq_topic)))
        Metrics.counter(NAMESPACE, "dead_letters").inc(len(records))
        for record in records:
            telemetry.count("dead_letters", reason=record["reason"])

    def _gauges(self, model: str, runner: ModelRunner) -> None:
        Metrics.gauge(NAMESPACE, f"waiting_messages_{model}").set(runner.chain.waiting_messages)
        telemetry.gauge("waiting_messages", runner.chain.waiting_messages, model=model)
        if runner.labelled:  # gauges hold integers: parts per million
            Metrics.gauge(NAMESPACE, f"mean_loss_ppm_{model}").set(int(runner.mean_loss * 1e6))
            telemetry.gauge("progressive_loss", runner.mean_loss, model=model)
            if runner.accuracy is not None:
                Metrics.gauge(NAMESPACE, f"accuracy_ppm_{model}").set(int(runner.accuracy * 1e6))
                telemetry.gauge("progressive_accuracy", runner.accuracy, model=model)
        if runner.pending is not None:
            Metrics.gauge(NAMESPACE, f"pending_events_{model}").set(len(runner.pending.events))
            Metrics.gauge(NAMESPACE, f"pending_labels_{model}").set(len(runner.pending.labels))
            Metrics.gauge(NAMESPACE, f"pending_expired_{model}").set(runner.pending.expired_events)

    def _checkpoint(self, runner: ModelRunner):
        """Checkpoint ``runner``, and any model here never checkpointed yet
        (a restart reads a partition from the run's start for a model that
        had parts of it and has no checkpoint: :mod:`pipelines.state.progress`)."""
        self._flush()  # the predictions and dead letters the checkpoints cover are in Kafka first
        for other in self.runners.values():
            if other is not runner and other.never_saved:
                yield beam.pvalue.TaggedOutput(self.CHECKPOINTS, checkpoint_record(other.checkpoint()))
        yield beam.pvalue.TaggedOutput(self.CHECKPOINTS, checkpoint_record(runner.checkpoint()))

    def _flush(self):
        self.writer.flush()
        if self.dlq is not None:
            self.dlq.flush()

    def finish_bundle(self):
        self._flush()

    def teardown(self):
        self.writer.close()
        for out in self.outputs.values():
            out.close()
        if self.dlq is not None:
            self.dlq.close()

    @on_timer(END)
    def at_end(self, placed=beam.DoFn.KeyParam, end=beam.DoFn.TimerParam(END), saved=beam.DoFn.StateParam(MODEL),
               generation=beam.DoFn.StateParam(GENERATION), deltas=beam.DoFn.StateParam(DELTAS),
               waiting=beam.DoFn.StateParam(WAITING)):
        key = placed[0]  # the model's name
        cells = KeptCells(saved, generation, deltas)
        runner = self._runner(key, cells, waiting)
        progress = (runner.events, runner.labels_learned, sum(runner.offsets.values()))
        if self.fired_at.get(key) != progress:  # something new since the last firing: not the end yet
            self.fired_at[key] = progress
            end.set(GlobalWindow().max_timestamp())
            return
        if runner.chain.waiting_messages:
            # The input is done (or quiet) and parts still wait for offsets that never came: say which;
            # the run's summary fails on the gauge if they still wait when it ends.
            log.warning("model %r: %s", key, waiting_report(runner.chain))
            end.set(GlobalWindow().max_timestamp())
        self._gauges(key, runner)
        if self.store is not None and runner.unsaved:
            yield from self._checkpoint(runner)
            self._keep(key, cells, waiting)
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

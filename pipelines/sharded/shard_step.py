"""Sharded mode's shard step, keyed by (model, shard): predicts and
updates its coordinates (:class:`pipelines.sharded.shard.ShardRunner`) in
the route step's order, and writes its part of each checkpoint cut."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines import telemetry
from pipelines.records.feedback import end_markers
from pipelines.records.parts import Part
from pipelines.steps import NAMESPACE, KeptCells

from .keyed_step import KeyedStep
from .messages import PARTIALS, SLICES, Partials
from .shard import ShardRunner


class ShardStep(KeyedStep, beam.DoFn):
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

    def process(self, element, saved=beam.DoFn.StateParam(KeyedStep.STATE),
                generation=beam.DoFn.StateParam(KeyedStep.GENERATION), deltas=beam.DoFn.StateParam(KeyedStep.DELTAS)):
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

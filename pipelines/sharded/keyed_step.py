"""What sharded mode's three keyed steps (route, shard, combine) share:
the run the driver decided (:class:`ShardedRun`), and :class:`KeyedStep`,
which keeps each key's object (Router, ShardRunner, Combiner) in Beam
state and finds the checkpoint cut it restarts from."""

from __future__ import annotations

import logging
from typing import NamedTuple

from apache_beam.coders import VarIntCoder
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec

from pipelines.config import RunConfig
from pipelines.state.cuts import CutStore
from pipelines.steps import KeptAsDeltas, KeptCells, KeptCoder, placement

from . import state_classes

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


class KeyedStep:
    """What the three keyed steps share: the run's config and cut store,
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


"""Sharded mode's protocol run in one process, without Beam or Kafka:
Router → K ShardRunners → Combiner with the feedback loop closed in memory.
The reference the sharded pipeline is held to, on any runner."""

import numpy as np

from learners import make_learner
from learners.datasets import toy_examples
from learners.sharding import ShardedLearner
from pipelines.records.events import dense_events
from pipelines.records.feedback import feedback_parts
from pipelines.sharded.combiner import Combiner
from pipelines.sharded.router import Router
from pipelines.sharded.shard import ShardRunner
from pipelines.steps import Position
from tests.support.parts import route


class Loop:
    """The sharded protocol with the feedback delivered in memory; ``lose``
    and ``repeat`` name sequence numbers whose feedback is dropped or sent twice."""

    def __init__(self, learner, k, staleness, lose=(), repeat=(), offsets=None):
        algo = learner.algorithm
        scalars = algo.init_state(0, learner.n_outputs).scalars
        self.router = Router(k, learner.hasher, learner.bias, offsets=offsets, interactions=learner.interactions)
        self.shards = [ShardRunner(algo, learner.n_outputs, s, staleness, scalars) for s in range(k)]
        self.combiner = Combiner(algo, learner.loss, learner.loss_param, learner.n_outputs, k, "m", "run", scalars)
        self.lose, self.repeat = set(lose), set(repeat)
        self.predictions, self.feedback_queue = [], []

    def run(self, items, batch=16, end=True):
        """Route ``items`` in batches, the feedback after each; ``end``: then the end of the input."""
        for lo in range(0, len(items), batch):
            per_shard, _ = route(self.router, items[lo: lo + batch])
            for shard, slices in zip(self.shards, per_shard):
                self._combine(shard.add(slices))
            self._deliver()
        while self.feedback_queue:
            self._deliver()
        if end:
            self.end()

    def end(self):
        """The end of the input (the feedback reader's end marker): what is held is applied."""
        for shard in self.shards:
            shard.give_up_all()

    def _combine(self, partials):
        for run in self.combiner.add(partials):
            self.predictions += run.predictions
            self.feedback_queue.append(run.feedback.faulted(self.lose, self.repeat))

    def _deliver(self):
        columns, self.feedback_queue = self.feedback_queue, []
        parts = feedback_parts(columns)  # as the shards read the combine step's messages
        for shard in self.shards:
            self._combine(shard.feedback(parts))


def merged_arrays(loop, n_coords):
    sharded = ShardedLearner.__new__(ShardedLearner)
    sharded.algorithm, sharded.n_outputs = loop.shards[0].algorithm, loop.shards[0].shard.state.arrays["P"].shape[1]
    sharded.shards, sharded.scalars = [s.shard for s in loop.shards], loop.combiner.scalars
    return sharded.merged_state(n_coords)


def in_one_process(events: list[dict], topic: str, k: int, staleness: int = 0) -> list[float]:
    """The scores sharded mode gives ``events`` (one partition of ``topic``,
    in offset order) with ScInOL2 and the logistic loss, the pipeline's
    defaults, run in one process."""
    loop = Loop(make_learner("scinol2", "logistic"), k, staleness)
    loop.run([(Position(topic, 0, i), e) for i, e in enumerate(events)])
    assert [p["event_id"] for p in loop.predictions] == [e["id"] for e in events]
    return [p["score"] for p in loop.predictions]


def stream(n, seed=0, unlabelled_every=7):
    """(X, y, (Position, event) pairs) of the toy data, every 7th unlabelled."""
    X, y = toy_examples(n, seed)
    y = y.copy()
    y[::unlabelled_every] = np.nan
    events = list(dense_events(X, y, "e-", model="m", start_ms=1_700_000_000_000))
    return X, y, [(Position("events", 0, i), e) for i, e in enumerate(events)]

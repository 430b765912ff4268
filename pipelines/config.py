"""The one configuration object of a pipeline run, shared by both shapes:
:class:`RunConfig` (with its :class:`LearnerConfig`). Sharded mode adds its
few fields here (``shards`` and the ``feedback_*`` settings) instead of
copying the rest into a config of its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from learners import make_learner
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, DEFAULT_MAX_MESSAGE_BYTES


class LearnerConfig(NamedTuple):
    """What every model of a run is: a learner, a loss and their settings."""
    learner: str = "scinol2"
    loss: str = "logistic"
    params: dict = {}
    n_classes: int | None = None
    bias: bool = True
    hash_bits: int = 18
    loss_param: float | None = None
    interactions: tuple = ()
    """VW-style feature crosses, e.g. ("ab", "abc") (learners.interactions)."""

    def make(self):
        return make_learner(self.learner, self.loss, n_classes=self.n_classes, bias=self.bias,
                            hash_bits=self.hash_bits, loss_param=self.loss_param,
                            interactions=self.interactions, **self.params)


@dataclass
class RunConfig:
    bootstrap: str
    topic: str
    predictions_topic: str
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    bounded: bool = False
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    checkpoint_seconds: float | None = None
    checkpoint_topic: str | None = None
    dead_letter_topic: str | None = None
    group_id: str | None = None
    kafka_config: dict = field(default_factory=dict, repr=False)  # may hold secrets: never in a repr
    registry_url: str | None = None
    max_batch: int = 2000
    max_index: int = DEFAULT_MAX_INDEX
    """Sparse indices and dense lengths at or above this are dead letters (pipelines.records.dead_letters)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    stop_after: int | None = None
    progress_seconds: float | None = 5.0
    beam_args: list = field(default_factory=list)
    # -- sharded mode only
    shards: int | None = None
    """Sharded mode with this many feature shards (None: exact mode)."""
    max_staleness: int = 0
    feedback_topic: str | None = None
    feedback_timeout: float = 30.0
    feedback_faults: object = None
    """Fault injection (tests, fault trials): a pipelines.sharded.transforms.FeedbackFaults."""

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.dlq"

    @property
    def feedback(self) -> str:
        return self.feedback_topic or f"{self.predictions_topic}.feedback"

    @property
    def ckpt_topic(self) -> str:
        return self.checkpoint_topic or f"{self.predictions_topic}.checkpoints"

"""The one configuration object of a pipeline run, shared by both shapes:
:class:`RunConfig` (with its :class:`LearnerConfig`). Sharded mode adds its
few fields here (``shards`` and the ``feedback_*`` settings) instead of
copying the rest into a config of its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from learners import make_learner
from pipelines.kafka.spans import DEFAULT_MAX_WAITING
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, DEFAULT_MAX_MESSAGE_BYTES
from schemas.codec import Codec
from schemas.registry import DEFAULT_STRATEGY, Registry


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
    registry_url: str | None = field(default=None, repr=False)  # may hold credentials
    registry_config: dict = field(default_factory=dict, repr=False)
    """SchemaRegistryClient settings (basic.auth.user.info, ssl.ca.location, ...): may hold secrets."""
    subject_name_strategy: str = DEFAULT_STRATEGY
    """Where the output records' schemas are registered: schemas.registry.SUBJECT_STRATEGIES."""
    auto_register: bool = True
    """False: lookup-only (a registry the run may only read)."""
    topic_partitions: int = 1
    """Partitions of the predictions and dead-letter topics when created (the checkpoint and feedback
    topics always get 1)."""
    replication_factor: int | None = None
    """Of every topic created; None: the broker's default (default.replication.factor)."""
    topic_config: dict = field(default_factory=dict)
    """Topic settings (retention.ms, min.insync.replicas, ...) for every topic created."""
    max_dead_letter_ratio: float | None = None
    """Stop the run when more than this share of a window of messages became dead letters
    (pipelines.steps.DeadLetterGuard); None: never."""
    max_batch: int = 2000
    read_call_seconds: float | None = None
    """Longest one call of the Kafka read holds a partition before it returns (an SDF checkpoint);
    None: the read's default (1 s), or on Flink the bundle time if shorter (a bundle cannot end before
    the call returns; pipelines.launch.read_calls_for_runner)."""
    max_index: int = DEFAULT_MAX_INDEX
    """Sparse indices and dense lengths at or above this are dead letters (pipelines.records.dead_letters)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    columnar_decode: bool = True
    """Both modes decode each batch of messages in one compiled call (pipelines.records.event_decoder);
    False: one codec call per message (the same results, slower; kept to measure against)."""
    columnar_encode: bool = True
    """Exact mode encodes each batch's Prediction records in one compiled call
    (pipelines.records.prediction_values); False: one dict and one codec call per
    prediction (the same bytes, slower; kept to measure against)."""
    stop_after: int | None = None
    progress_seconds: float | None = 5.0
    beam_args: list = field(default_factory=list)
    from_scratch: bool = False
    """Move the checkpoints in checkpoint_dir aside and start fresh models."""
    connect_timeout: float = 30.0
    """Seconds to wait for a broker that does not answer at start."""
    max_models: int | None = None
    """Most distinct model names a worker accepts (further ones are dead letters, too_many_models)."""
    labels_topic: str | None = None
    """Delayed labels: Label records for events that came without one (None: labels come inline only)."""
    label_ttl: float = 86_400.0
    """Seconds of event time an unlabelled event waits for its label (and a label for its event)."""
    max_pending: int = 1_000_000
    """Most events (and, separately, early labels) a model holds waiting."""
    max_waiting: int = DEFAULT_MAX_WAITING
    """Most messages a keyed step holds for one key while they wait for an earlier batch of their
    partition (a runner that delivers out of order); past it the run stops with an error."""
    execution_mode: str | None = None
    """Flink: "streaming" (None: the default) or "batch" (a bounded exact run, stage after stage)."""
    parallelism: int | None = None
    """Flink's subtasks per step when the run names a number (set by pipelines.launch.placement_for_runner):
    the keyed steps then place their keys evenly over them (pipelines.steps.placement)."""
    max_parallelism: int | None = None
    """Flink's key groups, when the run sets them (None: Flink's default for the parallelism)."""
    place_models: tuple = ()
    """Models to spread over a Flink run's subtasks, one a subtask in this order (others go where
    their names hash)."""
    exactly_once: bool = False
    """Predictions in Kafka transactions, each committed with the input offsets it answers
    (pipelines.kafka.transactions): a read_committed consumer sees each once, even after failovers."""
    source: dict | None = None
    """Set when the run starts: the Kafka cluster and topic it reads, recorded in every checkpoint."""
    # -- sharded mode only
    shards: int | None = None
    """Sharded mode with this many feature shards (None: exact mode)."""
    max_staleness: int = 0
    feedback_topic: str | None = None
    feedback_timeout: float = 30.0
    feedback_faults: object = None
    """Fault injection (tests, fault trials): a pipelines.sharded.keyed_step.FeedbackFaults."""
    reorder: object = None
    """Tests only: name -> a Beam transform that reorders, holds back and repeats elements, placed
    before the decode step and each keyed step, as a runner that keeps no order may deliver them."""

    def registry(self) -> Registry | None:
        if self.registry_url is None:
            return None
        return Registry(self.registry_url, self.registry_config, subject_strategy=self.subject_name_strategy,
                        auto_register=self.auto_register)

    def codec(self) -> Codec:
        """The codec of this run's records (with its registry, if any)."""
        return Codec(self.registry())

    def check(self) -> None:
        """ValueError for settings that cannot work together."""
        if self.group_id is not None and not self.checkpoint_dir:
            raise ValueError(
                "--group-id without --checkpoint-dir: a restart would resume at the group's committed offsets "
                "with a fresh model and lose everything learned before them; add --checkpoint-dir DIR (the "
                "checkpoints then decide where a restart resumes, the group's offsets only show progress)")
        if self.max_dead_letter_ratio is not None and not 0.0 <= self.max_dead_letter_ratio < 1.0:
            raise ValueError(f"--max-dead-letter-ratio must be at least 0 and below 1, not {self.max_dead_letter_ratio}")
        if self.max_waiting < 1:
            raise ValueError(f"--max-waiting must be at least 1, not {self.max_waiting}")
        if self.topic_partitions < 1:
            raise ValueError(f"--partitions must be at least 1, not {self.topic_partitions}")
        if self.replication_factor is not None and self.replication_factor < 1:
            raise ValueError(f"--replication-factor must be at least 1, not {self.replication_factor}")
        if self.exactly_once and self.shards is not None:
            raise ValueError("--exactly-once works in exact mode only (sharded mode writes its predictions at "
                             "least once)")
        if self.shards is not None and self.beam_runner().lower() in ("prismrunner", "prism"):
            raise ValueError("--shards does not run on Prism: its feedback loop stalls there (measured: 1 prediction "
                             "for 40 events, the feedback of the rest missing); use --runner direct or flink")
        self.registry()  # bad registry settings (ValueError) fail here

    def beam_runner(self) -> str:
        """The runner the pass-through Beam flags name ('' for the default)."""
        args = list(self.beam_args)
        for i, arg in enumerate(args):
            if arg.startswith("--runner="):
                return arg.split("=", 1)[1]
            if arg == "--runner" and i + 1 < len(args):
                return args[i + 1]
        return ""

    def runner_restores_state(self) -> bool:
        """Whether the runner restores keyed Beam state with the source's
        position after a failure (Flink, Dataflow, Prism...). The DirectRunner
        does not: its state lasts one run, which a failure ends."""
        name = self.beam_runner().lower()
        return not (name in ("", "direct") or name.endswith("directrunner"))

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.dlq"

    @property
    def feedback(self) -> str:
        return self.feedback_topic or f"{self.predictions_topic}.feedback"

    @property
    def order_topic(self) -> str:
        """With exactly-once: the order in which each model's predictions were committed (one partition)."""
        return f"{self.predictions_topic}.order"

    @property
    def ckpt_topic(self) -> str:
        return self.checkpoint_topic or f"{self.predictions_topic}.checkpoints"

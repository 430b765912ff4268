"""Sharded mode: a model's coordinates split over K feature shards, the
per-example scalars combined, and g_t fed back to the shards through Kafka.

The protocol for one model, without Beam, one role per module:

    router.Router             numbers the model's events 1, 2, ... in arrival
                              order (the model's *sequence*) and splits each
                              event into K slices by hashed coordinate.
    shard.ShardRunner         holds its coordinates' state; predicts its slice
                              of the events in blocks of S + 1 (S = max
                              staleness), each block with the state after
                              every event before it and none of it; keeps the
                              slices and the weights it used until their
                              feedback comes back, and applies it once their
                              block has been predicted whole.
    combiner.Combiner         sums the K partial sums of event t in sequence
                              order: ŷ, the loss, g_t and the global scalars;
                              makes the Prediction and the Feedback record.

The messages between them are in ``messages``; the three are joined by
Beam (a step a module: ``decode_step``, ``route_step``, ``shard_step``,
``combine_step``, what the keyed ones share in ``keyed_step``; wired in
``pipeline``) and the feedback goes back to the shards through
Kafka, read under ``feedback_watch``'s rule. With S = 0 every shard
predicts event t with the state after events 1..t−1, exactly as one learner
would, so the result equals exact mode on the same sequence up to the
rounding of a dot product split into K partial sums; the Combiner adds
those in shard order, so a sharded run gives the same bits on every runner.
With S > 0 the state each event is predicted with is fixed by the sequence
alone (its block's start), never by when feedback happens to arrive, so the
bits are the same on every runner and every run too.

Ordering rule: the sequence is the order in which the Router receives the
model's events. Within one Kafka partition that is offset order. When a
model's events span several partitions it is the order in which the source
delivered batches: the same for every shard (they all follow the Router's
numbering), but it may differ between runs, as it does in exact mode. Key
events by model so that each model's events live in one partition when runs
must be reproducible.
"""

def state_classes() -> tuple[type, ...]:
    """Every class a Router, ShardRunner or Combiner is made of: what their
    state bytes may name when read back (pipelines.steps.unpickle_sharing)."""
    from collections import OrderedDict

    from learners.sharding import Shard
    from learners.state import LearnerState
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.kafka.spans import Chain, Early, Span
    from pipelines.records.event_columns import EventColumns
    from pipelines.records.event_rows import ColumnarEvent, EventRows, LabelledEvent
    from pipelines.records.feedback import FeedbackColumns
    from pipelines.records.labels import EarlyLabel, Matched, PendingStore, Source, Waiting
    from pipelines.records.parts import Part
    from pipelines.records.predictions import ProgressiveMetrics
    from pipelines.records.strings import Strings
    from pipelines.steps import EventBatch, LabelBatch, Position

    from .combiner import Combiner, PartialTable
    from .messages import Cadence, LateHead, Outbox, Partials, Slices
    from .router import Router
    from .shard import Flight, ShardRunner

    return (Router, ShardRunner, Combiner, PartialTable, Cadence, Flight, Slices, Partials, LateHead, Chain, Outbox,
            Span, Part, Early, EventBatch, LabelBatch, FeedbackColumns,
            Shard, LearnerState, ProgressiveMetrics, PendingStore, Waiting, EarlyLabel, Matched, Source, KafkaMessage,
            Position, ColumnarEvent, LabelledEvent, EventColumns, EventRows, Strings, OrderedDict)

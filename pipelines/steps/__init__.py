"""Beam steps both pipeline shapes use: decoding a batch of Kafka messages
into each model's part of it and dead letters (:mod:`.decode`), sequencing
those parts into whole chains per model (:mod:`.sequence`), encoding records
for a sink (:mod:`.encode`), and keeping a key's live objects in Beam state
(:mod:`.kept`; a wide one as row deltas, :mod:`.row_deltas`)."""

from .decode import (DeadLetterGuard, DeadLetterRatioExceeded, DecodeEvents, EventBatch, LabelBatch, ModelBatch,
                     span_of)
from .encode import EncodeDeadLetters, EncodeRecords
from .kept import Kept, KeptCoder, KeptObjects, pickle_sharing, unpickle_sharing
from .metrics import NAMESPACE
from .row_deltas import KeptAsDeltas, KeptCells
from .sequence import (SEQUENCER_CLASSES, WAITING_CLASSES, Keyed, ModelParts, SequenceParts, StreamKeyed, model_parts,
                       placement, reorder)
from pipelines.kafka.consumer import Position  # noqa: F401 - where the sharded state's classes list finds it

__all__ = ["NAMESPACE", "DeadLetterGuard", "DeadLetterRatioExceeded", "DecodeEvents", "EventBatch", "LabelBatch",
           "ModelBatch", "span_of", "EncodeDeadLetters", "EncodeRecords", "Kept", "KeptCoder", "KeptObjects",
           "KeptAsDeltas", "KeptCells",
           "pickle_sharing", "unpickle_sharing", "SEQUENCER_CLASSES", "WAITING_CLASSES", "Keyed", "ModelParts",
           "SequenceParts", "StreamKeyed", "model_parts", "placement", "reorder"]

"""Whole chains of parts for the keyed steps: the sequencing step keyed by
partition (:class:`pipelines.records.parts.Sequencer` in Beam state), and
:func:`model_parts`, the front of both pipeline shapes."""

from __future__ import annotations

import time
import typing
from typing import NamedTuple

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from pipelines.beam_io.placement import Placement
from pipelines.config import RunConfig
from pipelines.kafka.consumer import KafkaMessage, Position
from pipelines.kafka.spans import Chain, Span
from pipelines.records.event_columns import EventColumns
from pipelines.records.event_rows import EventRows
from pipelines.records.parts import Manifest, Part, Sequencer
from pipelines.records.strings import Strings
from pipelines.state.progress import write_sequenced

from .decode import DecodeEvents, EventBatch, LabelBatch
from .kept import KeptCoder, KeptObjects, pickle_sharing, unpickle_sharing

SEQUENCER_CLASSES = (Sequencer, Chain, Span, Manifest)
"""What a SequenceParts step's state is made of."""

WAITING_CLASSES = (Span, Part, EventRows, EventColumns, EventBatch, LabelBatch, KafkaMessage, Position, Strings)
"""What the parts waiting in a keyed step's state are made of."""


class SequenceParts(beam.DoFn):
    """Keyed by (topic, partition): passes each decoded batch's parts on,
    keyed by model, at once; and takes the batches' manifests in offset
    order, which become the SKIP parts that keep each model's chain of parts
    whole (:class:`pipelines.records.parts.Sequencer`), each sent before
    the part that brought its model back. With a checkpoint folder it
    records, every few seconds, which models have had parts of the partition
    since the run began and how far it has been sequenced
    (:func:`pipelines.state.progress.write_sequenced`): what a restart may
    skip.

    The parts pass through this step rather than meet its SKIP parts in a
    Flatten: the in-process runner materializes a Flatten of two stages'
    outputs, and an unbounded run's steps after it would wait for the end."""

    SEQUENCER = ReadModifyWriteStateSpec("sequencer", KeptCoder())
    GENERATION = ReadModifyWriteStateSpec("generation", VarIntCoder())
    PROGRESS_SECONDS = 5.0

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def setup(self):
        self.kept = KeptObjects()
        self.place = placement(self.cfg)
        self.written: dict = {}  # stream -> (monotonic time, end) of its last progress record

    def process(self, element, saved=beam.DoFn.StateParam(SEQUENCER),
                generation=beam.DoFn.StateParam(GENERATION)):
        (stream, _salt), decoded = element
        sequencer, stored = self.kept.get(stream, saved, generation)
        if sequencer is None:
            sequencer = unpickle_sharing(stored, {}, SEQUENCER_CLASSES) if stored is not None else Sequencer()
            self.kept.set(stream, sequencer)
        place = self.place.model
        yield from ((place(model), part) for model, part in sequencer.take(decoded.manifest))
        yield from ((place(model), part) for model, part in decoded.parts)
        self.kept.keep(stream, saved, generation, lambda: pickle_sharing(sequencer, {}), 4096)
        self._progress(stream, sequencer)

    def _progress(self, stream, sequencer: Sequencer) -> None:
        if not self.cfg.checkpoint_dir or stream not in sequencer.chain.applied:
            return
        end = sequencer.chain.applied[stream]
        at, written = self.written.get(stream, (0.0, None))
        if written == end or time.monotonic() - at < self.PROGRESS_SECONDS:
            return
        write_sequenced(self.cfg.checkpoint_dir, stream, end, sequencer.models())
        self.written[stream] = (time.monotonic(), end)


# Output type hints give keyed steps deterministic key coders, which placed keys need (beam_io.placement).
Keyed = typing.Tuple[typing.Tuple[str, int], typing.Any]
"""A model's placed key ``(model, salt)`` and what its keyed step takes."""
StreamKeyed = typing.Tuple[typing.Tuple[str, int], typing.Any]
"""A partition ``(topic, partition)`` and what the decode step made of one batch of it."""
PlacedStreamKeyed = typing.Tuple[typing.Tuple[typing.Tuple[str, int], int], typing.Any]


class ModelParts(NamedTuple):
    """What :func:`model_parts` makes: ``(model, Part)`` for the keyed step
    of a pipeline shape, and the dead letters."""
    parts: beam.PCollection
    dead: beam.PCollection


def model_parts(batches, cfg: RunConfig, decode: "DecodeEvents") -> ModelParts:
    """Kafka batches -> each model's parts, whole chains of them:

        batches ─► Decode ─► (partition, Decoded) ─► Sequence (keyed by partition) ─► (model, Part)
                     └─► dead letters                   (its parts, and SKIP parts)

    ``cfg.reorder`` (tests only) puts a harness that reorders, holds back and
    repeats elements before the decode step, the sequencing step and the
    keyed step after it."""
    batches = reorder(batches, cfg, "Batches")
    decoded = batches | "Decode" >> beam.ParDo(decode).with_output_types(StreamKeyed).with_outputs(
        DecodeEvents.DEAD, main="decoded")
    placed = decoded.decoded | "PlaceStreams" >> beam.Map(
        lambda keyed, place: (place(*keyed[0]), keyed[1]), placement(cfg).stream).with_output_types(PlacedStreamKeyed)
    parts = reorder(placed, cfg, "Decoded") | "Sequence" >> beam.ParDo(SequenceParts(cfg)).with_output_types(Keyed)
    return ModelParts(reorder(parts, cfg, "Parts"), decoded[DecodeEvents.DEAD])


def placement(cfg: RunConfig) -> Placement:
    """Where the run's keyed steps put their keys (salt 0 everywhere unless
    the run names a Flink parallelism)."""
    return Placement(cfg.parallelism, cfg.max_parallelism, tuple(cfg.place_models))


def reorder(pcoll, cfg: RunConfig, name: str):
    """``pcoll`` through ``cfg.reorder`` (a test harness transform factory) if set."""
    if cfg.reorder is None:
        return pcoll
    return pcoll | f"Reorder{name}" >> cfg.reorder(name)

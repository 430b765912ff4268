"""The field layouts the compiled Avro readers and writers assume against
the schema files: each module of ``pipelines/records/avro`` that reads or
writes a record states, in ``LAYOUTS``, the fields its code reads or writes
in order, as (name, type); here they are compared with the parsed .avsc
files, so a schema field added, removed, renamed, reordered or retyped
fails until the kernels follow it. The table is written by hand next to the
code on purpose: derived from the .avsc, it could not disagree with it.

Types are spelled compactly: ``long``, ``long/timestamp-millis`` (a logical
type), ``array<double>``, ``map<double>``, ``null|double`` (a union, in
branch order), ``Name{field:type,...}`` (a record)."""

import pytest

from pipelines.records.avro import event_reader, event_writer, feedback_batch, label_reader, prediction_writer
from pipelines.records.event_decoder import EventDecoder
from pipelines.records.feedback import FeedbackReader
from pipelines.records.label_decoder import LabelDecoder
from schemas.catalog import current_version, load_schema
from schemas.codec import Codec

READERS = (event_reader, label_reader)
WRITERS = (prediction_writer, event_writer, feedback_batch)  # feedback_batch also reads, the current version only


def spell(avro_type) -> str:
    """An Avro type as the ``LAYOUTS`` spell it."""
    if isinstance(avro_type, str):
        return avro_type
    if isinstance(avro_type, list):
        return "|".join(spell(branch) for branch in avro_type)
    kind = avro_type["type"]
    if kind == "record":
        return f"{avro_type['name']}{{{','.join(f'{n}:{t}' for n, t in fields_of(avro_type))}}}"
    if kind == "array":
        return f"array<{spell(avro_type['items'])}>"
    if kind == "map":
        return f"map<{spell(avro_type['values'])}>"
    assert isinstance(kind, str) and kind not in ("enum", "fixed"), f"no spelling for {avro_type}"
    logical = avro_type.get("logicalType")
    return f"{kind}/{logical}" if logical else kind


def fields_of(record: dict) -> tuple[tuple[str, str], ...]:
    return tuple((f["name"], spell(f["type"])) for f in record["fields"])


CASES = [(module, record, version) for module in READERS + WRITERS for record, version in module.LAYOUTS]


@pytest.mark.parametrize("module, record, version", CASES,
                         ids=[f"{m.__name__.rsplit('.', 1)[1]}-{r}-v{v}" for m, r, v in CASES])
def test_a_kernel_layout_is_its_schema_file(module, record, version):
    assert module.LAYOUTS[record, version] == fields_of(load_schema(record, version))


@pytest.mark.parametrize("module", READERS + WRITERS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_the_current_version_of_each_record_has_a_layout(module):
    """A new current version needs its layout before the kernels may take
    or write it: a writer would frame old bytes with the new id."""
    for record in {r for r, _ in module.LAYOUTS}:
        assert (record, current_version(record)) in module.LAYOUTS


@pytest.mark.parametrize("module", WRITERS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_writer_has_the_current_layout_only(module):
    assert set(module.LAYOUTS) == {(record, current_version(record)) for record, _ in module.LAYOUTS}


def test_the_decoders_send_the_compiled_readers_only_versions_they_have_layouts_for():
    codec = Codec()
    taken = [(EventDecoder(codec, "logistic").writers, "scinol.Event", event_reader),
             (LabelDecoder(codec, "logistic").writers, "scinol.Label", label_reader),
             (FeedbackReader(codec).writers, "scinol.FeedbackBatch", feedback_batch)]
    for writers, record, module in taken:
        versions = set(writers.version_of.values())
        assert versions and {(record, v) for v in versions} <= set(module.LAYOUTS), record


def _added(fields):
    fields.append({"name": "extra", "type": "string"})


def _removed(fields):
    del fields[-1]


def _renamed(fields):
    fields[0]["name"] = "event_id"


def _reordered(fields):
    fields[0], fields[2] = fields[2], fields[0]  # id and model: both strings, only the order differs


def _retyped(fields):
    fields[-1]["type"] = ["double", "null"]  # the same types, the union's branches swapped


def _retyped_inside(fields):
    fields[3]["type"][1]["fields"][0]["type"]["items"] = "int"  # SparseFeatures' indices


@pytest.mark.parametrize("change", [_added, _removed, _renamed, _reordered, _retyped, _retyped_inside],
                         ids=lambda f: f.__name__[1:])
def test_any_change_to_a_schema_field_breaks_the_match(change):
    schema = load_schema("scinol.Event", 2)
    assert fields_of(schema) == event_reader.LAYOUTS["scinol.Event", 2]
    change(schema["fields"])
    assert fields_of(schema) != event_reader.LAYOUTS["scinol.Event", 2]

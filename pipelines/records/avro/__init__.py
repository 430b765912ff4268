"""Compiled Avro reading and writing of the project's own records, one job
a module: :mod:`.primitives` (varints, doubles, strings, arrays, unions),
:mod:`.feature_reader` (an Event's features union), :mod:`.event_reader`,
:mod:`.label_reader`, :mod:`.prediction_writer`, :mod:`.event_writer`
(Events of file rows, for ``scinol produce``), :mod:`.feedback_batch`.

Each module that reads or writes a record states the field layout its code
assumes (``LAYOUTS``: (record, version) -> its fields in order as (name,
type), a type spelled ``long/timestamp-millis``, ``array<double>``,
``map<double>``, ``null|double`` for a union, ``Name{field:type,...}`` for
a record), checked against the schemas' .avsc files by
``tests/records/test_avro_layouts.py``: the layouts are copied by hand, so
a schema change must reach the kernels before they take its messages.

Avro binary encoding: Apache Avro 1.11 specification, "Binary Encoding"
(zig-zag varints, length-prefixed strings, blocked arrays and maps,
unions as a branch index then the value).
"""

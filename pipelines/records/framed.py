"""What the compiled Avro readers take from a batch of Kafka messages.

:func:`joined` lays a batch of message values end to end in one buffer, with
each message's start and end. :class:`WriterIds` says which Confluent schema
ids a compiled reader may take: those whose writer schema is a catalog
version it has a layout for. Every other id goes the per-message way, through
the codec.
"""

from __future__ import annotations

import numpy as np

from schemas.catalog import load_schema
from schemas.codec import Codec

_BYTES = (bytes, bytearray, memoryview)


def joined(values: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buf, starts, ends): the values as one uint8 buffer, message i at
    ``buf[starts[i]:ends[i]]``. A value that is not bytes (None for a
    tombstone) takes no bytes; the compiled readers send it the slow way."""
    try:
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        buf = np.frombuffer(b"".join(values), np.uint8)
    except TypeError:
        lengths = np.array([len(v) if isinstance(v, _BYTES) else 0 for v in values], np.int64)
        buf = np.frombuffer(b"".join(v for v in values if isinstance(v, _BYTES)), np.uint8)
    ends = np.cumsum(lengths)
    return buf, ends - lengths, ends


class WriterIds:
    """The schema ids ``codec`` reads as record ``name`` whose writer schema
    is one of the catalog ``versions`` (same canonical form): ``ids`` with
    the version of each in ``versions``, and ``version_of`` as a dict.

    A registry teaches the codec ids as messages arrive, so call
    :meth:`refresh` after a batch; it rescans only when the codec has met
    new ids."""

    def __init__(self, codec: Codec, name: str, versions: tuple[int, ...]):
        from fastavro.schema import to_parsing_canonical_form as canonical

        self.codec, self.name = codec, name
        self._canonical = canonical
        self._layouts = {canonical(load_schema(name, v)): v for v in versions}
        self._known = -1
        self.refresh()

    def refresh(self) -> None:
        if len(self.codec._by_id) == self._known:
            return
        table = dict(self.codec._by_id)  # a copy: another thread may add to it
        self.version_of = {}
        for sid, (name, _, writer, _) in table.items():
            if name == self.name and writer is not None:
                version = self._layouts.get(self._canonical(writer))
                if version:
                    self.version_of[sid] = version
        self.ids = np.array(list(self.version_of), np.int64)
        self.versions = np.array(list(self.version_of.values()), np.int8)
        self._known = len(table)

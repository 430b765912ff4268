"""A batch of the labels topic's messages screened in one compiled call.

:class:`LabelDecoder` gives what :func:`pipelines.records.dead_letters.screen_label`
gives one message at a time, for a whole batch: the compiled reader
(:func:`pipelines.records.avro.label_reader.decode_labels`) takes each message
it is sure of, and every other one (a writer schema it has no layout for,
a bad header or body, a label or weight the checks would refuse) goes
through ``screen_label``, which decides the dead letter and its text. The
records are the dicts ``Codec.decode`` returns, so the steps after this
one do not know which way a label came.
"""

from __future__ import annotations

import numpy as np

from pipelines.records.avro.event_reader import FALLBACK, label_kind
from pipelines.records.avro.label_reader import decode_labels
from pipelines.records.dead_letters import DEFAULT_MAX_MESSAGE_BYTES, screen_label
from pipelines.records.framed import WriterIds, joined
from schemas.codec import Codec

LABEL = "scinol.Label"
LAYOUT_VERSION = 1
"""The Label version the compiled reader knows; a later one needs its
layout in ``decode_labels`` before its messages may skip the per-message path."""


class LabelDecoder:
    """Screens batches of Label message values as ``screen_label(codec,
    value, loss, n_classes, max_message_bytes)`` does one by one."""

    def __init__(self, codec: Codec, loss: str, n_classes: int | None = None, *,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        self.codec, self.loss, self.n_classes, self.max_message_bytes = codec, loss, n_classes, max_message_bytes
        self.labels = (np.int64(label_kind(loss)), np.float64(n_classes or 1))
        self.writers = WriterIds(codec, LABEL, (LAYOUT_VERSION,))

    def screen(self, values: list) -> list[tuple[dict | None, tuple[str, str] | None]]:
        """``(record, None)`` or ``(None, (reason, detail))`` for each value
        (bytes, or None for a tombstone), in order."""
        values = values if isinstance(values, list) else list(values)
        buf, starts, ends = joined(values)
        status, cols = decode_labels(buf, starts, ends, self.writers.ids, self.labels, self.max_message_bytes)
        data = buf.tobytes()
        ts, id_s, id_e, model_s, model_e, label, weight, has_weight = (c.tolist() for c in cols)
        out = []
        for i, st in enumerate(status.tolist()):
            if st >= FALLBACK:
                out.append(screen_label(self.codec, values[i], self.loss, self.n_classes, self.max_message_bytes))
                continue
            out.append(({"event_id": data[id_s[i]:id_e[i]].decode(), "model": data[model_s[i]:model_e[i]].decode(),
                         "label": label[i], "weight": weight[i] if has_weight[i] else None, "timestamp": ts[i]},
                        None))
        self.writers.refresh()  # a registry may have taught the codec new ids
        return out

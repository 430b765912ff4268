"""State bytes from before a class moved module (a savepoint of an earlier
release) read back as the class where it is now, and only for the moves
listed: any other name is refused as before."""

import importlib
import pickle
import sys
import types

import numpy as np
import pytest

from pipelines.records.event_columns import EventColumns
from pipelines.records.event_rows import EventRows
from pipelines.steps import WAITING_CLASSES, pickle_sharing, unpickle_sharing
from pipelines.steps.kept import MOVED


def _pickled_as_if_in(module_then: str, value, cls) -> bytes:
    """``value`` pickled while ``cls`` claims to live in ``module_then``."""
    fake, now = types.ModuleType(module_then), cls.__module__
    setattr(fake, cls.__qualname__, cls)
    sys.modules[module_then], cls.__module__ = fake, module_then
    try:
        return pickle_sharing(value, {})
    finally:
        cls.__module__ = now
        del sys.modules[module_then]


def test_every_move_names_a_class_that_is_where_the_table_says():
    for (_, name), module_now in MOVED.items():
        assert isinstance(getattr(importlib.import_module(module_now), name), type), (module_now, name)


def test_a_waiting_part_pickled_before_the_move_reads_back():
    span = np.arange(3, dtype=np.int64)
    data = _pickled_as_if_in("pipelines.records.columnar", {"rows": span, "kind": EventRows}, EventRows)
    assert b"pipelines.records.columnar" in data
    back = unpickle_sharing(data, {}, WAITING_CLASSES)
    assert back["kind"] is EventRows and back["rows"].tolist() == [0, 1, 2]
    assert unpickle_sharing(_pickled_as_if_in("pipelines.records.columnar", [EventColumns], EventColumns),
                            {}, WAITING_CLASSES) == [EventColumns]


def test_an_old_name_outside_the_table_is_still_refused():
    data = _pickled_as_if_in("pipelines.records.somewhere_else", [EventRows], EventRows)
    with pytest.raises(pickle.UnpicklingError, match="somewhere_else.EventRows"):
        unpickle_sharing(data, {}, WAITING_CLASSES)

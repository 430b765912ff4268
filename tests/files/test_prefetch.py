"""Read-ahead (pipelines/files/prefetch.py): order kept, errors raised after
the items before them, and closing early stops the thread."""

import threading

import pytest

from pipelines.files.prefetch import prefetch


def test_items_in_order_then_the_error():
    def items():
        yield from range(50)
        raise ValueError("bad line")
    got = []
    with pytest.raises(ValueError, match="bad line"):
        for item in prefetch(items(), depth=3):
            got.append(item)
    assert got == list(range(50))


def test_closing_early_stops_the_thread():
    before = threading.active_count()
    stream = prefetch(iter(range(10_000)), depth=2)
    assert next(stream) == 0
    stream.close()
    assert threading.active_count() == before

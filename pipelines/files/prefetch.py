"""Read ahead in a thread: the next batches are parsed while the learner
learns from the current one. The compiled parsers release the GIL
(``nogil``), so parsing and learning run on two cores at once."""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
_END = object()


def prefetch(items: Iterable[T], depth: int = 4) -> Iterator[T]:
    """The items of ``items`` in order, produced up to ``depth`` ahead in a
    thread; an exception raised while producing is raised here, after the
    items before it. Closing this iterator stops the thread."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put((_END, exc))
            return
        put((_END, None))

    worker = threading.Thread(target=produce, name="scinol-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, error = ready.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        worker.join()

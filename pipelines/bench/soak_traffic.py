"""The soak's traffic (``scinol bench soak``): the load it offers, toy
events round-robin over the partitions, a model per partition, and the
predictions it reads back (their latencies, and the lag)."""

from __future__ import annotations

import time

# pipelines.bench.load_latency (WARM) is imported where used: `scinol` builds the
# soak's parser for every command, and that module brings numpy and the learners.

CHUNK_SECONDS = 0.01
"""Events are encoded (and stamped) this many seconds' worth at a time."""


# -- the load ------------------------------------------------------------------

def _interleaved(codec, X, y, prefix: str, partitions: int) -> list[bytes]:
    """Rows ``X`` as events round-robin over the partitions, row ``i`` of
    model ``m{i % partitions}``: value ``k`` goes to partition ``k % partitions``."""
    from pipelines.records.event_values import dense_values

    per = [dense_values(codec, X[p::partitions], y[p::partitions], f"{prefix}p{p}-", model=f"m{p}")
           for p in range(partitions)]
    return [value for row in zip(*per) for value in row]


def load_producer(bootstrap: str, topic: str, rate: float, partitions: int, go) -> None:
    """In a process of its own: ``WARM`` events at once, then, once
    ``go`` is set, events at ``rate`` events/s until terminated (100,000
    toy rows over and over, new ids)."""
    import itertools

    from learners.datasets import toy_examples
    from pipelines.bench.load_latency import WARM
    from pipelines.records.topics import produce_values

    X, y = toy_examples(100_000, 7)
    warm = WARM - WARM % partitions
    produce_values(bootstrap, topic, lambda codec: _interleaved(codec, X[:warm], y[:warm], "warm-", partitions),
                   partitions=partitions, progress=False)
    go.wait()
    chunk = partitions * max(1, round(rate * CHUNK_SECONDS / partitions))
    rows = len(y) - len(y) % chunk

    def endless(codec):
        for k in itertools.count():
            for a in range(0, rows, chunk):
                yield from _interleaved(codec, X[a:a + chunk], y[a:a + chunk], f"s{k}-{a}-", partitions)

    produce_values(bootstrap, topic, endless, partitions=partitions, rate=rate, progress=False)


# -- what was predicted ----------------------------------------------------------

class Predicted:
    """Reads the predictions topic from its start: each row's latencies,
    the count, and the next unpredicted offset of each events partition."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer

        from schemas.codec import Codec

        self.topic, self.codec, self.count = topic, Codec(), 0
        self.latencies: list[float] = []
        self.next_offset: dict[int, int] = {}  # events partition -> 1 + highest offset predicted
        self.read_to: dict[int, int] = {}  # predictions partition -> next offset to read
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-{time.time_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])

    def poll(self, seconds: float) -> None:
        for message in self.consumer.consume(5000, timeout=seconds):
            if message.error() is not None:
                continue
            p = self.codec.decode(message.value())
            self.count += 1
            self.latencies.append(p["latency_ms"])
            part = p["source_partition"]
            self.next_offset[part] = max(self.next_offset.get(part, 0), p["source_offset"] + 1)
            self.read_to[message.partition()] = message.offset() + 1

    def drain(self, ends: dict[int, int], timeout: float = 30.0) -> None:
        """Read up to ``ends`` (the predictions topic's end offsets at some moment)."""
        deadline = time.monotonic() + timeout
        while any(self.read_to.get(p, 0) < end for p, end in ends.items()) and time.monotonic() < deadline:
            self.poll(0.2)

    def take_latencies(self) -> list[float]:
        taken, self.latencies = self.latencies, []
        return taken

    def close(self) -> None:
        self.consumer.close()


def lag(ends: dict[int, int], next_offset: dict[int, int]) -> int:
    """Events in the topic (its end offsets) that have no prediction yet."""
    return sum(max(0, end - next_offset.get(p, 0)) for p, end in ends.items())

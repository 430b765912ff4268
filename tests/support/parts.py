"""Parts as the keyed steps receive them, for tests that drive a model or a
router without Beam."""

from pipelines.kafka.spans import Span
from pipelines.records.parts import EVENTS, LABELS, Part


def part_of(items, kind: str = EVENTS, origin: int | None = None) -> Part:
    """``items`` ((position or message, record) pairs or an EventRows, of one
    partition, in offset order) as a part covering their own offsets; the
    first of its read unless ``origin`` says where the read began."""
    first, last = items[0][0], items[-1][0]
    start = first.offset
    return Part(Span(first.topic, first.partition, start, last.offset + 1, start if origin is None else origin),
                kind, items)


def feed(runner, items) -> list[dict]:
    """What the exact-mode step does with a batch of events: offer it to the
    model's chain (as the first batch of its read, so a replay of covered
    events is trimmed) and learn from what is in order; the Prediction records."""
    return [p for part in runner.take(part_of(items)) for p in runner.process(part.payload)]


def route(router, items, origin: int | None = None):
    """What the sharded route step does with a batch of events: offer it to
    the router's chain and route what is in order; (slices per shard, the
    positions left out as routed before)."""
    per_shard = [[] for _ in range(router.n_shards)]
    if not len(items):
        return per_shard, []
    ready, skipped = router.take(part_of(items, EVENTS, origin))
    for part in ready:
        for s, slices in enumerate(router.route(part.payload)):
            per_shard[s] += slices
    return per_shard, skipped


def route_labels(router, items):
    """:func:`route` for a batch of labels: (slices per shard, dead letters,
    label messages no event was routed for, those left out included)."""
    if not items:
        return router.route_labels(items)
    per_shard, dead, unrouted = [[] for _ in range(router.n_shards)], [], []
    ready, skipped = router.take(part_of(items, LABELS))
    for part in ready:
        slices, more_dead, more = router.route_labels(part.payload)
        for s, mine in enumerate(slices):
            per_shard[s] += mine
        dead += more_dead
        unrouted += more
    return per_shard, dead, unrouted + skipped

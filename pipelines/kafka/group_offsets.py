"""A consumer group's committed offsets, asked for until the group's
coordinator answers.

Right after a broker restarts (or a coordinator moves), Apache Kafka answers
offset fetches with NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS until it
has loaded the group's partition of ``__consumer_offsets``. librdkafka hands
those errors to the caller of ``Consumer.committed()`` (as an exception or
per partition) instead of retrying; both mean "ask again shortly".
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException

COORDINATOR_BUSY = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE}


def committed_offsets(consumer, partitions: list, timeout: float, retry_every: float = 0.2) -> list:
    """``consumer.committed(partitions)``, asked again while the coordinator
    is busy, for up to ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(0.5, deadline - time.monotonic())
        try:
            found = consumer.committed(partitions, timeout=left)
            busy = any(tp.error is not None and tp.error.code() in COORDINATOR_BUSY for tp in found)
        except KafkaException as exc:
            if exc.args[0].code() not in COORDINATOR_BUSY or time.monotonic() >= deadline:
                raise
            busy, found = True, None
        if not busy or time.monotonic() >= deadline:
            if found is None:
                raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, "group coordinator still busy"))
            return found
        time.sleep(retry_every)

"""The feedback reader's rule in sharded mode: heartbeats so a shard
never waits forever for lost feedback, and the end of a bounded run."""

from __future__ import annotations

import logging
import time

import numpy as np

from pipelines.kafka.consumer import KafkaMessage, StopRule
from pipelines.records.feedback import FeedbackReader, feedback_batches

log = logging.getLogger(__name__)


class FeedbackWatch(StopRule):
    """The feedback reader's rule: keeps the shards from waiting forever,
    and ends bounded runs.

    * Heartbeats: after ``heartbeat_seconds`` without feedback it emits, for
      every model it has seen, a control record (event id "", no
      ``checkpoint``); a shard that gets one gives up feedback it has awaited
      longer than its feedback timeout, so a lost record cannot stall it
      even when nothing else arrives.
    * Coverage (``targets`` given: {partition: (start, stop)} of the events
      topic): done when every one of those event offsets has had a feedback
      record (or a dead letter's record), i.e. every event up to the end
      offsets seen at start was predicted and fed back; or when nothing new
      is covered for ``idle_timeout`` seconds, reporting what is missing.
      Its last batch is one end marker per model (a control record with
      ``checkpoint`` set): each shard gives up what is still in flight and
      writes its part of a final checkpoint cut.
    """

    def __init__(self, run_id: str, heartbeat_seconds: float, targets: dict[int, tuple[int, int]] | None = None,
                 idle_timeout: float = 60.0, registry=None, linger_seconds: float = 0.0, linger_min_bytes: int = 0):
        self.run_id, self.heartbeat_seconds, self.registry = run_id, heartbeat_seconds, registry
        self.linger_seconds, self.linger_min_bytes = linger_seconds, linger_min_bytes
        self.targets = None if targets is None else {p: (a, b) for p, (a, b) in targets.items() if b > a}
        self.idle_timeout = idle_timeout
        self._seen: dict[int, np.ndarray] | None = None
        self._left = 0
        self._codec = self._reader = None
        self._last_seq: dict[str, int] = {}
        self._last_progress = self._last_beat = 0.0

    def _start(self):
        from schemas.codec import Codec

        self._codec = Codec(self.registry)
        self._reader = FeedbackReader(self._codec)
        targets = self.targets or {}
        self._seen = {p: np.zeros(b - a, dtype=bool) for p, (a, b) in targets.items()}
        self._left = sum(b - a for a, b in targets.values())
        self._last_progress = self._last_beat = time.monotonic()

    def linger_after(self, batch: list) -> float:
        """Linger only after feedback of at least ``linger_min_bytes`` (many
        events: a busy stream, whose next feedback comes within a round
        trip); after a few events' feedback (a quiet stream) the wait would
        only hold back the next events."""
        size = sum(len(m.value) for m in batch if m.value is not None)
        return self.linger_seconds if size >= self.linger_min_bytes else 0.0

    def observe(self, batch) -> bool:
        if self._seen is None:
            self._start()
        self._last_beat = time.monotonic()
        before = self._left
        for msg in batch:
            try:
                part = self._reader.columns(msg.value)
            except Exception as exc:  # noqa: BLE001 - a foreign record on the feedback topic
                log.warning("feedback topic offset %d: not a FeedbackBatch record (%s); ignored", msg.offset, exc)
                continue
            if part.run_id != self.run_id or not part.n:
                continue
            if part.model:
                self._last_seq[part.model] = max(int(part.seqs.max()), self._last_seq.get(part.model, 0))
            self._cover(part.partitions, part.offsets)
        if self._left < before:
            self._last_progress = time.monotonic()
        return self.targets is not None and self._left == 0

    def _cover(self, partitions: np.ndarray, offsets: np.ndarray) -> None:
        """Count the target event offsets these feedback records cover."""
        for partition, (first, end) in (self.targets or {}).items():
            mine = offsets[(partitions == partition) & (offsets >= first) & (offsets < end)] - first
            seen = self._seen[partition]
            new = np.unique(mine[~seen[mine]])
            seen[new] = True
            self._left -= len(new)

    def idle(self) -> bool:
        if self._seen is None:
            self._start()
        if self.targets is None:
            return False
        if self._left == 0:
            return True
        if time.monotonic() - self._last_progress < self.idle_timeout:
            return False
        gaps = [(p, int(a + i)) for p, (a, _) in self.targets.items() for i in np.flatnonzero(~self._seen[p])[:5]]
        log.warning("no feedback for %d event(s) after %.0f s, e.g. (partition, offset) %s; stopping the read",
                    self._left, self.idle_timeout, gaps)
        return True

    def _control(self, topic, partition, checkpoint: bool) -> list:

        out = []
        for model, seq in sorted(self._last_seq.items()):
            record = {"event_id": "", "model": model, "run_id": self.run_id, "seq": seq, "partition": -1,
                      "offset": -1, "g": [], "scalars": {}, "checkpoint": checkpoint}
            out.append(KafkaMessage(topic, partition, -1, -1, model.encode(),
                                    self._codec.encode("scinol.FeedbackBatch", feedback_batches([record])[0], topic)))
        return out

    def heartbeat(self, topic: str, partition: int) -> list:
        if time.monotonic() - self._last_beat < self.heartbeat_seconds:
            return []
        self._last_beat = time.monotonic()
        return self._control(topic, partition, checkpoint=False)

    def last_batch(self, topic: str, partition: int) -> list:
        return self._control(topic, partition, checkpoint=True)

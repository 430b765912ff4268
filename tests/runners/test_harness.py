"""pipelines.runners.harness: Beam's step-time sampler no longer holds a
bundle's end for up to 200 ms."""

import time
import weakref

from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory

from pipelines.runners.harness import SAMPLING_PERIOD_MS, end_bundles_promptly


def _stop_seconds(sampler) -> float:
    """How long ``stop()`` takes after a bundle-long second of sampling
    (the sampler's sleep has grown to its cap by then)."""
    sampler.start()
    time.sleep(1.2)
    began = time.monotonic()
    sampler.stop()
    return time.monotonic() - began


def test_a_sampler_made_after_it_stops_within_its_short_period():
    assert end_bundles_promptly()
    assert end_bundles_promptly()  # a second call changes nothing and says so
    sampler = statesampler.StateSampler("t", CounterFactory())
    assert sampler.sampling_period_ms == SAMPLING_PERIOD_MS
    # Beam's 200 ms period would make each stop wait 0-200 ms; five stops all under 60 ms
    # would then happen with probability 0.3^5
    waits = [_stop_seconds(statesampler.StateSampler("t", CounterFactory())) for _ in range(5)]
    assert max(waits) < 0.060, waits


def test_an_unknown_sampler_is_left_alone(monkeypatch):
    def changed(self, prefix, counter_factory, sampling_period_ms=50, ratio=2.0):
        pass

    monkeypatch.setattr(statesampler.StateSampler, "__init__", changed)
    assert not end_bundles_promptly()
    assert statesampler.StateSampler.__init__.__defaults__ == (50, 2.0)


def test_garbage_is_collected_rarely_and_the_start_up_heap_is_frozen_once():
    import gc

    from pipelines.runners.harness import GC_YOUNG_THRESHOLD, collect_garbage_rarely

    before = gc.get_threshold()
    try:
        collect_garbage_rarely()
        frozen = gc.get_freeze_count()
        assert frozen > 1000 and gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        collect_garbage_rarely()  # a second pipeline in the same process freezes nothing more
        # (a frozen object freed meanwhile, e.g. by a thread an earlier test left running, lowers the count)
        assert gc.get_freeze_count() <= frozen
        class Node:
            pass

        node = Node()
        node.me = node
        alive = weakref.ref(node)
        del node
        gc.collect()
        assert alive() is None  # cycles made since are still collected
    finally:
        gc.set_threshold(*before)

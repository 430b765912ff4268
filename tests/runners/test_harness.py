"""pipelines.runners.harness: the worker's garbage collector settings."""

import weakref


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

"""A runner that keeps no order, on the in-process runner.

:class:`Harness` is what ``RunConfig.reorder`` takes: given a step's name it
makes a :class:`Reorder` transform, which the pipelines put before the decode
step and before each keyed step (pipelines.steps.sequence.reorder). A
``Reorder`` delivers its elements shuffled across bundles, holds some back to
the end, and sends some twice, as Flink's batch mode or Dataflow may:

* ``random``: each element waits in the step's state among up to ``spread``
  others and leaves in a random order; a share ``hold`` is held back to the
  end; a share ``repeat`` is sent twice;
* ``reverse``: everything is held back to the end, then sent last first;
* ``last``: the first element is held back to the end, the rest pass.

"The end" is a firing of the end-of-window timer that finds nothing new
since the one before: the in-process runner fires it after every bundle of a
stage fed by the source, so held elements leave once the input has gone
quiet (at the end of a bounded run; in sharded mode, once the loop waits for
them), and a runner that holds the timer to the real end sends them then.
Choices are seeded by ``seed`` and the step's name, so a failing seed
replays.
"""

from __future__ import annotations

import random
import typing
from typing import NamedTuple

import apache_beam as beam
from apache_beam.coders import PickleCoder, VarIntCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.metrics import Metrics

MODES = ("random", "reverse", "last")


class Harness(NamedTuple):
    """``RunConfig.reorder``: a Reorder per step name."""

    seed: int
    mode: str = "random"
    hold: float = 0.2
    repeat: float = 0.15
    spread: int = 6

    def __call__(self, name: str) -> "Reorder":
        return Reorder(name, self)


class Reorder(beam.PTransform):
    def __init__(self, name: str, harness: Harness):
        super().__init__()
        if harness.mode not in MODES:
            raise ValueError(f"mode {harness.mode!r}: one of {MODES}")
        self.step, self.harness = name, harness

    def expand(self, pcoll):
        return (pcoll
                | "OneKey" >> beam.Map(lambda element: ("reorder", element)).with_output_types(typing.Tuple[str, typing.Any])
                | "Shuffle" >> beam.ParDo(_shuffle(self.step, self.harness)).with_output_types(pcoll.element_type))


def _shuffle(step: str, harness: Harness) -> beam.DoFn:
    """A :class:`_Shuffle` whose timer has a name of its own: the in-process
    runner keeps a stage's timers by name, so two stateful steps of one
    stage with timers of the same name would fire each other's."""
    end = TimerSpec(f"reorder_end_{step}", TimeDomain.WATERMARK)

    class Shuffle(_Shuffle):
        def process(self, element, mixed=beam.DoFn.StateParam(_Shuffle.MIXED), held=beam.DoFn.StateParam(_Shuffle.HELD),
                    seen=beam.DoFn.StateParam(_Shuffle.SEEN), timer=beam.DoFn.TimerParam(end)):
            return self.take(element, mixed, held, seen, timer)

        @on_timer(end)
        def at_end(self, mixed=beam.DoFn.StateParam(_Shuffle.MIXED), held=beam.DoFn.StateParam(_Shuffle.HELD),
                   seen=beam.DoFn.StateParam(_Shuffle.SEEN), fired=beam.DoFn.StateParam(_Shuffle.FIRED),
                   timer=beam.DoFn.TimerParam(end)):
            return self.release(mixed, held, seen, fired, timer)

    return Shuffle(step, harness)


class _Shuffle(beam.DoFn):
    MIXED = BagStateSpec("mixed", PickleCoder())  # waiting to leave in a random order
    HELD = BagStateSpec("held", PickleCoder())  # waiting for the end
    SEEN = ReadModifyWriteStateSpec("seen", VarIntCoder())
    FIRED = ReadModifyWriteStateSpec("fired", VarIntCoder())  # elements seen at the last firing

    def __init__(self, step: str, harness: Harness):
        self.step, self.harness = step, harness

    def setup(self):
        self.repeated = Metrics.counter("reorder", f"repeated_{self.step}")
        self.held_back = Metrics.counter("reorder", f"held_back_{self.step}")

    def _rng(self, n: int) -> random.Random:
        return random.Random(f"{self.harness.seed}/{self.step}/{n}")

    def take(self, element, mixed, held, seen, end):
        _, value = element
        n = seen.read() or 0
        seen.write(n + 1)
        end.set(GlobalWindow().max_timestamp())
        h, rng = self.harness, self._rng(n)
        copies = 2 if h.mode == "random" and rng.random() < h.repeat else 1
        self.repeated.inc(copies - 1)
        if h.mode == "reverse" or (h.mode == "last" and n == 0) or (h.mode == "random" and rng.random() < h.hold):
            self.held_back.inc()
            held.add(value)
            if copies == 2:
                mixed.add(value)
            return
        if h.mode == "last":
            yield value
            return
        for _ in range(copies):
            mixed.add(value)
        waiting = list(mixed.read())
        if len(waiting) < h.spread:
            return
        rng.shuffle(waiting)
        keep = rng.randrange(len(waiting) // 2 + 1)
        mixed.clear()
        for value in waiting[:keep]:
            mixed.add(value)
        yield from waiting[keep:]

    def release(self, mixed, held, seen, fired, end):
        n = seen.read() or 0
        if fired.read() != n:  # something new since the last firing: not the end yet
            fired.write(n)
            end.set(GlobalWindow().max_timestamp())
            return
        waiting, back = list(mixed.read()), list(held.read())
        if not waiting and not back:
            return
        mixed.clear()
        held.clear()
        self._rng(-n).shuffle(waiting)
        yield from waiting
        yield from (reversed(back) if self.harness.mode != "random" else self._rng(-n - 1).sample(back, len(back)))

#!/usr/bin/env python
"""Fault trials of `scinol run` on the embedded broker, and a table of what
they found: trials run, faults injected, events lost, events double-applied,
dead letters by reason, fuzz cases tried.

1. An uninterrupted run: its final models are the reference (and must equal
   the in-memory learner's).
2. Crash trials (--trials, default 12): kill -9 at random times, after random
   checkpoints, inside checkpoint writes (before the rename, before the
   checksum sidecar), and corrupted newest checkpoints (truncated, one bit
   flipped); then a bounded restart to the end. Each final model must equal
   the reference bit for bit, every event must have a prediction, and every
   poison message must be a dead letter with its reason
   (tests/trialkit.py).
3. Broker faults: the broker SIGSTOPped for --pause seconds (default 30) and
   its port refusing connections for --refuse seconds (default 30) while
   events keep coming, with default client settings.
4. Fuzzing: --fuzz-cases mutated/random messages through the decode DoFn and
   the learner (the invariant of tests/test_fuzz.py), then --pipeline-fuzz of
   them, plus absurd sizes and a 17 MiB message, through Kafka and the whole
   pipeline.

    python benchmarks/fault_trials.py [--events 6000] [--trials 12] [--pause 30] [--refuse 30]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))  # the fault injectors and the trial harness live with the tests

from fuzzkit import absurd_values, check_batch, corpus, decoder, fuzz_through_pipeline, oversized_value, seed_values  # noqa: E402
from trialkit import (Fault, TrialResult, make_stream, reference_learners, run_broker_fault_trial,  # noqa: E402
                      run_trial, same_state)

from pipelines.kafka.broker import EmbeddedBroker  # noqa: E402
from pipelines.state.checkpoints import CheckpointStore  # noqa: E402

R, W = "checkpoint-before-rename", "checkpoint-before-manifest"
PLANS = [
    ("random-time", [Fault("kill-random-time")]),
    ("random-time x2", [Fault("kill-random-time"), Fault("kill-random-time")]),
    ("random-time x3", [Fault("kill-random-time")] * 3),
    ("after-checkpoint", [Fault("kill-after-checkpoint")]),
    ("after-checkpoint x2", [Fault("kill-after-checkpoint"), Fault("kill-after-checkpoint", model="b")]),
    ("in-write, before rename (2nd)", [Fault("kill-in-write", point=R, nth=2)]),
    ("in-write, before rename (5th)", [Fault("kill-in-write", point=R, nth=5)]),
    ("in-write, before sidecar (3rd)", [Fault("kill-in-write", point=W, nth=3)]),
    ("in-write, before sidecar (6th)", [Fault("kill-in-write", point=W, nth=6)]),
    ("truncated checkpoint", [Fault("kill-after-checkpoint"), Fault("corrupt-newest", how="truncate")]),
    ("bit-flipped checkpoint", [Fault("kill-after-checkpoint", model="b"),
                                Fault("corrupt-newest", how="flip", model="b")]),
    ("mixed", [Fault("kill-in-write", point=W, nth=4), Fault("kill-after-checkpoint", model="b"),
               Fault("corrupt-newest", how="truncate", model="b"), Fault("kill-random-time")]),
]


def crash_plans(n: int, rng: random.Random):
    """The fixed plans first, then random mixes of them."""
    for i in range(n):
        if i < len(PLANS):
            yield PLANS[i]
        else:
            name, faults = rng.choice(PLANS)
            yield f"{name} (again)", faults


def uninterrupted_reference(bootstrap, stream, work):
    """The final models of a run without faults, checked against the in-memory learner."""
    result = run_trial(bootstrap, "uninterrupted", [], stream, os.path.join(work, "uninterrupted"), seed=0)
    assert result.ok, f"the uninterrupted run itself failed: {result}"
    store = CheckpointStore(os.path.join(work, "uninterrupted", "ckpt"))
    pipeline = {m: store.latest(m).learner for m in stream.data}
    in_memory = reference_learners(stream)
    assert all(same_state(pipeline[m], in_memory[m]) for m in stream.data), "pipeline != in-memory learner"
    return pipeline, result


def fuzz(bootstrap, n_cases: int, n_pipeline: int, seed: int, work: str) -> tuple[int, collections.Counter]:
    fn = decoder()
    values = corpus(n_cases, seed) + list(absurd_values().values()) + seed_values()
    reasons = collections.Counter()
    for lo in range(0, len(values), 2000):  # pipeline-sized batches
        dead, _ = check_batch(fn, values[lo: lo + 2000])
        reasons.update(d["reason"] for d in dead)
    piped = corpus(n_pipeline, seed + 1) + list(absurd_values().values()) + seed_values() + [oversized_value()]
    dead, predictions, expected = fuzz_through_pipeline(bootstrap, f"fuzz-{time.time_ns()}", piped,
                                                        os.path.join(work, "fuzz-ckpt"))
    assert set(dead) == expected and len(predictions) == len(piped) - len(expected), "pipeline fuzz invariant"
    reasons.update(r["reason"] for r in dead.values())
    return len(values) + len(piped), reasons


def print_table(results: list[TrialResult], fuzz_cases: int, fuzz_reasons: collections.Counter, seconds: float):
    print("\n| trial | faults | events | lost | double-applied | re-sent predictions | models bit-identical "
          "| dead letters as expected | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.name} | {'; '.join(r.faults) or '-'} | {r.events} | {r.events_lost} | "
              f"{r.events_double_applied} | {r.duplicate_predictions} | {'yes' if r.models_identical else 'NO'} | "
              f"{'yes' if r.dead_letters_as_expected else 'NO'} | {r.seconds:.0f} |")
    for r in results:
        for note in r.notes:
            print(f"  - {r.name}: {note}")
        for err in r.errors:
            print(f"  - {r.name}: ERROR {err}")
    trials = [r for r in results if r.name != "uninterrupted"]
    dead = collections.Counter()
    for r in trials:
        dead.update(r.dead_letters)
    print("\n| closing note | |\n|---|---|")
    print(f"| trials run | {len(trials)} ({sum(not r.name.startswith('broker') for r in trials)} crash, "
          f"{sum(r.name.startswith('broker') for r in trials)} broker), all passed: "
          f"{'yes' if all(r.ok for r in trials) else 'NO'} |")
    aimed = sum(len(r.faults) for r in trials)
    hit = sum(r.faults_injected for r in trials)
    print(f"| faults injected | {hit}" + (f" ({aimed - hit} more aimed at work already done)" if hit < aimed else "")
          + " |")
    print(f"| events lost | {sum(r.events_lost for r in trials)} of {sum(r.events for r in trials)} |")
    print(f"| events double-applied | {sum(r.events_double_applied for r in trials)} |")
    print(f"| dead letters by reason (trials) | {', '.join(f'{k} {v}' for k, v in sorted(dead.items()))} |")
    print(f"| fuzz cases tried | {fuzz_cases:,} (dead letters: "
          f"{', '.join(f'{k} {v:,}' for k, v in sorted(fuzz_reasons.items()))}) |")
    print(f"| wall time | {seconds / 60:.1f} min |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=6000, help="events per model (two models)")
    ap.add_argument("--trials", type=int, default=12, help="crash trials (10 or more for a meaningful table)")
    ap.add_argument("--pause", type=float, default=30.0, help="seconds the broker is SIGSTOPped")
    ap.add_argument("--refuse", type=float, default=30.0, help="seconds the broker port refuses connections")
    ap.add_argument("--fuzz-cases", type=int, default=100_000, help="messages through the decode DoFn")
    ap.add_argument("--pipeline-fuzz", type=int, default=3000, help="of them, through Kafka and the pipeline")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--work", default=None, help="directory for checkpoints and logs (default: a temp dir)")
    args = ap.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="scinol-fault-trials-")
    started = time.monotonic()
    rng = random.Random(args.seed)
    stream = make_stream(args.events, seed=args.seed)
    say = lambda text: print(f"[faults] {text}", file=sys.stderr, flush=True)  # noqa: E731
    results = []
    with EmbeddedBroker() as broker:
        say(f"broker {broker.bootstrap}; work dir {work}; {2 * args.events} events + "
            f"{len(stream.poison)} poison messages per trial")
        references, baseline = uninterrupted_reference(broker.bootstrap, stream, work)
        results.append(baseline)
        for i, (name, faults) in enumerate(crash_plans(args.trials, rng)):
            r = run_trial(broker.bootstrap, f"{i + 1:02d} {name}", faults, stream, os.path.join(work, f"trial-{i}"),
                          seed=rng.randrange(1 << 30), references=references)
            results.append(r)
            say(f"{r.name}: {'ok' if r.ok else 'FAILED'} ({r.seconds:.0f} s) {'; '.join(r.notes)} {r.errors}")
        for kind, seconds in (("sigstop", args.pause), ("refuse", args.refuse)):
            r = run_broker_fault_trial(kind, seconds, stream, os.path.join(work, f"broker-{kind}"))
            results.append(r)
            say(f"{r.name}: {'ok' if r.ok else 'FAILED'} ({r.seconds:.0f} s) {'; '.join(r.notes)} {r.errors}")
        fuzz_cases, fuzz_reasons = fuzz(broker.bootstrap, args.fuzz_cases, args.pipeline_fuzz, args.seed, work)
        say(f"fuzz: {fuzz_cases:,} cases, invariant held")
    print_table(results, fuzz_cases, fuzz_reasons, time.monotonic() - started)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``scinol compile``: the kernels ``scinol learn`` and ``scinol produce``
call, compiled ahead of time, so that they start without numba (about
0.5 s less per command)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from . import learn
from .errors import UsageError

# Small files of every format `scinol learn` reads, each row shape it
# handles: dense and sparse, weights, VW namespaces and tags, and a line
# with non-ASCII text, which the compiled parsers hand to Python (as they
# do a malformed one: so reporting a bad line needs no numba either).
_FILES = {
    "dense.csv": "y,a,b,c\n1,0.5,-2,3\n-1,1.5,0,-3\n1,2,1,0.25\n",
    "weighted.csv": "y,w,a,b\n1,2,0.5,-2\n-1,0.5,1.5,0\n",
    "rows.libsvm": "1 1:0.5 3:-2\n-1 2:1.5 40:3\n1:2 1:1 2:2 3:3\n-1 2:1 # café\n",
    "rows.vw": "1 |a x:0.5 y |b z:-2\n-1 2 'tag |a x:1.5 |b w\n1 |a y:1 z:2\n-1 |a café:1 |b z\n",
    "classes.libsvm": "0 1:0.5 2:1\n2 1:-1 3:2\n1 2:3\n",
}
_RUNS = (
    ["dense.csv", "--label", "y"],
    ["weighted.csv", "--label", "y", "--weight-column", "w"],
    ["rows.libsvm"],
    ["rows.vw", "-b", "6"],  # a small hash space: kotlowski2 keeps a d x d matrix
    ["rows.vw", "-b", "6", "-q", "ab"],
)


def learn_runs(folder: str, learners: list[str]) -> list[list[str]]:
    """``scinol learn`` argument lists over the small files in ``folder``:
    every learner on every file (with the logistic loss, or the first loss
    it is defined for), and softmax once."""
    from learners.registry import make_algorithm

    runs = []
    for name in learners:
        losses = getattr(getattr(make_algorithm(name), "spec", None), "losses", None) or ("logistic",)
        loss = "logistic" if "logistic" in losses else losses[0]
        runs += [["learn", os.path.join(folder, run[0]), *run[1:], "--learner", name, "--loss", loss, "--quiet"]
                 for run in _RUNS]
    runs.append(["learn", os.path.join(folder, "classes.libsvm"), "--loss", "softmax", "--quiet"])
    return runs


def _learn(argv: list[str]) -> None:
    """``scinol learn ARGV`` in this process."""
    parser = argparse.ArgumentParser(prog="scinol")
    learn.add_parser(parser.add_subparsers())
    learn.run(parser.parse_args(argv))


def _encode(folder: str) -> None:
    """Encode each small file's rows as ``scinol produce`` does (no broker:
    the values are made and dropped), so its kernels are compiled too."""
    from pipelines.files.datafiles import open_reader
    from pipelines.records.event_values import file_values
    from schemas.codec import Codec

    for run in _RUNS[:4]:
        label = run[run.index("--label") + 1] if "--label" in run else None
        weight = run[run.index("--weight-column") + 1] if "--weight-column" in run else None
        reader = open_reader(os.path.join(folder, run[0]), label=label, weight=weight)
        for _ in file_values(reader, "default", Codec(), None):
            pass


def run(args) -> int:
    from learners import aot
    from learners.jit import kernels_dir
    from learners.registry import learner_names

    folder = args.out or kernels_dir()
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"compile: cannot write to {folder}: {exc.strerror}") from None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scinol-compile-") as data:
        for name, text in _FILES.items():
            with open(os.path.join(data, name), "w") as f:
                f.write(text)
        for argv in learn_runs(data, learner_names()):
            _learn(argv)
        _encode(data)
    traced = time.perf_counter() - start
    try:
        built = aot.build(folder)
    except Exception as exc:  # pycc gone from numba, no C compiler, a read-only folder: learn still works
        raise UsageError(f"compile: could not build the kernels into {folder}: {exc}") from None
    print(f"compiled {built['exports']} kernel exports ({built['kernels']} kernels) into {built['path']} "
          f"in {traced + built['seconds']:.0f} s; `scinol learn` and `scinol produce` now start without numba", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile the kernels of `scinol learn` and `scinol produce` ahead of time, "
                                       "for a fast start",
                       description="Runs `scinol learn` over small files of each format with every learner, and "
                                   "encodes them as `scinol produce` does, then compiles the kernels they called, "
                                   "with the argument types they called them with, into one extension module "
                                   "(numba's pycc). Later commands call it without importing numba, for as long "
                                   "as the sources it was built from are unchanged; any other call compiles "
                                   "with numba as before.")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="where to write it (default: $SCINOL_KERNELS_DIR, else learners/__pycache__/aot); "
                        "set SCINOL_KERNELS_DIR to the same folder for later commands")
    p.set_defaults(func=run)

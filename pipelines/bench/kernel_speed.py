"""Throughput of the compiled ScInOL kernels (logistic loss) beside VW's own
driver on the same rows; used by ``benchmarks/bench_kernels.py`` and
``scinol bench throughput``.

Dense: Kempka et al. 2019 toy data (21 features). Sparse: 2^20 dimensions, 50 non-zeros
per row. Each figure is the best of ``repeats`` runs with a fresh model, the
data fed in batches of 65,536 rows as a streaming job would, JIT compilation
warmed up beforehand. "learn()" is the public ``model.learn(X, y)`` (input
validation included); "kernel" calls the learner's compiled batch kernel
(``learners.kernels.LEARN_ROWS``) directly on the state arrays, so the gap
between the two is Python overhead. VW's driver learns from the same rows
written as a VW text file.
"""

from __future__ import annotations

import glob
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from learners import make_algorithm, make_learner
from learners import kernels as K
from learners.datasets import toy_examples
from learners.losses import LOGISTIC

BATCH = 65_536
SPARSE_BITS, SPARSE_NNZ = 20, 50
DENSE_TARGET = 5e6  # examples/s, ScInOL2 dense, one core


def sparse_examples(n: int, seed: int = 0):
    """CSR rows: 50 distinct sorted indices in [0, 2^20), lognormal values with
    random signs; labels from a sparse random comparator through a sigmoid."""
    rng = np.random.default_rng([seed, 20])
    idx = np.sort(rng.integers(0, 2**SPARSE_BITS, size=(n, SPARSE_NNZ)), axis=1)
    while (bad := np.flatnonzero((idx[:, 1:] == idx[:, :-1]).any(axis=1))).size:
        idx[bad] = np.sort(rng.integers(0, 2**SPARSE_BITS, size=(bad.size, SPARSE_NNZ)), axis=1)
    data = rng.lognormal(size=idx.shape) * rng.choice([-1.0, 1.0], size=idx.shape)
    density = 0.1  # a tenth of the coordinates matter; margin std about 2
    u = np.where(rng.random(2**SPARSE_BITS) < density, rng.normal(size=2**SPARSE_BITS), 0.0)
    u *= 2.0 / math.sqrt(density * SPARSE_NNZ * math.e**2)
    p = 1.0 / (1.0 + np.exp(-(u[idx] * data).sum(axis=1)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    indptr = np.arange(n + 1, dtype=np.int64) * SPARSE_NNZ
    return (indptr, idx.reshape(-1), data.reshape(-1)), y


def batches(X, n):
    """[(start, stop, batch)] with batches of BATCH rows, sliced ahead of timing."""
    out = []
    for a in range(0, n, BATCH):
        b = min(a + BATCH, n)
        if isinstance(X, tuple):
            indptr, indices, data = X
            lo, hi = indptr[a], indptr[b]
            out.append((a, b, (indptr[a:b + 1] - lo, indices[lo:hi], data[lo:hi])))
        else:
            out.append((a, b, X[a:b]))
    return out


def run_learn(name, parts, y):
    model = make_learner(name, "logistic")
    total = 0.0
    t0 = time.perf_counter()
    for a, b, Xb in parts:
        total += model.learn(Xb, y[a:b], return_losses=True)[1].sum()
    return time.perf_counter() - t0, total / len(y)


def run_kernel(name, parts, y, n_coords):
    algo = make_algorithm(name)
    state = algo.init_state(n_coords, 1)
    P, Q = state.arrays["P"], state.arrays["Q"]
    prm, glob_ = np.array(list(algo.params.values())), np.zeros(len(algo.spec.globals))
    kernel = K.LEARN_ROWS[algo.spec.code]
    scores, losses = np.empty((len(y), 1)), np.empty(len(y))
    no_indices = np.empty(0, dtype=np.int64)
    no_weights = np.empty(0)  # all 1
    t0 = time.perf_counter()
    for a, b, Xb in parts:
        if isinstance(Xb, tuple):
            kernel(prm, glob_, P, Q, *Xb, False, True, y[a:b], no_weights, LOGISTIC, 0.0, scores[a:b], losses[a:b])
        else:
            indptr = np.arange(b - a + 1, dtype=np.int64) * Xb.shape[1]
            kernel(prm, glob_, P, Q, indptr, no_indices, Xb.reshape(-1), True, True, y[a:b], no_weights, LOGISTIC,
                   0.0, scores[a:b], losses[a:b])
    return time.perf_counter() - t0, losses.mean()


def write_vw(path, X, y):
    """Rows as VW text ``label |f index:value ...`` (%.9g: exact for VW's float32)."""
    if isinstance(X, tuple):
        cols, vals = X[1].reshape(len(y), -1), X[2].reshape(len(y), -1)
    else:
        cols, vals = np.broadcast_to(np.arange(X.shape[1]), X.shape), X
    k = cols.shape[1]
    fmt = "%d |f " + " ".join(["%d:%.9g"] * k) + "\n"
    with open(path, "w") as f:
        for a in range(0, len(y), BATCH):
            b = min(a + BATCH, len(y))
            rows = np.empty((b - a, 1 + 2 * k))
            rows[:, 0], rows[:, 1::2], rows[:, 2::2] = y[a:b], cols[a:b], vals[a:b]
            f.write("".join(fmt % tuple(r) for r in rows.tolist()))


def vw_binary():
    """A ``vw`` executable, if one is installed (the vowpalwabbit wheel ships none)."""
    import vowpalwabbit
    found = glob.glob(os.path.join(os.path.dirname(vowpalwabbit.__file__), "**", "vw"), recursive=True)
    return shutil.which("vw") or (found[0] if found else None)


def vw_command() -> tuple[list[str], str]:
    """(argv prefix running VW's command-line driver, what it is). Without a
    ``vw`` binary: ``python -m vowpalwabbit``, the wheel's entry point, which
    hands the arguments to the same C++ driver (no stdin)."""
    exe = vw_binary()
    return ([exe], "vw binary") if exe else ([sys.executable, "-m", "vowpalwabbit"], "python -m vowpalwabbit")


def run_vw(path, bits):
    """VW's driver over the file, default learner; (seconds, progressive avg loss)."""
    args = ["--loss_function", "logistic", "--no_stdin", "-b", str(bits), "-d", path]
    exe = vw_binary()
    t0 = time.perf_counter()
    if exe:
        err = subprocess.run([exe, *args], check=True, capture_output=True, text=True).stderr
        seconds = time.perf_counter() - t0
        return seconds, float(re.search(r"average loss = ([-+.\deE]+)", err).group(1))
    from vowpalwabbit import Workspace
    ws = Workspace(arg_list=[*args, "--quiet"])  # runs the driver over -d FILE
    loss = ws.get_sum_loss() / ws.get_weighted_examples()
    ws.finish()
    return time.perf_counter() - t0, loss


def measure(rows: int, sparse_rows: int, repeats: int, with_vw: bool, log=None) -> dict:
    """Every figure of the kernel benchmark: rows of (data, path, seconds,
    progressive loss, rows, non-zeros), scinol2 learn() speed per data kind,
    and the ratio ours/VW per kind when VW runs."""
    Xd, yd = toy_examples(rows, seed=0)
    Xs, ys = sparse_examples(sparse_rows)
    sets = [("dense", Xd, yd, Xd.shape[1] + 1, rows), ("sparse", Xs, ys, 2**SPARSE_BITS + 1, sparse_rows)]
    for name in ("scinol1", "scinol2"):  # warm-up: compile (or load) the kernels
        make_learner(name, "logistic").learn(Xd[:1000], yd[:1000])
        make_learner(name, "logistic").learn(batches(Xs, 1000)[0][2], ys[:1000])
    results, speed = [], {}
    tmp = tempfile.mkdtemp(prefix="bench_kernels_")
    try:
        for kind, X, y, n_coords, n in sets:
            if log:
                log(f"kernels: {kind}, {n:,} rows")
            nnz = (np.count_nonzero(X[2]) if kind == "sparse" else np.count_nonzero(X)) + n  # + bias
            parts = batches(X, n)
            runs = [(f"{a} {how}", how, a) for a in ("scinol2", "scinol1") for how in ("learn()", "kernel")]
            for label, how, algo in runs:
                f = (lambda: run_learn(algo, parts, y)) if how == "learn()" else (lambda: run_kernel(algo, parts, y, n_coords))
                timings = [f() for _ in range(repeats)]
                results.append((kind, label, min(s for s, _ in timings), timings[0][1], n, nnz))
            speed[kind] = n / results[-4][2]  # scinol2 learn()
            if with_vw:
                path = os.path.join(tmp, f"{kind}.vw")
                write_vw(path, X, y)
                timings = [run_vw(path, SPARSE_BITS) for _ in range(repeats)]
                results.append((kind, "VW driver (text)", min(s for s, _ in timings), timings[0][1], n, nnz))
                os.remove(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = [dict(data=kind, path=label, rows=n, nnz_per_row=nnz / n, seconds=sec, examples_per_s=n / sec,
                  ns_per_nnz=sec * 1e9 / nnz, progressive_logloss=loss)
             for kind, label, sec, loss, n, nnz in results]
    ratios = {}
    if with_vw:
        for kind in speed:
            vw = next(r for r in table if r["data"] == kind and r["path"].startswith("VW"))
            ratios[kind] = speed[kind] / vw["examples_per_s"]
    return {"table": table, "speed": speed, "ratios": ratios}


VW_NOTE = ("VW: its own driver ({how}), default learner, --loss_function logistic, -b {bits}, one pass, no cache; "
           "its time includes parsing the text file (VW parses in its own thread) and setup; ours is the kernel "
           "on in-memory arrays, no parsing.")

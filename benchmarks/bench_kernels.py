#!/usr/bin/env python
"""Throughput of the compiled ScInOL kernels (logistic loss); prints a table.

Dense: Kempka et al. 2019 toy data (21 features). Sparse: 2^20 dimensions, 50 non-zeros
per row. Each figure is the best of --repeats runs with a fresh model, the data
fed in batches of 65,536 rows as a streaming job would, JIT compilation warmed
up beforehand. "learn()" is the public ``model.learn(X, y)`` (input validation
included); "kernel" calls the learner's compiled batch kernel
(``learners.kernels.LEARN_ROWS``) directly on the state arrays, so the gap
between the two is Python overhead.
If ``vowpalwabbit`` is installed, VW's own driver learns from the same rows
written as a VW text file, and the ratio ours/VW is printed.

The measuring code is :mod:`pipelines.bench.kernel_speed` (also behind
``scinol bench throughput``).
"""

from __future__ import annotations

import argparse
import json

from pipelines.bench.kernel_speed import BATCH, DENSE_TARGET, SPARSE_BITS, VW_NOTE, measure, vw_binary
from pipelines.bench.optional import have


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="dense rows (default 1,000,000)")
    ap.add_argument("--sparse-rows", type=int, default=1_000_000, help="sparse rows (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="best of N runs (default 3)")
    ap.add_argument("--no-vw", action="store_true", help="skip the VW comparison")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    opts = ap.parse_args()

    have_vw = not opts.no_vw and have("vowpalwabbit")
    if not opts.no_vw and not have_vw:
        print("vowpalwabbit not installed: skipped VW comparison")
    got = measure(opts.rows, opts.sparse_rows, opts.repeats, have_vw)
    table, speed, ratios = got["table"], got["speed"], got["ratios"]

    print(f"ScInOL logistic, batches of {BATCH:,} rows, best of {opts.repeats}; "
          f"ns/nnz counts the bias as a non-zero")
    head = f"{'data':<7} {'path':<17} {'rows':>9} {'nnz/row':>7} {'seconds':>8} {'examples/s':>12} {'ns/nnz':>7} {'avg loss':>8}"
    print(head + "\n" + "-" * len(head))
    for r in table:
        print(f"{r['data']:<7} {r['path']:<17} {r['rows']:>9,} {r['nnz_per_row']:>7.1f} {r['seconds']:>8.3f} "
              f"{r['examples_per_s']:>12,.0f} {r['ns_per_nnz']:>7.2f} {r['progressive_logloss']:>8.4f}")
    verdict = "met" if speed["dense"] >= DENSE_TARGET else "NOT met"
    print(f"\ntarget >= {DENSE_TARGET / 1e6:.0f}M examples/s dense (scinol2 learn()): "
          f"{speed['dense'] / 1e6:.2f}M, {verdict}")
    for kind, ratio in ratios.items():
        print(f"ratio ours/VW, {kind:<6}: {ratio:6.2f}x  (scinol2 learn() vs VW driver)")
    if have_vw:
        how = "binary" if vw_binary() else "Workspace(-d FILE)"
        print(VW_NOTE.format(how=f"vowpalwabbit {how}", bits=SPARSE_BITS))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"batch_rows": BATCH, "repeats": opts.repeats, "vw_available": have_vw,
                       "dense_target_met": speed["dense"] >= DENSE_TARGET, "ratio_ours_vw": ratios,
                       "results": table}, f, indent=2)


if __name__ == "__main__":
    main()

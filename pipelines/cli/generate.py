"""``scinol generate``: write a generated data set to a file."""

from __future__ import annotations

import sys

import numpy as np

from .errors import UsageError


def run(args) -> int:
    from learners.datasets import toy_examples

    if args.n < 1:
        raise UsageError(f"--n must be at least 1, not {args.n}")
    X, y = toy_examples(args.n, args.seed)
    with open(args.output, "w") as out:
        if args.format == "csv":
            out.write(",".join([f"x{i}" for i in range(1, X.shape[1] + 1)] + ["y"]) + "\n")
            np.savetxt(out, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        else:
            for row, label in zip(X, y):
                feats = " ".join(f"{j + 1}:{v:.17g}" for j, v in enumerate(row) if v != 0.0)
                out.write(f"{label:g} {feats}\n")
    print(f"wrote {args.n} examples to {args.output}", file=sys.stderr)
    return 0



def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="write a generated data set to a file",
                       description="Data sets from the papers, written as CSV (label column 'y') or libsvm.")
    p.add_argument("name", choices=["toy"], help="toy: the illustrative data of Kempka et al. 2019 §4.1 (21 features, scales 2^-10..2^10)")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--n", type=int, default=5000, help="number of examples (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--format", choices=["csv", "libsvm"], default="csv")
    p.set_defaults(func=run)

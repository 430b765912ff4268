#!/usr/bin/env python
"""`scinol bench accuracy` as a script: the paper's toy experiment (Figure 1)
and multi-pass test curves on real data (Figure 2), beside Vowpal Wabbit and
River when installed (``pip install -e '.[bench]'``). Same options:

    python benchmarks/accuracy.py [--quick] [--out docs] [--paper-data DIR] ...

The code is in :mod:`pipelines.bench` (installed with the package).
"""

import sys

from pipelines.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "accuracy", *sys.argv[1:]]))

#!/usr/bin/env python
"""`scinol bench throughput` as a script: examples/s of the kernels vs VW's
driver, `scinol learn` vs VW's command-line driver, and the pipeline vs a
plain confluent-kafka loop, with ratios. Same options:

    python benchmarks/throughput.py [--rows N] [--no-pipeline] [--out docs] ...

The code is in :mod:`pipelines.bench` (installed with the package).
"""

import sys

from pipelines.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "throughput", *sys.argv[1:]]))

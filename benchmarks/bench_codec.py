#!/usr/bin/env python
"""Events/s of the Avro codec, per event (fastavro, as the pipeline decoded
before the columnar path) beside the columnar codec, on the same bytes in
the same run. Same options as the module:

    python benchmarks/bench_codec.py [--n 200000] [--batch 1000] [--pipeline 200000]

The code is in :mod:`pipelines.bench.codec_speed` (installed with the package).
"""

from pipelines.bench.codec_speed import main

if __name__ == "__main__":
    main()

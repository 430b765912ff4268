"""Benchmarks behind ``scinol bench``: the paper's experiments reproduced, and
accuracy and speed side by side with Vowpal Wabbit and River.

Lives inside the installed ``pipelines`` package (``benchmarks/`` is not
installed) so that ``scinol bench`` works after ``pip install -e .``; the
scripts in ``benchmarks/`` are thin wrappers around these modules.

- :mod:`.accuracy`   ``scinol bench accuracy``: toy (Kempka et al. 2019 §4.1) + data sets (Figure 2 style)
- :mod:`.throughput` ``scinol bench throughput``: kernels, ``scinol learn``, pipeline vs the alternatives
"""

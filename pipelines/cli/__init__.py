"""The ``scinol`` command line: one module per sub-command, wired in
:mod:`pipelines.cli.main`."""

from pipelines.runners.startup import one_blas_thread

one_blas_thread()  # here, before any sub-command's module imports NumPy

"""The ``scinol`` command line: one module per sub-command, wired in
:mod:`pipelines.cli.main`."""

"""Provisioning what the tests and local runs need beside the project:
downloaded once into the cache folder (``SCINOL_CACHE``, default
``~/.cache/scinol``), never into the repository."""

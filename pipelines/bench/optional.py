"""Optional competitors: Vowpal Wabbit and River come with the ``bench``
extra (``pip install -e '.[bench]'``); without them the benchmark says so
and leaves their columns out."""

from __future__ import annotations

import importlib

INSTALL_HINT = "pip install -e '.[bench]'"


def have(package: str) -> bool:
    """True if ``package`` imports (an import, not find_spec, so that a
    package blocked in sys.modules, or broken, counts as absent)."""
    try:
        importlib.import_module(package)
    except ImportError:
        return False
    return True


def missing_message(package: str, what: str) -> str:
    return f"{package} not installed: {what} skipped ({INSTALL_HINT})"

"""Ahead-of-time kernels: every kernel numba has compiled in this process,
exported with the argument types it was compiled for into one extension
module (numba's ``pycc``), which :mod:`learners.jit` then calls without
importing numba.

The caller runs the code paths to export first (``scinol compile`` runs
``scinol learn`` over small files of each format, with every learner), so
what is exported is what those paths call, argument types included.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

from . import jit


def type_key(t):
    """:func:`learners.jit.args_key`'s part for numba type ``t``; None for a
    type no export takes."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    if isinstance(t, types.Array):
        return (as_dtype(t.dtype).str, t.ndim, t.layout, not t.mutable) if t.aligned else None
    if t == types.boolean:
        return "b1"
    if t == types.int64:
        return "i8"
    if t == types.float64:
        return "f8"
    return None


def _entry(kernel, n_args: int):
    """A function that calls ``kernel``'s dispatcher with its arguments.
    pycc compiles an exported function with default options; through this
    entry the kernel itself is compiled by its dispatcher, with its own
    (``error_model="numpy"``, ``inline``, ...)."""
    names = ", ".join(f"a{i}" for i in range(n_args))
    scope = {"target": kernel.dispatcher}
    exec(f"def entry({names}):\n    return target({names})\n", scope)  # noqa: S102 - generated, no user input
    return scope["entry"]


def exported_kernels() -> list[tuple[jit.Kernel, object]]:
    """(kernel, numba signature) for each overload numba compiled (or loaded)
    so far of each kernel that is not IR-inlined, whose argument types an
    export can take."""
    out = []
    for kernel in jit.compiled_kernels():
        if kernel.options.get("inline") == "always":
            continue
        for cres in kernel.dispatcher.overloads.values():
            if all(type_key(t) is not None for t in cres.signature.args):
                out.append((kernel, cres.signature))
    return out


def build(folder: str) -> dict:
    """Compile :func:`exported_kernels` into ``folder`` and write the
    manifest :mod:`learners.jit` checks before it loads them. Returns
    {"kernels", "exports", "seconds", "path"}."""
    from numba.pycc import CC

    entries = exported_kernels()
    if not entries:
        raise RuntimeError("no compiled kernels to export: run the code paths first")
    os.makedirs(folder, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".build-", dir=folder)
    cc = CC(jit.MODULE_NAME)
    cc.output_dir = staging
    cc.verbose = False
    exports: dict[str, list] = {}
    for n, (kernel, signature) in enumerate(entries):
        symbol = f"k{n}_{kernel.__name__}"
        cc.export(symbol, signature)(_entry(kernel, len(signature.args)))
        exports.setdefault(kernel.key, []).append([symbol, [type_key(t) for t in signature.args]])
    sources = sorted({os.path.abspath(m.__file__) for m in _kernel_modules()})
    folders = sorted({os.path.dirname(p) for p in sources})
    watched = sorted(os.path.join(d, n) for d in folders for n in os.listdir(d) if n.endswith(".py"))
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(), _releasing_gil():
            warnings.simplefilter("ignore")  # pycc's own deprecation notice: the JIT stays the fallback
            cc.compile()
        name = _install(os.path.join(staging, cc.output_file), folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = time.perf_counter() - start
    manifest = {"file": name, "numpy": np.__version__,
                "python": sys.version, "sources": watched, "digest": jit.sources_digest(watched),
                "exports": exports}
    staged = os.path.join(folder, jit.MANIFEST + ".tmp")
    with open(staged, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(staged, os.path.join(folder, jit.MANIFEST))
    for old in glob.glob(os.path.join(folder, jit.MODULE_NAME + "-*")):
        if os.path.basename(old) != name:
            os.unlink(old)  # a process that loaded it keeps its mapping
    return {"kernels": len(exports), "exports": len(entries), "seconds": seconds, "path": os.path.join(folder, name)}


def _install(built: str, folder: str) -> str:
    """Move the module into ``folder`` under a name of its own, never over a
    file another process may have loaded; returns that name."""
    name = f"{jit.MODULE_NAME}-{time.time_ns():x}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    os.replace(built, os.path.join(folder, name))
    return name


def _kernel_modules():
    names = {k.__module__ for k in jit.compiled_kernels()}
    return [sys.modules[n] for n in names if getattr(sys.modules.get(n), "__file__", None)]


@contextlib.contextmanager
def _releasing_gil():
    """pycc compiles exports with default flags, which hold the GIL in the
    exported function; numba's ``nogil`` kernels (the file parsers, run on
    several threads) must not. Every export is nopython code, which never
    needs the GIL, so while pycc compiles its flags release it."""
    import numba.pycc.compiler as pycc_compiler

    original = pycc_compiler.Flags

    class Flags(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    pycc_compiler.Flags = Flags
    try:
        yield
    finally:
        pycc_compiler.Flags = original

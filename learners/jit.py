"""Compiled kernels: numba's JIT, or ahead-of-time exports when built.

:func:`njit` is ``numba.njit`` made lazy. A decorated function becomes a
:class:`Kernel`, and importing a module of kernels does not import numba
(about 0.2 s, and 0.3 s more for its first compile or cache load).

A call first looks for an ahead-of-time export of the kernel, built by
``scinol compile`` (:mod:`learners.aot`) from these very sources, whose
argument types are the call's. Without one, every kernel becomes a numba
dispatcher at once ("materialized"): numba compiles a kernel's callees
from the module globals, so they must all be dispatchers before it
compiles any. From then on numba runs every kernel, as it always did.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading

import numpy as np

_LOCK = threading.RLock()
_KERNELS: list["Kernel"] = []
_CACHE_CHECKS: list[tuple[str, "Kernel"]] = []
_STATE = {"numba": None, "exports": None}  # numba.njit once materialized; the loaded exports, {} when none

KERNELS_DIR_ENV = "SCINOL_KERNELS_DIR"
"""Where ``scinol compile`` writes, and kernels look for, the ahead-of-time module."""
MODULE_NAME = "scinol_kernels"
MANIFEST = MODULE_NAME + ".json"


def kernels_dir() -> str:
    return os.environ.get(KERNELS_DIR_ENV) or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                            "__pycache__", "aot")


class Kernel:
    """A compiled function that compiles only when first called."""

    def __init__(self, py_func, options: dict):
        self.py_func, self.options = py_func, options
        self.__name__, self.__qualname__ = py_func.__name__, py_func.__qualname__
        self.__module__, self.__doc__ = py_func.__module__, py_func.__doc__
        self.dispatcher = None  # numba's, once materialized

    @property
    def key(self) -> str:
        return f"{self.__module__}:{self.__qualname__}"

    def __call__(self, *args, **kwargs):
        if self.dispatcher is None:
            exported = _exports().get(self.key)
            if exported is not None and not kwargs:  # exports take their arguments by position only
                found = exported.get(args_key(args))
                if found is not None:
                    return found(*args)
            materialize()
        return self.dispatcher(*args, **kwargs)

    def __reduce__(self):  # by name: importing its module makes it again (Beam pickles steps that hold kernels)
        return _kernel_named, (self.__module__, self.__qualname__)

    def __repr__(self) -> str:
        return f"<Kernel {self.key} ({'numba' if self.dispatcher is not None else 'not compiled yet'})>"


def _kernel_named(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def njit(*args, **options):
    """``@njit``, ``@njit(**options)`` or ``njit(**options)(function)``: as numba's."""
    if args and callable(args[0]) and not options:
        return _kernel(args[0], {})
    return lambda py_func: _kernel(py_func, options)


def _kernel(py_func, options: dict):
    """A :class:`Kernel`, or once materialized numba's dispatcher itself:
    the module being imported is already past the rewrite of globals."""
    with _LOCK:
        kernel = Kernel(py_func, options)
        _KERNELS.append(kernel)
        if _STATE["numba"] is None:
            return kernel
        kernel.dispatcher = _STATE["numba"](**options)(py_func)
        return kernel.dispatcher


def compiled_kernels() -> list[Kernel]:
    """The kernels numba has compiled (or loaded from its cache) in this process."""
    with _LOCK:
        return [k for k in _KERNELS if k.dispatcher is not None and k.dispatcher.overloads]


def materialize() -> None:
    """Make every kernel a numba dispatcher and put the dispatchers where
    numba looks up callees: the globals of every module holding kernels."""
    with _LOCK:
        if _STATE["numba"] is not None:
            return
        import numba

        dispatchers = {id(k): numba.njit(**k.options)(k.py_func) for k in _KERNELS}
        for module, kernel in _CACHE_CHECKS:
            _drop_stale_cache(module, dispatchers[id(kernel)])
        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", None)
            if not isinstance(names, dict) or not names.get("__name__", "").startswith(_PACKAGES):
                continue
            for name, value in list(names.items()):
                if isinstance(value, Kernel):
                    names[name] = dispatchers[id(value)]
                elif isinstance(value, Intrinsic):
                    names[name] = value.compiled()
        # Only now, with stale caches gone and every callee in place: another
        # thread that finds a kernel's dispatcher set may call it at once.
        for kernel in _KERNELS:
            kernel.dispatcher = dispatchers[id(kernel)]
        _STATE["numba"] = numba.njit


class Intrinsic:
    """A numba intrinsic (LLVM IR a kernel inlines) made lazy like a kernel:
    ``build()`` imports numba and returns the intrinsic; :func:`materialize`
    puts it in the globals of the modules that name it. Called from Python
    (a kernel's plain function), it is ``python``."""

    def __init__(self, build, python):
        self.build, self.python, self._compiled = build, python, None

    def compiled(self):
        with _LOCK:
            if self._compiled is None:
                self._compiled = self.build()
            return self._compiled

    def __call__(self, *args):
        return self.python(*args)


def _build_prefetch_row():
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.core.extending import intrinsic

    @intrinsic
    def prefetch_row(typingctx, array, j):
        def codegen(context, builder, signature, args):
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            stride = cgutils.unpack_tuple(builder, view.strides, array_type.ndim)[0]
            byte = builder.gep(builder.bitcast(view.data, ir.IntType(8).as_pointer()), [builder.mul(args[1], stride)])
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte.type, i32, i32, i32]), "llvm.prefetch.p0")
            builder.call(fn, [byte, i32(0), i32(3), i32(1)])  # a read, keep in all cache levels, data
            return context.get_dummy_value()

        if isinstance(array, types.Array) and isinstance(j, types.Integer):
            return types.void(array, j), codegen
        return None

    return prefetch_row


prefetch_row = Intrinsic(_build_prefetch_row, lambda array, j: None)
"""``prefetch_row(array, j)``: ask the CPU to bring the first cache line of
``array[j]`` in, and go on. A kernel that will visit scattered rows soon
(the coordinates of the next example) lets their loads overlap the work on
the current one. A hint: it changes no value and cannot fault."""


_PACKAGES = ("learners", "pipelines", "schemas", "tests", "benchmarks")
"""Modules whose kernels' globals :func:`materialize` rewrites."""


def args_key(args) -> tuple | None:
    """The types numba's dispatcher would see for ``args``, as a hashable
    key (:func:`learners.aot.type_key` makes the same from numba's types);
    None when any argument is of a kind the exports never take."""
    key = []
    for a in args:
        if type(a) is np.ndarray and a.dtype.isnative:
            flags = a.flags  # numba types an unaligned array as an aligned one, so alignment is not in the key
            layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
            key.append((a.dtype.str, a.ndim, layout, not flags.writeable))
        elif isinstance(a, (bool, np.bool_)):
            key.append("b1")
        elif isinstance(a, (int, np.int64)) and -(1 << 63) <= a < (1 << 63):
            key.append("i8")
        elif isinstance(a, (float, np.float64)):
            key.append("f8")
        else:
            return None
    return tuple(key)


def _exports() -> dict:
    """kernel key -> {args key -> exported function}, from the ahead-of-time
    module if it was built from the sources as they are now; else {}."""
    exports = _STATE["exports"]
    if exports is None:
        with _LOCK:
            if _STATE["exports"] is None:
                _STATE["exports"] = load_exports(kernels_dir())
            exports = _STATE["exports"]
    return exports


def load_exports(folder: str) -> dict:
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return {}
    if manifest.get("numpy") != np.__version__ or sources_digest(manifest.get("sources", [])) != manifest.get("digest"):
        return {}  # built from other sources or for another NumPy: numba compiles instead
    path = os.path.join(folder, manifest["file"])
    try:
        spec = importlib.util.spec_from_file_location(
            MODULE_NAME, path, loader=importlib.machinery.ExtensionFileLoader(MODULE_NAME, path))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError):
        return {}
    exports: dict = {}
    for kernel, entries in manifest["exports"].items():
        for symbol, key in entries:
            exports.setdefault(kernel, {})[_as_key(key)] = getattr(module, symbol)
    return exports


def _as_key(key) -> tuple:
    """A key read back from JSON: lists -> tuples."""
    return tuple(tuple(part) if isinstance(part, list) else part for part in key)


def sources_digest(paths) -> str | None:
    """SHA-256 over the named files' paths and bytes; None if one is gone."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            with open(path, "rb") as f:
                digest.update(path.encode() + b"\0" + f.read())
        except OSError:
            return None
    return digest.hexdigest()


def drop_stale_cache(module: str, kernel) -> None:
    """Numba keys its on-disk cache to the kernel's own file only, but the
    kernels of ``module`` (e.g. "kernels") inline the math modules and the
    losses, and fold in the constants of ``codes.py``: if any of those changed
    since the cache was written, a stale kernel would load. So, before numba
    loads any kernel, ``module``'s cache files are dropped unless the stamp of
    all their sources matches; ``kernel`` is any kernel of it."""
    with _LOCK:
        if not isinstance(kernel, Kernel):  # numba's dispatcher: materialized before this module was imported
            _drop_stale_cache(module, kernel)
        elif kernel.dispatcher is None:
            _CACHE_CHECKS.append((module, kernel))
        else:
            _drop_stale_cache(module, kernel.dispatcher)


def _drop_stale_cache(module: str, dispatcher) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    names = sorted(n for n in os.listdir(here)
                   if n in (f"{module}.py", "losses.py", "codes.py") or n.startswith("math_") and n.endswith(".py"))
    digest = sources_digest([os.path.join(here, n) for n in names])
    cache_dir = dispatcher._cache.cache_path
    stamp = os.path.join(cache_dir, f"{module}.sources.sha256")
    try:
        with open(stamp) as f:
            if f.read() == digest:
                return
    except OSError:
        pass
    try:
        for path in glob.glob(os.path.join(cache_dir, f"{module}.*.nb[ic]")):
            os.unlink(path)
        os.makedirs(cache_dir, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(digest)
    except OSError:  # a read-only install: numba then caches elsewhere or not at all
        pass

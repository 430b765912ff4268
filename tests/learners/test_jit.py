"""Lazy kernels (learners.jit): importing them imports no numba, the first
call makes every kernel numba's, and the key an ahead-of-time export is
looked up by is the one numba's own typing gives."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners import aot, jit
from learners.jit import prefetch_row
from learners.kernels import LEARN_ROWS


def _numba_key(args):
    """The key learners.aot gives the types numba's dispatcher infers."""
    try:
        key = tuple(aot.type_key(numba.typeof(a)) for a in args)
    except (numba.core.errors.NumbaError, ValueError):  # e.g. a big-endian array: numba takes none
        return None
    return None if None in key else key


DTYPES = ["f8", "f4", "i8", "i4", "u1", "?", ">f8"]


@st.composite
def arrays(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    a = np.zeros(shape, dtype)
    view = draw(st.sampled_from(["as is", "transposed", "strided", "readonly", "unaligned"]))
    if view == "transposed":
        a = a.T
    elif view == "strided":
        a = np.zeros((shape[0] * 2, *shape[1:]), dtype)[::2]
    elif view == "readonly":
        a.flags.writeable = False
    elif view == "unaligned" and dtype.itemsize > 1:
        a = np.frombuffer(bytes(1 + a.nbytes), dtype, count=a.size, offset=1).reshape(shape)
    return a


scalars = st.one_of(st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.floats(allow_nan=True),
                    st.builds(np.float64, st.floats()), st.builds(np.int64, st.integers(-(1 << 63), (1 << 63) - 1)),
                    st.builds(np.bool_, st.booleans()), st.builds(np.float32, st.floats(width=32)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(arrays(), scalars), min_size=1, max_size=6))
def test_the_key_of_a_call_is_the_key_of_the_types_numba_infers_for_it(args):
    ours = jit.args_key(args)
    theirs = _numba_key(args)
    if ours is not None or theirs is not None:
        assert ours == theirs  # a key from the call must never name an export compiled for other types


def test_integers_beyond_int64_and_other_objects_have_no_key():
    assert jit.args_key([1 << 63]) is None
    assert jit.args_key([[1.0, 2.0]]) is None  # a list: numba would reflect it; no export takes one
    assert jit.args_key([np.float32(1.0)]) is None
    assert jit.args_key([np.zeros(3).astype(">f8")]) is None
    assert jit.args_key([np.zeros(3)]) == (("<f8", 1, "C", False),)


def _python(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_kernels_imports_no_numba_and_the_first_call_makes_every_kernel_numbas():
    got = _python("""
        import json, sys
        import numpy as np
        import learners, learners.kernels, learners.mixture, pipelines.files.datafiles
        from pipelines.files import blocks
        before = "numba" in sys.modules
        lines = blocks.count_lines(np.frombuffer(b"a\\nb\\r\\nc", np.uint8))
        import numba.core.registry as registry
        print(json.dumps({"before": before, "lines": lines,
                          "global_is_dispatcher": isinstance(blocks.count_lines, registry.CPUDispatcher),
                          "callee_is_dispatcher": isinstance(learners.kernels._learn_rows, registry.CPUDispatcher)}))
    """)
    assert got == {"before": False, "lines": 2, "global_is_dispatcher": True, "callee_is_dispatcher": True}


def test_a_kernel_pickles_by_name():
    kernel = LEARN_ROWS[next(iter(LEARN_ROWS))]
    assert isinstance(kernel, jit.Kernel)
    assert pickle.loads(pickle.dumps(kernel)) in (kernel, kernel.dispatcher)  # numba's once materialized


def test_njit_takes_numbas_forms():
    def twice(x):
        return 2 * x

    bare, configured = jit.njit(twice), jit.njit(error_model="numpy")(twice)
    assert bare(3) == configured(x=3) == 6
    assert bare.py_func is twice and configured.py_func is twice


@jit.njit
def _sum_after_prefetching(array, rows):
    for j in rows:
        prefetch_row(array, j)
    return array.sum()


@pytest.mark.parametrize("shape", [(50,), (50, 3), (50, 2, 3)])
def test_prefetch_row_compiles_for_any_array_and_changes_nothing_even_past_the_end(shape):
    array = np.random.default_rng(0).normal(size=shape)
    before = array.copy()
    rows = np.array([0, 7, 49, 50, 10**9], dtype=np.int64)  # the last two are past the end: a hint cannot fault
    assert _sum_after_prefetching(array, rows) == pytest.approx(before.sum())
    assert np.array_equal(array, before)
    assert not isinstance(globals()["prefetch_row"], jit.Intrinsic)  # materialized: numba's intrinsic


def test_prefetch_row_called_from_python_does_nothing_and_imports_no_numba():
    got = _python("""
        import json, sys
        import numpy as np
        from learners import jit
        array = np.arange(3.0)
        print(json.dumps({"result": jit.prefetch_row(array, 5), "array": array.tolist(),
                          "numba": "numba" in sys.modules}))
    """)
    assert got == {"result": None, "array": [0.0, 1.0, 2.0], "numba": False}


@pytest.mark.parametrize("bad", [["text"], [1.0]])
def test_a_kernel_called_with_types_numba_cannot_take_raises_numbas_typing_error(bad):
    """Here no exports are built (tests/conftest.py); a call an export does
    not match, with exports built, is tests/cli/test_compile.py's."""
    from pipelines.files.blocks import count_lines

    with pytest.raises(numba.core.errors.TypingError):
        count_lines(*bad)


def _ticks_while(call) -> tuple[list[float], float, float]:
    """(the times this thread's Python loop ran, the start and end of
    ``call()`` run on another thread)."""
    span: dict[str, float] = {}

    def run():
        span["start"] = time.perf_counter()
        try:
            call()
        finally:
            span["end"] = time.perf_counter()

    worker = threading.Thread(target=run)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    return ticks, span["start"], span["end"]


def test_a_batch_kernel_lets_python_threads_run_while_it_learns():
    """A batch kernel lets go of the GIL while it runs (as `scinol
    compile`'s exports do), so a file's next rows are parsed meanwhile: a
    Python loop on another thread keeps ticking through the whole call."""
    from learners import make_learner

    rng = np.random.default_rng(0)
    n, nnz, dims = 200_000, 40, 1 << 20
    indptr = np.arange(0, n * nnz + 1, nnz, dtype=np.int64)
    bucket = dims // nnz  # one index from each of nnz buckets: distinct and sorted within a row
    indices = (np.arange(nnz) * bucket + rng.integers(0, bucket, (n, nnz))).astype(np.int32).ravel()
    data, y = rng.normal(size=n * nnz), rng.choice([-1.0, 1.0], n)
    learner = make_learner("scinol2", "logistic", hash_bits=20)
    learner.learn((indptr, indices, data), y)  # compiled and the state grown before the clock

    ticks, start, end = _ticks_while(lambda: learner.learn((indptr, indices, data), y))
    longest_stop = float(np.diff([start, *[t for t in ticks if start < t < end], end]).max())
    assert end - start > 0.05, "the call was too short to tell"
    # holding the GIL, the kernel stops the loop for over half the call (the rest is checks in Python)
    assert longest_stop < 0.2 * (end - start), f"the loop stopped for {longest_stop:.3f} s of a {end - start:.3f} s call"

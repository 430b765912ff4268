"""The ``scinol`` process skips numba's start-up probes for optional packages
(the imports of ``scipy.linalg`` and ``cffi``), and numba's linear algebra
still works after it; it runs NumPy with one OpenBLAS thread unless told otherwise.

Each test runs a new Python process: the probe runs once per process, and
this test process has long since run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from pipelines.cli.main import main


def _python(code: str, cwd, **env) -> dict:
    """What ``code``, run by a new interpreter in ``cwd``, prints last (JSON);
    ``env`` changes its environment (None: a variable unset)."""
    env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_scinol_learn_runs_without_importing_scipy_linalg_or_cffi_and_numba_blas_works_after(tmp_path):
    assert main(["generate", "toy", "-o", str(tmp_path / "toy.libsvm"), "--n", "50", "--format", "libsvm"]) == 0
    got = _python("""
        import json, sys
        import numpy as np
        from pipelines.cli.main import main
        rc = main(["learn", "toy.libsvm", "--quiet"])
        imported_during_learn = sorted({"scipy.linalg", "cffi"} & set(sys.modules))
        import numba
        import numba.np.arraymath

        @numba.njit
        def solve_and_dot(a, b):
            return np.linalg.solve(a, b), np.dot(a, b), np.correlate(b, b[:2])

        a = np.array([[3.0, 1.0], [1.0, 2.0]]); b = np.array([9.0, 8.0])
        x, d, c = solve_and_dot(a, b)
        print(json.dumps({"rc": rc, "imported_during_learn": imported_during_learn,
                          "have_blas": numba.np.arraymath._HAVE_BLAS,
                          "solve": x.tolist(), "dot": d.tolist(), "correlate": c.tolist()}))
    """, tmp_path)
    assert got["rc"] == 0
    assert got["imported_during_learn"] == []
    assert got["have_blas"] is False  # the probe was refused: np.correlate takes numba's plain loop
    a, b = np.array([[3.0, 1.0], [1.0, 2.0]]), np.array([9.0, 8.0])
    np.testing.assert_allclose(got["solve"], np.linalg.solve(a, b))  # numba imported scipy.linalg for these
    np.testing.assert_allclose(got["dot"], a @ b)
    np.testing.assert_allclose(got["correlate"], np.correlate(b, b[:2]))


def test_a_process_that_imported_scipy_linalg_first_keeps_numbas_blas(tmp_path):
    got = _python("""
        import json, sys
        import scipy.linalg
        from pipelines.runners.startup import skip_numba_probes
        skip_numba_probes()
        import numba.np.arraymath
        print(json.dumps({"have_blas": numba.np.arraymath._HAVE_BLAS,
                          "finders": [type(f).__name__ for f in sys.meta_path]}))
    """, tmp_path)
    assert got["have_blas"] is True
    assert "_SkipProbes" in got["finders"]  # still there for cffi, whose probe has not run yet


def test_the_library_alone_leaves_numbas_probe_alone(tmp_path):
    got = _python("""
        import json, sys
        from learners import make_learner
        import numba.np.arraymath
        print(json.dumps({"have_blas": numba.np.arraymath._HAVE_BLAS, "scipy_linalg": "scipy.linalg" in sys.modules}))
    """, tmp_path)
    assert got == {"have_blas": True, "scipy_linalg": True}


def test_the_probed_packages_import_as_usual_after_the_probes(tmp_path):
    got = _python("""
        import json, sys
        from pipelines.runners.startup import skip_numba_probes
        skip_numba_probes()
        import numba.np.arraymath, numba.core.typing.cffi_utils
        import cffi, scipy.linalg
        print(json.dumps({"have_blas": numba.np.arraymath._HAVE_BLAS,
                          "cffi_typing": numba.core.typing.cffi_utils.SUPPORTED,
                          "det": float(scipy.linalg.det([[2.0, 1.0], [1.0, 3.0]])), "ffi": cffi.FFI().sizeof("int")}))
    """, tmp_path)
    assert got == {"have_blas": False, "cffi_typing": False, "det": 5.0, "ffi": 4}


def _threads_after_numpy(tmp_path, **env) -> dict:
    return _python("""
        import json, os
        import pipelines.cli.main
        import numpy
        print(json.dumps({"setting": os.environ["OPENBLAS_NUM_THREADS"],
                          "threads": len(os.listdir("/proc/self/task"))}))
    """, tmp_path, **env)


def test_the_command_line_runs_numpy_with_one_openblas_thread_unless_told_otherwise(tmp_path):
    """OpenBLAS's pool thread spins at start-up (about 0.1 CPU-s a command);
    the project's processes have no BLAS work for it."""
    assert _threads_after_numpy(tmp_path, OPENBLAS_NUM_THREADS=None) == {"setting": "1", "threads": 1}
    if (os.cpu_count() or 1) >= 2:  # OpenBLAS starts a thread per core; the user's setting is kept
        assert _threads_after_numpy(tmp_path, OPENBLAS_NUM_THREADS="2") == {"setting": "2", "threads": 2}

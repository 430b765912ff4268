"""``scinol compile``: `scinol learn` on kernels compiled ahead of time gives
byte for byte what it gives on numba's JIT, without importing numba; calls
the exports do not cover, and exports built from other sources, fall back
to numba.

One module fixture builds the kernels (numba's pycc) once; every command
runs in a new process, where numba is not yet imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from learners.jit import KERNELS_DIR_ENV, MANIFEST
from pipelines.cli.main import main

pytestmark = pytest.mark.slow

_REPORT = """
import json, sys
from pipelines.cli.main import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "numba": "numba" in sys.modules}))
"""


def _learn(argv: list[str], kernels: str, cwd) -> tuple[dict, bytes]:
    """Exit status and whether numba was imported, and the predictions file."""
    env = {**os.environ, KERNELS_DIR_ENV: kernels}
    done = subprocess.run([sys.executable, "-c", _REPORT, "learn", *argv, "--quiet", "-p", "pred.txt"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(cwd, "pred.txt"), "rb") as f:
        return json.loads(done.stdout.strip().splitlines()[-1]), f.read()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernels")
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "compile", "--out", str(folder)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "`scinol learn` and `scinol produce` now start without numba" in done.stderr
    return str(folder)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    for fmt in ("libsvm", "csv"):
        assert main(["generate", "toy", "-o", str(folder / f"toy.{fmt}"), "--n", "3000", "--format", fmt]) == 0
    with open(folder / "toy.libsvm") as src, open(folder / "toy.vw", "w") as dst:
        dst.writelines(f"{label} |f {features}" for label, features in (line.split(" ", 1) for line in src))
    with open(folder / "classes.libsvm", "w") as f:
        f.writelines(f"{k % 3} 1:{k % 7} 2:{(k * 13) % 5 - 2} 9:1\n" for k in range(500))
    return folder


COMMANDS = [
    ["toy.libsvm"],
    ["toy.csv", "--label", "y"],
    ["toy.vw"],
    ["toy.vw", "-q", "ff", "-b", "12"],
    ["toy.libsvm", "--learner", "scinol-mix"],
    ["toy.libsvm", "--learner", "kotlowski2"],
    ["toy.libsvm", "--learner", "kt", "--loss", "squared"],
    ["toy.libsvm", "--learner", "pa1", "--loss", "hinge", "--passes", "2", "--batch-size", "7"],
    ["classes.libsvm", "--loss", "softmax"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_learn_on_compiled_kernels_predicts_what_numba_predicts_without_importing_numba(built, data, argv, tmp_path):
    ahead, ahead_predictions = _learn([str(data / argv[0]), *argv[1:]], built, tmp_path)
    jit, jit_predictions = _learn([str(data / argv[0]), *argv[1:]], str(tmp_path / "none"), tmp_path)
    assert ahead == {"rc": 0, "numba": False}
    assert jit == {"rc": 0, "numba": True}
    assert ahead_predictions == jit_predictions and ahead_predictions.count(b"\n") in (3000, 500, 6000)


_LINES = {
    "bad.libsvm": ("1 1:0.5 3:2\n-1 2:zz\n", 2, "bad.libsvm:2:4: non-numeric value 'zz' for feature 2"),
    "bad.vw": ("1 |a x:0.5\n-1 |a x:1:2\n", 2, "bad.vw:2:7: malformed feature 'x:1:2' (more than one ':')"),
    "bad.csv": ("y,a\n1,0.5\n-1,zz\n", 2, "bad.csv:3:4: non-numeric value 'zz' in column 'a'"),
    "accents.vw": ("1 |a x:0.5\n-1 |a café:1 |b z\n", 0, ""),
    "comment.libsvm": ("1 1:0.5\n-1 2:1 # café\n", 0, ""),
}


@pytest.mark.parametrize("name", _LINES)
def test_a_line_the_compiled_parser_hands_to_python_needs_no_numba(built, name, tmp_path):
    """Malformed lines, and lines with non-ASCII text, are read in Python
    after the compiled parser stops at them: on compiled kernels the located
    error (or the row) comes without numba's import and compile (a second)."""
    text, rc, error = _LINES[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    label = ["--label", "y"] if name.endswith(".csv") else []
    done = subprocess.run([sys.executable, "-c", _REPORT, "learn", name, *label, "--quiet"], cwd=tmp_path,
                          env={**os.environ, KERNELS_DIR_ENV: built}, capture_output=True, text=True, timeout=600)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rc": rc, "numba": False}
    assert done.stderr.strip() == (f"scinol: error: {error}" if error else "")


def test_exports_built_from_other_sources_are_not_used(built, data, tmp_path):
    stale = str(tmp_path / "stale")
    shutil.copytree(built, stale)
    with open(os.path.join(stale, MANIFEST)) as f:
        manifest = json.load(f)
    manifest["digest"] = "0" * 64  # as if a kernel's source had changed since the build
    with open(os.path.join(stale, MANIFEST), "w") as f:
        json.dump(manifest, f)
    got, predictions = _learn([str(data / "toy.libsvm")], stale, tmp_path)
    assert got == {"rc": 0, "numba": True}
    assert predictions == _learn([str(data / "toy.libsvm")], built, tmp_path)[1]


def test_a_call_with_types_no_export_takes_runs_on_numba(built):
    code = textwrap.dedent("""
        import json, sys
        import numpy as np
        from pipelines.files.blocks import count_lines
        exported = count_lines(np.frombuffer(b"a\\nb\\nc", np.uint8))  # read-only bytes: as the readers call it
        before = "numba" in sys.modules
        other = count_lines(np.array([97, 10, 98, 10, 99], np.uint8))  # writable: compiled for by numba
        print(json.dumps([exported, before, other, "numba" in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, KERNELS_DIR_ENV: built},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [2, False, 2, True]


def test_compile_into_a_folder_it_cannot_make_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["compile", "--out", str(tmp_path / "file" / "kernels")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scinol: error: compile: cannot write to ") and "\n" not in err


_ENCODE = """
import hashlib, json, sys
from pipelines.files.datafiles import open_reader
from pipelines.records.event_values import file_values
from schemas.codec import Codec
label = sys.argv[2] if len(sys.argv) > 2 else None
codec = Codec()
values = list(file_values(open_reader(sys.argv[1], label=label), "default", codec, None))
numba = "numba" in sys.modules
events = [codec.decode(v) for v in values]
for e in events:
    e.pop("timestamp")  # the clock at encoding
print(json.dumps({"n": len(values), "sha": hashlib.sha256(repr(events).encode()).hexdigest(), "numba": numba}))
"""


@pytest.mark.parametrize("argv", [["toy.csv", "y"], ["toy.libsvm"], ["toy.vw"]], ids=lambda a: a[0])
def test_produce_encodes_on_compiled_kernels_what_it_encodes_on_numba(built, data, argv, tmp_path):
    """The values `scinol produce` writes for a file (no broker needed to make them)."""
    got = {}
    for how, kernels in (("ahead", built), ("jit", str(tmp_path / "none"))):
        done = subprocess.run([sys.executable, "-c", _ENCODE, str(data / argv[0]), *argv[1:]], capture_output=True,
                              text=True, timeout=600, env={**os.environ, KERNELS_DIR_ENV: kernels})
        assert done.returncode == 0, done.stderr[-2000:]
        got[how] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["ahead"]["numba"] is False and got["jit"]["numba"] is True
    assert got["ahead"]["n"] == got["jit"]["n"] == 3000 and got["ahead"]["sha"] == got["jit"]["sha"]

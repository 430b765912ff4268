"""Tests of the ``scinol learn`` and ``scinol generate`` commands.

Most tests call ``pipelines.cli.main([...])`` in-process and read stderr with
capsys; the last ones run real processes to check the exit status.
Every test runs in its own temporary directory (``workdir``), so file names
in commands and in error messages are short and relative.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from learners import OnlineLearner, make_learner
from learners.datasets import toy_examples
from pipelines.cli.main import main
from tests.support.cli import assert_one_error_line, ok, read_predictions, run, write

N = 300  # toy examples; the progress table reports at 1, 2, 4, ..., 256


# ------------------------------------------------------------------ helpers

def write_csv(path, header, rows):
    lines = [",".join(header)] + [",".join(f"{v:.17g}" for v in row) for row in rows]
    return write(path, "\n".join(lines) + "\n")


def read_csv(path):
    """(X, y) of a CSV written by `scinol generate` (label y is the last column), via numpy."""
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return data[:, :-1], data[:, -1]


def progress_rows(err):
    """The progress table's data rows as (average loss, example counter)."""
    rows = []
    for line in err:
        m = re.fullmatch(r"(\S+) +(\S+) +(\d+) +(\S+) +(\S+) +(\S+) +(\d+)", line.strip())
        if m and line[0].isdigit():
            rows.append((float(m.group(1)), int(m.group(3))))
    return rows


def final_average_loss(err):
    (value,) = [float(line.split("=")[1]) for line in err if line.startswith("average loss =")]
    return value


def logistic_losses(y, scores):
    return np.logaddexp(0.0, -y * scores)


def generate_toy(capsys, name, n=N, *extra):
    ok(capsys, "generate", "toy", "-o", name, "--n", n, *extra)
    return name


# ------------------------------------------------------------------ generate

def test_generate_writes_the_toy_data_exactly(workdir, capsys):
    err = ok(capsys, "generate", "toy", "-o", "f.csv", "--n", N)
    assert err == [f"wrote {N} examples to f.csv"]
    with open("f.csv") as f:
        assert f.readline().strip() == ",".join([f"x{i}" for i in range(1, 22)] + ["y"])
    X, y = read_csv("f.csv")
    X0, y0 = toy_examples(N, 0)
    assert np.array_equal(X, X0) and np.array_equal(y, y0)

    ok(capsys, "generate", "toy", "-o", "g.csv", "--n", N, "--seed", 1)
    assert not np.array_equal(read_csv("g.csv")[0], X)


# ------------------------------------------------------------------ learn, CSV

def test_learn_csv_matches_the_python_api(workdir, capsys):
    generate_toy(capsys, "f.csv")
    err = ok(capsys, "learn", "f.csv", "--label", "y", "-p", "p.txt", "--save", "m.scinol")

    preds = read_predictions("p.txt")
    assert preds.shape == (N,)
    X, y = read_csv("f.csv")
    expected = make_learner("scinol2", "logistic").learn(X, y)
    assert np.array_equal(preds, expected)  # to the bit
    assert preds[0] == 0.0 and np.all(preds[1:] != 0.0)

    # Progress table: one line per power of two, progressive average loss.
    losses = logistic_losses(y, preds)
    rows = progress_rows(err)
    assert [counter for _, counter in rows] == [2 ** k for k in range(9)]  # 1 .. 256
    for average, counter in rows:
        assert average == pytest.approx(losses[:counter].mean(), abs=1e-6)
    assert final_average_loss(err) == pytest.approx(losses.mean(), abs=1e-6)
    assert f"number of examples = {N}" in err
    assert "model saved to m.scinol" in err

    # The saved model is the learner after the run.
    model = OnlineLearner.load("m.scinol")
    reference = make_learner("scinol2", "logistic")
    reference.learn(X, y)
    assert model.n_examples == N
    assert np.array_equal(model.weights(), reference.weights())


def test_load_continues_exactly(workdir, capsys):
    generate_toy(capsys, "f.csv")
    X, y = read_csv("f.csv")
    header = [f"x{i}" for i in range(1, 22)] + ["y"]
    cut = 137  # not a power of two nor a batch boundary
    write_csv("a.csv", header, np.column_stack([X[:cut], y[:cut]]))
    write_csv("b.csv", header, np.column_stack([X[cut:], y[cut:]]))

    ok(capsys, "learn", "f.csv", "--label", "y", "-p", "all.txt", "--quiet")
    ok(capsys, "learn", "a.csv", "--label", "y", "-p", "a.txt", "--save", "a.scinol", "--quiet")
    ok(capsys, "learn", "b.csv", "--label", "y", "-p", "b.txt", "--load", "a.scinol",
       "--save", "ab.scinol", "--quiet", "--batch-size", 50)

    both = np.concatenate([read_predictions("a.txt"), read_predictions("b.txt")])
    assert np.array_equal(both, read_predictions("all.txt"))
    assert OnlineLearner.load("ab.scinol").n_examples == N


def test_no_bias_and_learner_change_the_predictions(workdir, capsys):
    generate_toy(capsys, "f.csv")
    X, y = read_csv("f.csv")
    ok(capsys, "learn", "f.csv", "--label", "y", "-p", "default.txt", "--quiet")
    ok(capsys, "learn", "f.csv", "--label", "y", "-p", "nobias.txt", "--no-bias", "--quiet")
    ok(capsys, "learn", "f.csv", "--label", "y", "-p", "s1.txt", "--learner", "scinol1", "--quiet")
    default, nobias, s1 = (read_predictions(f"{n}.txt") for n in ("default", "nobias", "s1"))

    assert not np.allclose(nobias, default)
    assert np.array_equal(nobias, make_learner("scinol2", "logistic", bias=False).learn(X, y))
    assert not np.allclose(s1, default)
    assert np.array_equal(s1, make_learner("scinol1", "logistic").learn(X, y))


@pytest.mark.parametrize("learner", ["scinol2", "scinol1"])
def test_two_passes(workdir, capsys, learner):
    generate_toy(capsys, "f.csv")
    X, _ = read_csv("f.csv")
    ok(capsys, "learn", "f.csv", "--label", "y", "--learner", learner, "-p", "one.txt",
       "--save", "one.scinol", "--quiet")
    err = ok(capsys, "learn", "f.csv", "--label", "y", "--learner", learner, "--passes", 2, "-p", "two.txt")

    one, two = read_predictions("one.txt"), read_predictions("two.txt")
    assert two.shape == (2 * N,)
    assert np.array_equal(two[:N], one)
    after_one_pass = OnlineLearner.load("one.scinol").decision_function(X[:1])[0]
    assert two[N] == after_one_pass
    assert two[N] != two[0]
    assert [c for _, c in progress_rows(err)] == [2 ** k for k in range(10)]  # .. 512
    assert f"number of examples = {2 * N}" in err


# ------------------------------------------------------------------ libsvm

def test_libsvm_gives_the_csv_predictions(workdir, capsys):
    generate_toy(capsys, "f.csv", N, "--seed", 3)
    generate_toy(capsys, "f.libsvm", N, "--seed", 3, "--format", "libsvm")
    with open("f.libsvm") as f:
        first = f.readline().split()
    assert first[1].startswith("1:") and first[-1].startswith("21:")  # 1-based indices

    ok(capsys, "learn", "f.csv", "--label", "y", "-p", "csv.txt", "--quiet")
    ok(capsys, "learn", "f.libsvm", "-p", "libsvm.txt", "--quiet")
    csv_preds, svm_preds = read_predictions("csv.txt"), read_predictions("libsvm.txt")
    assert svm_preds.shape == (N,)
    # Features sit one coordinate further right; ScInOL is coordinate-separable
    # and sums in the same order, so only round-off could differ (none observed).
    np.testing.assert_allclose(svm_preds, csv_preds, rtol=1e-12, atol=0)


# ------------------------------------------------------------------ softmax

def softmax_csv(path):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3)) * [1.0, 100.0, 0.01]
    labels = np.arange(40) % 3
    write_csv(path, ["a", "b", "c", "label"], np.column_stack([X, labels]))
    return X, labels.astype(float)


def test_softmax_infers_three_classes(workdir, capsys):
    X, labels = softmax_csv("s.csv")
    ok(capsys, "learn", "s.csv", "--label", "label", "--loss", "softmax", "-p", "p.txt", "--quiet")
    preds = read_predictions("p.txt")
    assert preds.shape == (40, 3)
    assert np.array_equal(preds, make_learner("scinol2", "softmax", n_classes=3).learn(X, labels))

    ok(capsys, "learn", "s.csv", "--label", "label", "--loss", "softmax", "--n-classes", 4,
       "-p", "p4.txt", "--quiet")
    assert read_predictions("p4.txt").shape == (40, 4)


# ------------------------------------------------------------------ errors

@pytest.fixture
def bad_files(workdir):
    """Small files for the error cases, in the working directory."""
    write("good.csv", "a,b,y\n1,2,1\n3,4,-1\n")
    write("nonnum.csv", "a,b,y\n1,2,1\n3, x,1\n")      # 'x' at line 3, column 4
    write("nan.csv", "a,b,y\n1,2,1\n3,4,1\n5,nan,1\n")  # line 4, column 3
    write("inf.csv", "a,b,y\n1,2,1\n-inf,4,1\n")        # line 3, column 1
    write("label3.csv", "a,b,y\n1,2,1\n\n3,4,3\n")      # label 3 on line 4 (after a blank line)
    write("data.dat", "a,b,y\n1,2,1\n")
    write("notmodel.txt", "this is not a model\n")
    model = make_learner("scinol2", "logistic")
    model.learn(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, -1.0]))
    model.save("model.scinol")
    with open("model.scinol", "rb") as f:
        blob = f.read()
    with open("truncated.scinol", "wb") as f:
        f.write(blob[: len(blob) // 2])
    return workdir


ERRORS = [
    pytest.param(["learn", "good.csv", "--bogus"], ["unrecognized arguments: --bogus"], id="unknown-option"),
    pytest.param(["learn", "missing.csv"], ["missing.csv", "No such file"], id="missing-file"),
    pytest.param(["learn", "good.csv", "--label", "z"], ["good.csv:1:", "no label column 'z'"], id="no-label-column"),
    pytest.param(["learn", "nonnum.csv", "--label", "y"], ["nonnum.csv:3:4:", "non-numeric value 'x'", "'b'"], id="non-numeric"),
    pytest.param(["learn", "nan.csv", "--label", "y"], ["nan.csv:4:3:", "non-finite value 'nan'"], id="nan"),
    pytest.param(["learn", "inf.csv", "--label", "y"], ["inf.csv:3:1:", "non-finite value '-inf'"], id="inf"),
    pytest.param(["learn", "label3.csv", "--label", "y"], ["label3.csv:4:", "label", "3", "logistic"], id="logistic-label-3"),
    pytest.param(["learn", "good.csv", "--passes", "0"], ["--passes", "0"], id="passes-0"),
    pytest.param(["learn", "good.csv", "--load", "notmodel.txt"], ["notmodel.txt", "not a readable scinol model"], id="load-text-file"),
    pytest.param(["learn", "good.csv", "--load", "truncated.scinol"], ["truncated.scinol", "model"], id="load-truncated"),
    pytest.param(["learn", "good.csv", "--learner", "foo"], ["unknown learner 'foo'"], id="unknown-learner"),
    pytest.param(["learn", "good.csv", "--loss", "foo"], ["unknown loss 'foo'"], id="unknown-loss"),
    pytest.param(["learn", "data.dat"], ["data.dat", "cannot guess the format", "--format"], id="format-guess"),
]


@pytest.mark.parametrize("args, expected", ERRORS)
def test_errors(bad_files, capsys, args, expected):
    rc, err = run(capsys, *args)
    assert rc == 2
    line = assert_one_error_line(err, expected)
    if ".csv:" in expected[0]:  # located errors start with file:line[:col]:
        assert line.startswith(f"scinol: error: {expected[0]} ")


def test_truncated_model_really_is_truncated(bad_files):
    assert zipfile.is_zipfile("model.scinol")
    assert not zipfile.is_zipfile("truncated.scinol")


# ------------------------------------------------------------------ real processes

def scinol_command():
    """The installed console script, else the module (same entry point)."""
    script = shutil.which("scinol", path=os.path.dirname(sys.executable)) or shutil.which("scinol")
    return [script] if script else [sys.executable, "-m", "pipelines.cli"]


def test_console_script_exit_status(workdir):
    cmd = scinol_command()
    done = subprocess.run(cmd + ["generate", "toy", "-o", "f.csv", "--n", "50"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(cmd + ["learn", "f.csv", "--label", "y", "-p", "p.txt"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert read_predictions("p.txt").shape == (50,)
    assert "average loss = " in done.stderr

    done = subprocess.run(cmd + ["learn", "f.csv", "--label", "nope"], capture_output=True, text=True)
    assert done.returncode == 2
    assert_one_error_line(done.stderr.splitlines(), ["f.csv:1:", "no label column 'nope'"])


@pytest.mark.parametrize("args, expected", [
    (["learn", "good.csv", "--passes", "0"], ["--passes must be at least 1"]),  # UsageError from learn_command
    (["learn", "nonnum.csv", "--label", "y"], ["nonnum.csv:3:4:"]),              # DataError
])
def test_python_dash_m_exit_status(bad_files, args, expected):
    done = subprocess.run([sys.executable, "-m", "pipelines.cli"] + args, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert_one_error_line(done.stderr.splitlines(), expected)


@pytest.mark.parametrize("args", [["--help"], ["tail", "--help"], ["produce", "--help"], ["model", "--help"]])
def test_help_does_not_load_the_learners(args):
    """Building the parser (every command does) and leaving through --help
    must not import numba: it costs about half a second a command."""
    probe = ("import sys\nfrom pipelines.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
             "    pass\nprint(sorted(m for m in ('numba', 'learners', 'apache_beam') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe] + args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_learners_lists_every_learner_with_flags(capsys):
    from learners.registry import learner_names

    assert main(["learners"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines()[1:] if line and not line.startswith("free")}
    assert set(rows) == set(learner_names())
    assert rows["scinol2"] == ["yes", "yes", "yes"]
    assert rows["adam"] == ["no", "no", "yes"]
    assert rows["kotlowski2"] == ["yes", "yes", "no"]


@pytest.mark.parametrize("learner,params", [("adagrad", ["--param", "lr=0.5"]), ("kotlowski2", []),
                                            ("pa1", ["--param", "C=0.1"])])
def test_learn_with_any_learner_and_params(tmp_path, learner, params):
    from learners import make_learner

    data = tmp_path / "toy.csv"
    assert main(["generate", "toy", "-o", str(data), "--n", "200"]) == 0
    pred = tmp_path / "p.txt"
    loss = ["--loss", "hinge"] if learner == "pa1" else []
    assert main(["learn", str(data), "--label", "y", "--learner", learner, *params, *loss, "-p", str(pred),
                 "--quiet"]) == 0
    table = np.loadtxt(data, delimiter=",", skiprows=1)
    kwargs = {k: float(v) for k, v in (p.split("=") for p in params[1::2])}
    want = make_learner(learner, loss[1] if loss else "logistic", **kwargs).learn(table[:, :-1], table[:, -1])
    np.testing.assert_array_equal(np.loadtxt(pred), want)


@pytest.mark.parametrize("args,message", [
    (["--param", "lr"], "expected NAME=VALUE"),
    (["--param", "lr=fast"], "'fast' is not a number"),
    (["--param", "lr=0.1"], "scinol2 has no parameter lr"),
    (["--learner", "sgd", "--param", "lr=-1"], "lr must be a positive number"),
])
def test_bad_learner_params_are_one_line_errors(tmp_path, capsys, args, message):
    data = tmp_path / "toy.csv"
    main(["generate", "toy", "-o", str(data), "--n", "10"])
    capsys.readouterr()
    assert main(["learn", str(data), "--label", "y", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("scinol: error:") and message in err[-1]


def test_more_coordinates_than_the_full_matrix_learner_takes_is_a_one_line_error(tmp_path, capsys):
    data = tmp_path / "wide.libsvm"
    data.write_text("1 1:0.5 3:1\n-1 2:1 20000:2\n")  # index 20000: 20,001 coordinates and the bias
    assert main(["learn", str(data), "--learner", "kotlowski2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"scinol: error: {data}: kotlowski2 keeps two d x d matrices: 20,002 coordinates")

"""``scinol learn`` with importance weights from libsvm (``label:weight``) and
CSV (``--weight-column``) files: the run equals the Python API given the same
weights, through the compiled parsers and the Python fallback alike, and a
bad weight is one located error line."""

from __future__ import annotations

import numpy as np
import pytest

from learners import OnlineLearner, make_learner
from pipelines.files.datafiles import open_reader
from tests.support.cli import assert_one_error_line, ok, read_predictions, run, write


def weighted_rows(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * np.array([1.0, 10.0, 0.1])
    y = np.where(X @ np.array([1.0, -0.1, 5.0]) > 0, 1.0, -1.0)
    w = rng.choice([0.0, 0.5, 1.0, 2.0, 7.25], size=n)
    return X, y, w


def want(X, y, w, **kw):
    model = make_learner("scinol2", "logistic", **kw)
    return model.learn(X, y, w), model


def test_libsvm_label_weight_is_applied(workdir, capsys):
    X, y, w = weighted_rows()
    lines = []
    for i, (row, label, h) in enumerate(zip(X, y, w)):
        head = f"{label:g}" if h == 1 and i % 2 else f"{label:g}:{h:g}"  # both spellings of weight 1
        feats = " ".join(f"{j}:{v:.17g}" for j, v in enumerate(row))
        # every 50th line goes through the Python parser (a comment with non-ASCII text)
        lines.append(f"{head} {feats}" + (" # é" if i % 50 == 0 else ""))
    write("w.libsvm", "\n".join(lines) + "\n")
    err = ok(capsys, "learn", "w.libsvm", "-p", "p.txt", "--save", "m.scinol")
    scores, model = want(X, y, w)
    assert np.array_equal(read_predictions("p.txt"), scores)
    assert np.array_equal(OnlineLearner.load("m.scinol").weights(), model.weights())
    assert f"weighted example sum = {float(w.sum())}" in err


def test_csv_weight_column_is_applied_and_not_a_feature(workdir, capsys):
    X, y, w = weighted_rows(seed=1)
    rows = "\n".join(",".join(f"{v:.17g}" for v in (*row, label, h)) for row, label, h in zip(X, y, w))
    write("w.csv", "a,b,c,y,imp\n" + rows + "\n")
    ok(capsys, "learn", "w.csv", "--label", "y", "--weight-column", "imp", "-p", "p.txt", "--quiet")
    assert np.array_equal(read_predictions("p.txt"), want(X, y, w)[0])
    # the Python fallback path (a quoted field) reads the same weights
    write("q.csv", 'a,b,c,y,imp\n"0",0,0,1,1\n' + rows + "\n")
    ok(capsys, "learn", "q.csv", "--label", "3", "--weight-column", "4", "-p", "q.txt", "--quiet")
    assert np.array_equal(read_predictions("q.txt")[1:], make_learner("scinol2", "logistic").learn(
        np.vstack([np.zeros(3), X]), np.concatenate([[1.0], y]), np.concatenate([[1.0], w]))[1:])


def test_readers_give_weights_only_where_there_are_some(workdir):
    write("plain.libsvm", "1 1:2\n-1 2:3\n")
    write("mixed.libsvm", "1:0 1:2\n-1 2:3\n")
    assert all(b.weights is None for b in open_reader("plain.libsvm").batches())
    assert np.array_equal(next(open_reader("mixed.libsvm").batches()).weights, [0.0, 1.0])


@pytest.mark.parametrize("name,text,args,expected", [
    ("neg.libsvm", "1 1:2\n1:-2 1:1\n", [], ["neg.libsvm:2:3:", "bad weight '-2'"]),
    ("nan.libsvm", "1:nan 1:2\n", [], ["nan.libsvm:1:3:", "bad weight 'nan'"]),
    ("word.libsvm", "1:x 1:2\n", [], ["word.libsvm:1:3:", "bad weight 'x'"]),
    ("neg.csv", "x,y,w\n1,1,1\n2,1,-0.5\n", ["--label", "y", "--weight-column", "w"],
     ["neg.csv:3:", "bad weight -0.5 in column 'w'"]),
    ("nan.csv", "x,y,w\n1,1,nan\n", ["--label", "y", "--weight-column", "w"],
     ["nan.csv:2:", "non-finite value 'nan' in column 'w'"]),
    ("miss.csv", "x,y\n1,1\n", ["--label", "y", "--weight-column", "w"], ["no weight column 'w' in header"]),
    ("same.csv", "x,y\n1,1\n", ["--label", "y", "--weight-column", "y"], ["is the label column"]),
    ("d.libsvm", "1 1:1\n", ["--weight-column", "w"], ["a weight column is for CSV files"]),
])
def test_bad_weights_are_one_error_line(workdir, capsys, name, text, args, expected):
    write(name, text)
    rc, err = run(capsys, "learn", name, *args)
    assert rc == 2
    assert_one_error_line(err, expected)


def test_file_events_carry_the_weights_of_libsvm_and_csv_rows(workdir):
    from pipelines.records.events import file_events

    write("w.libsvm", "1:2.5 0:1\n-1 1:2\n1:0 0:3\n")
    write("w.csv", "x,y,w\n1,1,2.5\n2,-1,1\n3,1,0\n")
    for reader in (open_reader("w.libsvm"), open_reader("w.csv", label="y", weight="w")):
        events = list(file_events(reader))
        # weight 1 is null; weight 0 (predict only) becomes an unlabelled event, as for VW files
        assert [(e["label"], e["weight"]) for e in events] == [(1.0, 2.5), (-1.0, None), (None, None)]

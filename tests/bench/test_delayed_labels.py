"""The delayed-label benchmark on a tiny stream: it writes its PNG and
table, a label that comes right after its event gives the inline curve
exactly, and the model learns each event once whatever the delay."""

import numpy as np
import pytest

from learners import make_learner
from pipelines.bench.delayed_labels import curves, delayed_losses, main, schedule, toy_events
from tests.support.png import assert_png


def test_delay_zero_is_the_inline_curve_and_late_curves_differ():
    result = curves(600, delays=(0, 50), random_delay=200)
    assert list(result) == ["inline", "D = 0", "D = 50", "D ~ U{0..200}"]
    assert all(len(c) == 600 and np.isfinite(c).all() for c in result.values())
    np.testing.assert_array_equal(result["D = 0"], result["inline"])
    assert not np.array_equal(result["D = 50"], result["inline"])


def test_late_labels_learn_each_event_once_in_label_arrival_order():
    n = 300
    y, events = toy_events(n)
    due = np.arange(n) + np.random.default_rng(0).integers(0, 120, size=n)
    losses, ids = delayed_losses(events, y, due, lambda: make_learner("scinol2", "logistic"))
    assert ids == [f"e{i}" for i in np.argsort(due, kind="stable")] and len(losses) == n
    runs = schedule(due)
    assert sum(hi - lo for kind, lo, hi in runs if kind == "events") == n
    assert sum(hi - lo for kind, lo, hi in runs if kind == "labels") == n


def test_the_command_writes_the_png_and_prints_the_figures(tmp_path, capsys):
    assert main(["--events", "400", "--speed-events", "600", "--batch", "200", "--repeats", "1",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert_png(tmp_path / "delayed_labels.png")
    assert "| D = 10,000 |" in out and "| D = 0 |" in out
    assert "-q ab" in out and "process_labels" in out


def test_a_bad_count_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--events", "0"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("argument --events: must be at least 1, not 0")

"""The pipeline benchmark's late-label schedule and its command line (the
timed runs themselves are the benchmark, not a test)."""

import numpy as np
import pytest

from pipelines.bench.pipeline_speed import label_arrival, main


def test_label_arrival_is_each_event_plus_a_delay_in_range_in_due_order():
    due, order = label_arrival(5000, 10_000, seed=1)
    delays = due - np.arange(5000)
    assert delays.min() >= 0 and delays.max() <= 10_000 and delays.max() > 9000
    assert np.all(np.diff(due[order]) >= 0) and sorted(order.tolist()) == list(range(5000))
    assert np.array_equal(label_arrival(100, 0)[0], np.arange(100))  # no delay: each right after its event


@pytest.mark.parametrize("args", [["--events", "0"], ["--repeats", "0"], ["--delay", "-1"]])
def test_bad_counts_are_one_usage_line_and_exit_2(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

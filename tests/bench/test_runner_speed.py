"""The runner benchmark's own arithmetic and plumbing on a small stream:
the raw loop and a direct run over the same events, the table built from
what was measured (the timed figures themselves are the benchmark's, not
a test's)."""

from pipelines.bench.runner_speed import MODELS, make_events, measure, table


def test_events_put_one_model_on_each_partition():
    events = make_events(40)
    assert len(events) == 40
    # round robin over 4 partitions: partition p gets events p, p+4, ... all of model m<p>
    assert all(events[i]["model"] == f"m{i % MODELS}" for i in range(40))


def test_raw_loop_and_a_direct_run_measure_the_same_events(tansu_bootstrap):
    rows = measure(tansu_bootstrap, 400, ["direct"])
    raw, direct = rows
    assert raw["n"] == 400 and direct["n"] == 400  # every event predicted once
    assert "400 messages read, 400 predictions written, 0 dead letters" in direct["summary"]
    assert raw["rate"] > 0 and direct["rate"] > 0 and direct["wall"] > 0
    lines = table(rows, "tansu")
    assert lines[2].startswith("| raw consume+produce loop |") and "| 1.00 |" in lines[2]
    assert f"| {direct['rate'] / raw['rate']:.2f} |" in lines[3]

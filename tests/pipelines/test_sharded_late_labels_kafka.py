"""Delayed labels in sharded mode on the real brokers: the Router keeps the
events awaiting labels, each label routes its event again under a new
sequence number, and the checkpoint cuts keep what waits. At staleness 0
with one shard the final model is bit for bit that of one learner on the
stream reordered to label-arrival order, as in exact mode."""

import numpy as np

from pipelines.launch import run
from pipelines.records.topics import produce_events, read_records
from pipelines.state.cuts import CutStore
from schemas.codec import Codec
from tests.support.labels import (T0, produce_delayed, assert_same_state, learning_order, produce_labels,
                                              reference_after, unlabelled)
from tests.support.runs import config, toy_stream


def gauge(result, name):
    """A gauge's value as the runner reports it. The DirectRunner sums counters
    over bundles but keeps a gauge's value from the first bundle that set it,
    so on this runner a gauge shows that it is reported, not its last value."""
    from apache_beam.metrics.metric import MetricsFilter

    found = result.metrics().query(MetricsFilter().with_name(name))["gauges"]
    assert found, f"no gauge {name} was reported"
    return max((g.committed or g.attempted).value for g in found)


def sharded(bootstrap, topic, tmp_path, shards=1, **kw):
    return config(bootstrap, topic, tmp_path, labels_topic=topic + ".labels", shards=shards, max_staleness=0,
                  feedback_timeout=10.0, **kw)


def test_random_delays_give_the_model_of_the_stream_reordered_to_label_arrival(kafka_bootstrap, topic_name,
                                                                             tmp_path):
    n = 1000
    X, y, events = toy_stream(n)
    ids = [e["id"] for e in events]
    due = np.arange(n) + np.random.default_rng(7).integers(0, 10_001, size=n)  # 0..10,000 events late
    arrival = np.argsort(due, kind="stable")
    produce_events(kafka_bootstrap, topic_name, unlabelled(events), partitions=1, progress=False)
    produce_labels(kafka_bootstrap, topic_name + ".labels", [(ids[i], y[i], T0 + int(due[i])) for i in arrival])
    cfg = sharded(kafka_bootstrap, topic_name, tmp_path, max_batch=100, checkpoint_every=400)
    run(cfg)

    predictions = read_records(kafka_bootstrap, cfg.predictions_topic, 2 * n, timeout=30)
    order = learning_order(predictions)
    assert sorted(order) == sorted(ids)  # each event learned from exactly once
    cut = CutStore(cfg.checkpoint_dir).latest("default", 1)
    assert_same_state(cut.merged_learner(cfg.learner.make), reference_after(X, y, ids, order))
    assert len(cut.part("router")[1]["pending_event_ts"]) == 0  # nothing left waiting
    first = {}
    for p in predictions:
        first.setdefault(p["event_id"], p)
    late = [p for p in predictions if p["label"] is not None and first[p["event_id"]] is not p]
    assert late  # some labels did come after their events...
    for p in late:  # ...and carry the prediction made when the event arrived
        assert p["score"] == first[p["event_id"]]["score"]
        assert p["model_version"] == first[p["event_id"]]["model_version"]


def test_unknown_expired_and_duplicate_labels_go_to_the_dead_letter_topic(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(400)
    events = [{**e, "label": None, "timestamp": T0 + 1000 * i} for i, e in enumerate(events)]  # one a second
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    labels = [(events[390]["id"], y[390], T0 + 391_000),  # in time: learned
              (events[390]["id"], y[390], T0 + 392_000),  # again: a duplicate
              (events[5]["id"], y[5], T0 + 393_000),  # 388 s after event 5: more than the 60 s TTL
              ("no-such-event", 1.0, T0 + 394_000)]  # its event never comes (waits, then dropped)
    produce_labels(kafka_bootstrap, topic_name + ".labels", labels)
    cfg = sharded(kafka_bootstrap, topic_name, tmp_path, shards=2, label_ttl=60.0)
    run(cfg)
    dead = {d["reason"]: d for d in read_records(kafka_bootstrap, cfg.dlq_topic, 2, timeout=20)}
    assert set(dead) == {"label_duplicate", "label_expired"}
    assert all(d["topic"] == topic_name + ".labels" for d in dead.values())
    assert "came more than the label TTL (60 s) after the event" in dead["label_expired"]["detail"]
    cut = CutStore(cfg.checkpoint_dir).latest("default", 2)
    assert cut.learned == 1  # only event 390 was learned
    header, waiting = cut.part("router")
    assert Codec().decode(bytes(waiting["pending_label_message_id_bytes"]))["event_id"] == "no-such-event"
    # The label still waits for its event; one that the events topic moves past by more than the TTL is dropped.
    more = [{**e, "id": f"x{i}", "timestamp": T0 + 500_000 + i} for i, e in enumerate(events[:3])]
    produce_events(kafka_bootstrap, topic_name, more, progress=False)
    run(cfg)
    dead = read_records(kafka_bootstrap, cfg.dlq_topic, 3, timeout=20)
    assert [d["reason"] for d in dead][2:] == ["label_unknown_event"]


def test_a_restart_keeps_the_events_waiting_for_labels(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(600)
    ids = [e["id"] for e in events]
    labels_topic = topic_name + ".labels"
    produce_events(kafka_bootstrap, topic_name, unlabelled(events), partitions=1, progress=False)
    produce_labels(kafka_bootstrap, labels_topic, [(ids[i], y[i], T0 + 2000 + i) for i in range(0, 600, 2)])
    cfg = sharded(kafka_bootstrap, topic_name, tmp_path)
    result = run(cfg)
    first = CutStore(cfg.checkpoint_dir).latest("default", 1)
    assert len(first.part("router")[1]["pending_event_ts"]) == 300  # the odd events still wait
    # Both steps report their gauges; the exact counts are the cut's, above and below.
    assert 0 < gauge(result, "pending_events_default") <= 600
    assert 0 < gauge(result, "held_predictions_default") <= 600
    assert len(first.part("combiner")[1]["pending_event_ts"]) == 300  # with their predictions

    produce_labels(kafka_bootstrap, labels_topic, [(ids[i], y[i], T0 + 3000 + i) for i in range(1, 600, 2)])
    run(cfg)  # a new run: resumes from the cut, with the waiting events
    final = CutStore(cfg.checkpoint_dir).latest("default", 1)
    assert len(final.part("router")[1]["pending_event_ts"]) == 0
    predictions = read_records(kafka_bootstrap, cfg.predictions_topic, 1200, timeout=30)
    order = learning_order(predictions)
    assert sorted(order) == sorted(ids)
    assert_same_state(final.merged_learner(cfg.learner.make), reference_after(X, y, ids, order))


def test_scinol_run_takes_a_labels_topic_with_shards(kafka_bootstrap, topic_name, tmp_path, capsys):
    from tests.support.cli import ok

    X, y, events = toy_stream(200)
    ids = [e["id"] for e in events]
    produce_events(kafka_bootstrap, topic_name, unlabelled(events), partitions=1, progress=False)
    produce_labels(kafka_bootstrap, topic_name + ".labels", [(ids[i], y[i], T0 + 300 + i) for i in range(0, 200, 2)]
                   + [("no-such-event", 1.0, T0 - 10_000_000)])
    ckpt = str(tmp_path / "ckpt")
    ok(capsys, "run", "--bootstrap-server", kafka_bootstrap, "--topic", topic_name, "--predictions-topic",
       topic_name + ".pred", "--bounded", "--shards", "2", "--labels-topic", topic_name + ".labels",
       "--label-ttl", "60", "--checkpoint-dir", ckpt)
    cut = CutStore(ckpt).latest("default", 2)
    assert cut.learned == 100  # the even events: their labels came
    assert len(cut.part("router")[1]["pending_event_ts"]) == 100  # the odd ones wait
    dead = read_records(kafka_bootstrap, topic_name + ".dlq", 1, timeout=20)
    assert [d["reason"] for d in dead] == ["label_unknown_event"]  # 10,000 s before the events


def test_killed_mid_stream_resumes_from_a_cut_with_its_waiting_events(kafka_bootstrap, topic_name, tmp_path):
    """kill -9 while the shards run; the restart loads the newest complete
    cut, router and combine parts included, all at the same event: the
    final model is one learner's on the events in the order they were
    learned (up to the cut in the first run, then in the restart)."""
    import signal
    import subprocess
    import sys
    import time

    n = 600
    X, y, ids = produce_delayed(kafka_bootstrap, topic_name, n, 300, seed=5)
    ckpt = tmp_path / "ckpt"

    def command(predictions):
        return [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", kafka_bootstrap, "--topic", topic_name,
                "--predictions-topic", predictions, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "60",
                "--shards", "1", "--max-staleness", "0", "--labels-topic", topic_name + ".labels",
                "--max-batch", "50"]

    proc = subprocess.Popen(command(topic_name + ".pred"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(list(ckpt.glob("default/cut-*/combiner.scinol"))) < 3:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = CutStore(str(ckpt)).latest("default", 1)
    assert killed_at is not None and 0 < killed_at.seq < 2 * n
    saved = killed_at.part("router")[1]
    waiting_then = len(saved["pending_event_ts"]) + len(saved["pending_label"])
    assert waiting_then > 0  # events (or labels) waited in the cut the restart starts from
    subprocess.run(command(topic_name + ".pred2") + ["--bounded"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=300)
    final = CutStore(str(ckpt)).latest("default", 1)
    assert final.learned == n and len(final.part("router")[1]["pending_event_ts"]) == 0

    before = learning_order(read_records(kafka_bootstrap, topic_name + ".pred", 10**9, timeout=5))
    after = learning_order(read_records(kafka_bootstrap, topic_name + ".pred2", 10**9, timeout=10))
    order = before[:killed_at.learned] + after
    assert sorted(order) == sorted(ids)  # each learned once: none lost with the kill, none twice
    assert_same_state(final.merged_learner(), reference_after(X, y, ids, order))
    print(f"killed at event #{killed_at.seq} with {waiting_then} waiting")


def test_a_run_with_a_labels_topic_resumes_from_a_cut_made_without_one(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(400)
    ids = [e["id"] for e in events]
    produce_events(kafka_bootstrap, topic_name, events[:200], partitions=1, progress=False)
    run(config(kafka_bootstrap, topic_name, tmp_path, shards=1, max_staleness=0))  # labels inline only
    produce_events(kafka_bootstrap, topic_name, unlabelled(events[200:]), progress=False)
    produce_labels(kafka_bootstrap, topic_name + ".labels", [(ids[i], y[i], T0 + 500 + i) for i in range(200, 400)])
    cfg = sharded(kafka_bootstrap, topic_name, tmp_path)
    run(cfg)
    final = CutStore(cfg.checkpoint_dir).latest("default", 1)
    assert final.learned == 400 and len(final.part("router")[1]["pending_event_ts"]) == 0
    order = learning_order(read_records(kafka_bootstrap, cfg.predictions_topic, 10**9, timeout=10))
    assert order[:200] == ids[:200] and sorted(order[200:]) == ids[200:]
    assert_same_state(final.merged_learner(cfg.learner.make), reference_after(X, y, ids, order))

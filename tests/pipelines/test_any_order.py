"""Exact on any runner: whatever order a runner delivers batches in, however
many times, each model applies each partition in offset order, every event
once, and the result is the single-process learner's bit for bit.

The runner here is the in-process one with a harness before the decode step
and each keyed step (tests/support/reorder.py) that shuffles elements across
bundles, holds some back to the end and sends some twice; Flink's batch mode
and Prism are in tests/runners/test_any_order_runners.py. On the embedded
broker only: what is tested is the pipeline's ordering, not the broker."""

import numpy as np
import pytest

from learners import make_learner
from pipelines.kafka.consumer import read_topic
from pipelines.launch import run, summarize
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from schemas.codec import Codec
from tests.support.labels import (T0, assert_same_state, learning_order, produce_labels, reference_after,
                                  unlabelled)
from tests.support.reorder import Harness
from tests.support.runs import config, toy_stream
from tests.support.sharded_loop import in_one_process

SEEDS = range(4)
ORDERS = [Harness(seed) for seed in SEEDS] + [Harness(0, "reverse"), Harness(0, "last")]


def order_id(h: Harness) -> str:
    return f"{h.mode}-{h.seed}"


def counters(result) -> dict:
    """Every counter of the run, by name (the harness's included)."""
    out = {}
    for c in result.metrics().query()["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(c.committed or c.attempted or 0)
    return out


def check_counts(result, harness: Harness) -> None:
    """The harness did reorder (parts waited at the keyed step); nothing was
    skipped as covered; the repeats it sent were dropped and counted."""
    counts = counters(result)
    assert counts.get("waited_batches", 0) > 0 or harness.mode == "last"
    assert summarize(result).skipped == 0 and counts.get("skipped_as_covered", 0) == 0
    repeated = sum(v for k, v in counts.items() if k.startswith("repeated_"))
    assert (counts.get("replayed_batches", 0) > 0) == (repeated > 0)


def read_all(bootstrap, topic) -> list[dict]:
    """Every record of the topic (until none came for 3 s)."""
    codec = Codec()
    return [codec.decode(m.value) for m in read_topic(bootstrap, topic, idle_timeout=3.0)]


def final_model(cfg, model="default"):
    return CheckpointStore(cfg.checkpoint_dir).latest(model).learner


@pytest.mark.parametrize("harness", ORDERS, ids=order_id)
def test_one_partition_one_model(tansu_bootstrap, topic_name, tmp_path, harness):
    X, y, events = toy_stream(700, unlabelled_every=9)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, max_batch=40, reorder=harness)
    result = run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events), timeout=30)
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]  # each once, in offset order
    want = make_learner("scinol2", "logistic")
    assert [p["score"] for p in preds] == want.learn(X, y).tolist()  # bit for bit
    assert_same_state(final_model(cfg), want)
    check_counts(result, harness)


@pytest.mark.parametrize("harness", [Harness(1), Harness(2, "reverse")], ids=order_id)
def test_one_model_per_partition(tansu_bootstrap, topic_name, tmp_path, harness):
    """Four partitions, each its own model: each model's predictions, state
    and checkpoints are the single-process learner's over its partition."""
    X, y, events = toy_stream(800)
    events = [{**e, "model": f"p{i % 4}"} for i, e in enumerate(events)]  # event i goes to partition i % 4
    produce_events(tansu_bootstrap, topic_name, events, partitions=4, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, max_batch=25, checkpoint_every=60, reorder=harness)
    result = run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events), timeout=30)
    assert sorted(p["event_id"] for p in preds) == sorted(e["id"] for e in events)
    for part in range(4):
        mine = [p for p in preds if p["model"] == f"p{part}"]
        assert [p["source_offset"] for p in mine] == list(range(200))  # its partition in offset order
        want = make_learner("scinol2", "logistic")
        assert [p["score"] for p in mine] == want.learn(X[part::4], y[part::4]).tolist()
        assert_same_state(final_model(cfg, f"p{part}"), want)
    check_counts(result, harness)


@pytest.mark.parametrize("harness", [Harness(3), Harness(4, "last")], ids=order_id)
def test_one_model_over_several_partitions(tansu_bootstrap, topic_name, tmp_path, harness):
    """Three partitions, one model: every event applied once, each partition
    in offset order (how partitions interleave is the runner's), and the
    model is the single-process learner's over the order it applied them in."""
    X, y, events = toy_stream(600)
    produce_events(tansu_bootstrap, topic_name, events, partitions=3, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, max_batch=30, reorder=harness)
    result = run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events), timeout=30)
    applied = sorted(preds, key=lambda p: p["model_version"])  # every event labelled: its version is its place
    assert [p["model_version"] for p in applied] == list(range(len(events)))
    index = {e["id"]: i for i, e in enumerate(events)}
    order = [index[p["event_id"]] for p in applied]
    for part in range(3):
        assert [i for i in order if i % 3 == part] == list(range(part, len(events), 3))
    want = make_learner("scinol2", "logistic")
    assert [p["score"] for p in applied] == want.learn(X[order], y[order]).tolist()
    assert_same_state(final_model(cfg), want)
    check_counts(result, harness)


@pytest.mark.parametrize("harness", [Harness(5), Harness(6, "reverse")], ids=order_id)
def test_models_sharing_a_partition_with_dead_letters_between(tansu_bootstrap, topic_name, tmp_path, harness):
    """Two models in one partition, in runs of different lengths, with
    messages that are no event between them: batches without a model's
    events leave holes in its chain that the sequencing step closes."""
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec
    from pipelines.kafka.producer import KafkaWriter
    from schemas.codec import Codec

    X, y, events = toy_stream(600)
    model_of = ["a" if (i // 7) % 3 else "b" for i in range(len(events))]
    KafkaAdmin(tansu_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    codec, writer = Codec(), KafkaWriter(tansu_bootstrap, topic_name)
    for i, e in enumerate(events):
        writer.produce(codec.encode("scinol.Event", {**e, "model": model_of[i]}, topic_name))
        if i % 50 == 0:
            writer.produce(b"not an event")
    writer.close()
    cfg = config(tansu_bootstrap, topic_name, tmp_path, max_batch=20, reorder=harness)
    result = run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events), timeout=30)
    for model in "ab":
        rows = [i for i in range(len(events)) if model_of[i] == model]
        mine = [p for p in preds if p["model"] == model]
        assert [p["event_id"] for p in mine] == [events[i]["id"] for i in rows]
        want = make_learner("scinol2", "logistic")
        assert [p["score"] for p in mine] == want.learn(X[rows], y[rows]).tolist()
        assert_same_state(final_model(cfg, model), want)
    check_counts(result, harness)


@pytest.mark.parametrize("harness", [Harness(7), Harness(8, "reverse")], ids=order_id)
def test_delayed_labels(tansu_bootstrap, topic_name, tmp_path, harness):
    """Events without labels, their labels later on a labels topic: every
    event learned once, the labels that came after their events in the
    labels topic's offset order, and the model is the single-process
    learner's over the order it learned in."""
    n = 500
    X, y, events = toy_stream(n)
    ids = [e["id"] for e in events]
    due = np.arange(n) + np.random.default_rng(harness.seed).integers(0, 300, size=n)
    arrival = np.argsort(due, kind="stable")
    produce_events(tansu_bootstrap, topic_name, unlabelled(events), partitions=1, progress=False)
    produce_labels(tansu_bootstrap, topic_name + ".labels", [(ids[i], y[i], T0 + int(due[i])) for i in arrival])
    cfg = config(tansu_bootstrap, topic_name, tmp_path, labels_topic=topic_name + ".labels", max_batch=30,
                 reorder=harness)
    result = run(cfg)
    preds = read_all(tansu_bootstrap, cfg.predictions_topic)  # one or two records an event
    order = learning_order(preds)
    assert sorted(order) == sorted(ids)  # each event learned from exactly once
    label_offset = {ids[i]: k for k, i in enumerate(arrival)}
    first = {}
    for p in preds:
        first.setdefault(p["event_id"], p)
    late = [p["event_id"] for p in preds if p["label"] is not None and first[p["event_id"]] is not p]
    assert [label_offset[e] for e in late] == sorted(label_offset[e] for e in late)
    assert_same_state(final_model(cfg), reference_after(X, y, ids, order))
    check_counts(result, harness)


@pytest.mark.parametrize("staleness", [0, 1024])
@pytest.mark.parametrize("harness", [Harness(9), Harness(10, "reverse")], ids=order_id)
def test_sharded_mode(tansu_bootstrap, topic_name, tmp_path, harness, staleness):
    """K = 2: the route step takes the events and the feedback in offset
    order, the shards what the route step sent in the order it sent it, the
    combine step each shard's partial sums likewise: the predictions are
    those of the same protocol run in one process, bit for bit. (At
    staleness 0 every event is a round trip through five harnesses, each
    holding back what it has until the loop goes quiet: about 2 s an event,
    so few events.)"""
    _, _, events = toy_stream(200 if staleness else 16)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, shards=2, max_staleness=staleness, max_batch=25,
                 feedback_timeout=60.0, reorder=harness)
    result = run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events), timeout=30)
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]
    assert [p["score"] for p in preds] == in_one_process(events, topic_name, 2, staleness)
    counts = counters(result)
    assert counts.get("feedback_missing", 0) == 0 and counts.get("feedback_duplicates", 0) == 0
    check_counts(result, harness)

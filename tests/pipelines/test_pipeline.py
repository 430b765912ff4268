"""The exact-mode pipeline end to end on both brokers (tansu, Apache Kafka): Kafka events in,
predictions and checkpoints out, equal to the in-memory learner."""

import signal
import subprocess
import sys
import time

import numpy as np
from confluent_kafka import Producer

from learners import make_learner
from pipelines.state.checkpoints import CheckpointStore
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.records.topics import produce_events
from pipelines.launch import run
from pipelines.records.topics import read_records
from schemas.codec import Codec
from tests.support.runs import config, toy_stream
from tests.support.trialkit import read_topic




def test_predictions_and_final_checkpoint_equal_the_in_memory_learner(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(20_000, unlabelled_every=11)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(kafka_bootstrap, topic_name, tmp_path, checkpoint_every=5000)
    run(cfg)
    preds = read_records(kafka_bootstrap, cfg.predictions_topic, len(events))
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]
    want = make_learner("scinol2", "logistic").learn(X, y)
    got = np.array([p["score"] for p in preds])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    ckpt = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert ckpt.event_count == 20_000 and ckpt.offsets == {(topic_name, 0): 20_000}
    straight = make_learner("scinol2", "logistic")
    straight.learn(X, y)
    np.testing.assert_array_equal(ckpt.learner.state.arrays["P"], straight.state.arrays["P"][: ckpt.learner.state.n_coords])
    headers = read_records(kafka_bootstrap, cfg.ckpt_topic, 4)
    counts = [h["event_count"] for h in headers]  # every ≥ 5000 events (checked per batch), then at the end
    assert counts[-1] == 20_000 and len(counts) >= 3 and counts == sorted(set(counts)) and counts[0] >= 5000
    assert all(h["model"] == "default" and h["learner"] == "scinol2" for h in headers)


def test_two_models_in_one_stream_learn_independently(kafka_bootstrap, topic_name, tmp_path):
    Xa, ya, ea = toy_stream(3000, seed=1, model="a")
    Xb, yb, eb = toy_stream(2000, seed=2, model="b")
    mixed, ia, ib = [], 0, 0
    rng = np.random.default_rng(0)
    while ia < len(ea) or ib < len(eb):
        if ib >= len(eb) or (ia < len(ea) and rng.random() < 0.6):
            mixed.append(ea[ia]); ia += 1  # noqa: E702
        else:
            mixed.append(eb[ib]); ib += 1  # noqa: E702
    produce_events(kafka_bootstrap, topic_name, mixed, partitions=1, progress=False)
    cfg = config(kafka_bootstrap, topic_name, tmp_path)
    run(cfg)
    preds = read_records(kafka_bootstrap, cfg.predictions_topic, len(mixed))
    for model, X, y in (("a", Xa, ya), ("b", Xb, yb)):
        got = np.array([p["score"] for p in preds if p["model"] == model])
        np.testing.assert_allclose(got, make_learner("scinol2").learn(X, y), rtol=1e-12, atol=1e-300)
    assert sorted(CheckpointStore(cfg.checkpoint_dir).models()) == ["a", "b"]


def test_bad_events_go_to_the_dead_letter_topic_and_the_rest_flows(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(300)
    codec = Codec()
    bad = {
        40: b"\x00\x00\x00",  # too short to be framed
        41: b"\x00\x00\x00\x7f\xff" + b"x",  # unknown schema id
        90: codec.encode("scinol.Event", {**events[90], "features": {"values": [float("nan")] * 21}}),
        120: codec.encode("scinol.Event", {**events[120], "features": {"indices": [1, 2], "values": [1.0]}}),
        150: codec.encode("scinol.Event", {**events[150], "features": {"indices": [-1], "values": [1.0]}}),
        151: codec.encode("scinol.Event", {**events[151], "features": {"indices": [3, 3], "values": [1.0, 2.0]}}),
        200: codec.encode("scinol.Event", {**events[200], "label": 7.0}),
    }
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})  # offsets in order
    for i, event in enumerate(events):
        producer.produce(topic_name, value=bad.get(i) or codec.encode("scinol.Event", event))
    producer.flush(10)
    cfg = config(kafka_bootstrap, topic_name, tmp_path)
    run(cfg)
    dead = read_records(kafka_bootstrap, cfg.dlq_topic, len(bad))
    assert {d["offset"]: d["reason"] for d in dead} == {
        40: "undecodable", 41: "unknown_schema_id", 90: "non_finite_feature", 120: "length_mismatch",
        150: "negative_index", 151: "duplicate_index", 200: "bad_label"}
    assert all(d["original"] == bad[d["offset"]] and d["topic"] == topic_name and d["detail"] for d in dead)
    preds = read_records(kafka_bootstrap, cfg.predictions_topic, 300 - len(bad))
    good = [i for i in range(300) if i not in bad]
    assert [p["event_id"] for p in preds] == [events[i]["id"] for i in good]
    np.testing.assert_allclose([p["score"] for p in preds], make_learner("scinol2").learn(X[good], y[good]),
                               rtol=1e-12, atol=1e-300)


def test_killed_pipeline_resumes_from_its_checkpoint(kafka_bootstrap, topic_name, tmp_path):
    """kill -9 after a checkpoint; the restart's final model equals an
    uninterrupted run's and every event has a prediction."""
    X, y, events = toy_stream(12_000)
    produce_events(kafka_bootstrap, topic_name, events[:6000], partitions=1, progress=False)
    ckpt_dir = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", kafka_bootstrap, "--topic", topic_name,
           "--predictions-topic", topic_name + ".pred", "--checkpoint-dir", str(ckpt_dir),
           "--checkpoint-every", "1000", "--max-batch", "200"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # unbounded: runs on
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = sorted((ckpt_dir / "default").glob("ckpt-*.json")) if (ckpt_dir / "default").exists() else []
            if len(done) >= 2:
                break
            time.sleep(0.05)
        assert done, "no checkpoint before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = CheckpointStore(str(ckpt_dir)).latest("default").event_count
    assert 0 < killed_at <= 6000
    produce_events(kafka_bootstrap, topic_name, events[6000:], progress=False)
    subprocess.run(cmd + ["--bounded"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)
    final = CheckpointStore(str(ckpt_dir)).latest("default")
    assert final.event_count == 12_000
    straight = make_learner("scinol2", "logistic")
    straight.learn(X, y)
    np.testing.assert_array_equal(final.learner.state.arrays["P"],
                                  straight.state.arrays["P"][: final.learner.state.n_coords])
    # to the end of the topic: how many predictions were re-sent after the kill is not known in advance
    preds = [record for _, _, record in read_topic(kafka_bootstrap, topic_name + ".pred")]
    assert {p["event_id"] for p in preds} == {e["id"] for e in events}


def test_a_model_that_joins_a_shared_partition_late_loses_nothing_on_restart(kafka_bootstrap, topic_name, tmp_path):
    """Model b's first events come after model a has checkpointed past them
    in the same partition: the restart must still replay them for b."""
    Xa, ya, a_events = toy_stream(3000, seed=1, model="a")
    Xb, yb, b_events = toy_stream(400, seed=2, model="b")
    stream = a_events[:2000] + [e for pair in zip(a_events[2000:2400], b_events) for e in pair]
    produce_events(kafka_bootstrap, topic_name, stream, partitions=1, progress=False)
    ckpt_dir = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", kafka_bootstrap, "--topic", topic_name,
           "--predictions-topic", topic_name + ".pred", "--checkpoint-dir", str(ckpt_dir),
           "--checkpoint-every", "2100", "--max-batch", "100"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # a checkpoints at 2,100 of its events: 100 of b's have come by then
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (ckpt_dir / "a").exists():
            time.sleep(0.05)
        assert (ckpt_dir / "a").exists(), "no checkpoint of model a before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    produce_events(kafka_bootstrap, topic_name, a_events[2400:], progress=False)
    subprocess.run(cmd + ["--bounded"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)
    for model, X, y, n in (("a", Xa, ya, 3000), ("b", Xb, yb, 400)):
        final = CheckpointStore(str(ckpt_dir)).latest(model)
        assert final.event_count == n, model
        straight = make_learner("scinol2", "logistic")
        straight.learn(X, y)
        np.testing.assert_array_equal(final.learner.state.arrays["P"],
                                      straight.state.arrays["P"][: final.learner.state.n_coords])

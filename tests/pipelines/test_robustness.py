"""A main job that never trips: checkpoints bound to the stream they were
made from, a broker that is down at start, a bound on model names, one
progress line per interval, checkpoints only when due, and the demo run
twice in one folder."""

import os
import subprocess
import sys

import numpy as np
import pytest

from learners import make_learner
from pipelines.config import RunConfig
from pipelines.kafka.admin import KafkaAdmin
from pipelines.kafka.broker import free_port
from pipelines.launch import run
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from pipelines.state.resume import ResumeRefused
from tests.support.runs import config, toy_stream


def _scinol(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def _one_line_error(done) -> str:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("scinol: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def _learn_stream(bootstrap, topic, tmp_path, n=600, **kw):
    X, y, events = toy_stream(n)
    produce_events(bootstrap, topic, events, partitions=1, progress=False)
    cfg = config(bootstrap, topic, tmp_path, **kw)
    run(cfg)
    return cfg, X, y


def test_checkpoints_record_the_cluster_topic_and_partitions(kafka_bootstrap, topic_name, tmp_path):
    cfg, _, _ = _learn_stream(kafka_bootstrap, topic_name, tmp_path)
    ckpt = CheckpointStore(cfg.checkpoint_dir).latest("default")
    admin = KafkaAdmin(kafka_bootstrap)
    assert ckpt.source == {"cluster_id": admin.cluster_id(), "topic": topic_name,
                           "topic_id": admin.describe(topic_name).topic_id, "partitions": 1}


def test_resuming_against_another_cluster_is_refused_with_one_line(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(300)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    ckpt_dir = tmp_path / "ckpt"
    learner = make_learner("scinol2", "logistic")
    learner.learn(X[:100], y[:100])
    elsewhere = {"cluster_id": "another-cluster", "topic": topic_name, "topic_id": "x", "partitions": 1}
    CheckpointStore(str(ckpt_dir), source=elsewhere).save("default", learner, {(topic_name, 0): 100}, 100)
    line = _one_line_error(_scinol("run", "--bootstrap", kafka_bootstrap, "--topic", topic_name,
                                   "--predictions-topic", topic_name + ".pred", "--checkpoint-dir", str(ckpt_dir),
                                   "--bounded"))
    cluster = KafkaAdmin(kafka_bootstrap).cluster_id()
    assert f"made from Kafka cluster 'another-cluster', but the broker at {kafka_bootstrap} is cluster " \
           f"'{cluster}'" in line
    assert "--from-scratch" in line and "--checkpoint-dir" in line


def test_a_remade_topic_is_refused_and_from_scratch_starts_fresh(kafka_bootstrap, topic_name, tmp_path):
    cfg, _, _ = _learn_stream(kafka_bootstrap, topic_name, tmp_path, n=400)
    KafkaAdmin(kafka_bootstrap).client.delete_topics([topic_name])[topic_name].result(10)
    X, y, events = toy_stream(200, seed=1)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    with pytest.raises(ResumeRefused, match="deleted and made again|ends at offset"):
        run(cfg)
    run(RunConfig(**{**cfg.__dict__, "from_scratch": True}))
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert final.event_count == 200  # the new stream only
    want = make_learner("scinol2", "logistic")
    want.learn(X, y)
    np.testing.assert_array_equal(final.learner.state.arrays["P"], want.state.arrays["P"][: final.learner.state.n_coords])
    moved = [e for e in os.listdir(cfg.checkpoint_dir) if e.startswith(".superseded-")]
    assert len(moved) == 1 and "default" in os.listdir(os.path.join(cfg.checkpoint_dir, moved[0]))


def test_checkpoints_past_the_end_of_the_topic_are_refused(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(50)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    ckpt_dir = tmp_path / "ckpt"
    learner = make_learner("scinol2", "logistic")
    learner.learn(X, y)
    CheckpointStore(str(ckpt_dir)).save("default", learner, {(topic_name, 0): 11_380}, 11_380)  # no source recorded
    with pytest.raises(ResumeRefused, match=rf"covers {topic_name}\[0\] up to offset 11,380, but the topic ends "
                                            r"at offset 50"):
        run(config(kafka_bootstrap, topic_name, tmp_path))


def test_a_broker_that_is_down_at_start_is_retried_then_one_line(topic_name):
    nowhere = f"127.0.0.1:{free_port()}"
    done = _scinol("run", "--bootstrap", nowhere, "--topic", topic_name, "--predictions-topic", "p",
                   "--connect-timeout", "2", "--bounded", timeout=60)
    line = _one_line_error(done)
    assert f"no Kafka broker answers at {nowhere} (tried for 2 s" in line and "Connection refused" in line
    assert f"Kafka at {nowhere} does not answer" in done.stderr  # said once, while retrying
    assert "%3|" not in done.stderr and "FAIL|rdkafka" not in done.stderr  # librdkafka's own log lines are off


def test_max_models_sends_further_model_names_to_the_dead_letter_topic(kafka_bootstrap, topic_name, tmp_path):
    events = []
    for model in ("a", "b", "c"):
        events += toy_stream(30, model=model)[2]
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(kafka_bootstrap, topic_name, tmp_path, max_models=2)
    run(cfg)
    dead = read_records(kafka_bootstrap, cfg.dlq_topic, 30)
    assert len(dead) == 30 and {d["reason"] for d in dead} == {"too_many_models"}
    assert "would be model number 3 of this worker; --max-models is 2" in dead[0]["detail"]
    assert sorted(e for e in os.listdir(cfg.checkpoint_dir) if not e.startswith(".")) == ["a", "b"]


def test_a_bounded_run_checkpoints_when_due_and_at_the_end_only(kafka_bootstrap, topic_name, tmp_path, capsys):
    """Small batches make many bundles (the source also checkpoints itself
    every second): the end-of-input timer must not turn them into checkpoints
    or progress lines."""
    cfg, _, _ = _learn_stream(kafka_bootstrap, topic_name, tmp_path, n=30_000, max_batch=100,
                              checkpoint_every=12_000, progress_seconds=3600)
    headers = read_records(kafka_bootstrap, cfg.ckpt_topic, 10, timeout=5)
    assert [h["event_count"] for h in headers] == [12_000, 24_000, 30_000]
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[scinol]")]
    assert len(progress) == 1 and "30000 events" in progress[0]


@pytest.mark.slow
def test_the_demo_runs_twice_in_one_folder(tmp_path):
    for _ in range(2):
        done = _scinol("demo", "--passes", "2", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and "apitools" not in done.stderr
        assert "%3|" not in done.stderr and "Connection refused" not in done.stderr
        assert "predictions: 1,138 records" in done.stdout
    assert "starting fresh" in done.stderr
    assert sorted(os.listdir(tmp_path / "scinol-demo" / "checkpoints")) == [".progress", "breast-cancer"]

"""Faults survived: kill -9 at random moments and inside checkpoint writes,
corrupted checkpoints, a paused broker and a broker port refusing
connections. Each end-to-end test runs the real ``scinol run`` against a real
broker and checks, from Kafka and the checkpoint files, that nothing was lost
or applied twice (tests/trialkit.py); benchmarks/fault_trials.py runs the
full set and prints the table."""

import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.support.faultkit import TcpProxy, make_broker
from learners import make_learner
from pipelines.state.checkpoints import STALE_TEMP_SECONDS, CheckpointStore
from pipelines.kafka.producer import KafkaDeliveryError, KafkaWriter
from tests.support.trialkit import (Fault, make_stream, read_topic, reference_learners, reorder_stream,
                                    run_broker_fault_trial, run_trial, same_state)


@pytest.fixture(scope="module")
def stream():
    return make_stream(3000, seed=8)


@pytest.fixture(scope="module")
def references(stream):
    return reference_learners(stream)


def _assert_survived(result):
    assert not result.errors, result.errors
    assert result.events_lost == 0 and result.events_double_applied == 0, result
    assert result.models_identical, "final models differ from the uninterrupted run's"
    assert result.dead_letters_as_expected, result.dead_letters


CRASHES = {
    "in-write-before-rename": [Fault("kill-in-write", point="checkpoint-before-rename", nth=3)],
    "in-write-before-manifest": [Fault("kill-in-write", point="checkpoint-before-manifest", nth=4)],
    "after-checkpoint-then-truncated": [Fault("kill-after-checkpoint"), Fault("corrupt-newest", how="truncate")],
    "random-then-bit-flip": [Fault("kill-random-time"), Fault("kill-after-checkpoint", model="b"),
                                   Fault("corrupt-newest", how="flip", model="b")],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CRASHES))
def test_kill9_then_restart_ends_with_the_uninterrupted_model(kafka_bootstrap, stream, references, tmp_path, name):
    result = run_trial(kafka_bootstrap, name, CRASHES[name], stream, str(tmp_path), seed=len(name),
                       references=references)
    _assert_survived(result)
    assert result.faults_injected == len(CRASHES[name]), result.notes  # every fault hit its target
    if name.endswith(("truncated", "bit-flip")):
        assert result.fallback_warnings == 1  # the damaged checkpoint was noticed, once, and skipped
    if name == "in-write-before-rename":  # the kill left a complete but unnamed checkpoint, ignored on restart
        assert result.notes[0].endswith("; 1 temp files left"), result.notes


# --------------------------------------------------------------------------- checkpoint store, no Kafka

def _learner_after(n):
    rng = np.random.default_rng(0)
    learner = make_learner("scinol2")
    learner.learn(rng.normal(size=(n, 4)), np.where(rng.random(n) < 0.5, 1.0, -1.0))
    return learner


def _three_checkpoints(tmp_path):
    store = CheckpointStore(str(tmp_path))
    for n in (10, 20, 30):
        store.save("m", _learner_after(n), {("t", 0): n}, n)
    return store, sorted((tmp_path / "m").glob("ckpt-*.scinol"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "sidecar"])
def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(tmp_path, caplog, damage):
    store, paths = _three_checkpoints(tmp_path)
    newest = paths[-1]
    if damage == "truncate":
        newest.write_bytes(newest.read_bytes()[:-100])
    elif damage == "flip":
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 1
        newest.write_bytes(bytes(data))
    else:
        newest.with_suffix(".json").write_text('{"checksum": ')
    with caplog.at_level(logging.WARNING, logger="pipelines.state.checkpoints"):
        ckpt = store.latest("m")
    assert ckpt.event_count == 20 and ckpt.offsets == {("t", 0): 20}
    np.testing.assert_array_equal(ckpt.learner.state.arrays["P"], _learner_after(20).state.arrays["P"])
    assert [r.getMessage() for r in caplog.records if str(newest) in r.getMessage()], caplog.text
    reason = "unreadable manifest" if damage == "sidecar" else "checksum mismatch"
    assert reason in caplog.text


def test_a_checkpoint_without_its_sidecar_is_checked_by_its_array_checksums(tmp_path):
    store, paths = _three_checkpoints(tmp_path)
    paths[-1].with_suffix(".json").unlink()  # killed between the rename and the sidecar
    assert store.latest("m").event_count == 30
    data = bytearray(paths[-1].read_bytes())
    data[data.index(b"\x93NUMPY") + 130] ^= 1  # inside the first array's data (its .npy header is 128 bytes)
    paths[-1].write_bytes(bytes(data))
    assert store.latest("m").event_count == 20


def test_stale_temp_files_of_a_crash_are_pruned_fresh_ones_kept(tmp_path):
    store, _ = _three_checkpoints(tmp_path)
    folder = tmp_path / "m"
    stale = [folder / "ckpt-000000000040.scinol.tmp", folder / "ckpt-000000000040.scinol.4711-0a1b2c3d.tmp",
             folder / "ckpt-000000000040.json.4711-0a1b2c3d.tmp"]
    fresh = [folder / ".tmp-abc.scinol", folder / "ckpt-000000000050.scinol.4712-99aa00ff.tmp"]
    old = time.time() - STALE_TEMP_SECONDS - 5
    for path in stale + fresh:
        path.write_bytes(b"half a checkpoint")
    for path in stale:
        os.utime(path, (old, old))
    store.save("m", _learner_after(50), {("t", 0): 50}, 50)
    assert [p.name for p in stale if p.exists()] == [] and all(p.exists() for p in fresh)
    assert json.loads((tmp_path / "m" / "ckpt-000000000050.json").read_text())["event_count"] == 50


def test_two_attempts_writing_one_checkpoint_at_once_both_succeed(tmp_path):
    """A runner may run one key's work twice at once (Prism re-runs a bundle
    while the first attempt still writes): both write the same checkpoint,
    neither may find its temp file renamed away by the other."""
    store, learner = CheckpointStore(str(tmp_path)), _learner_after(40)
    start = threading.Barrier(8)

    def attempt(_):
        start.wait()
        return store.save("m", learner, {("t", 0): 40}, 40)

    with ThreadPoolExecutor(8) as pool:
        manifests = list(pool.map(attempt, range(8)))
    assert len({m["checksum"] for m in manifests}) == 1
    assert store.latest("m").event_count == 40
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["ckpt-000000000040.json",
                                                                "ckpt-000000000040.scinol"]


@pytest.mark.kafka
@pytest.mark.slow
# --------------------------------------------------------------------------- broker faults

def test_broker_paused_then_resumed(broker_kind, stream, tmp_path):
    """SIGSTOP (10 s here, 30 s in benchmarks/fault_trials.py). Short client
    timeouts make the 10 s pause visible to the clients, as 30 s is with the
    defaults."""
    result = run_broker_fault_trial("sigstop", 10, stream, str(tmp_path), (
        "--kafka-config", "socket.timeout.ms=2000", "--kafka-config", "api.version.request.timeout.ms=2000"),
        broker_kind=broker_kind)
    _assert_survived(result)
    assert result.fallback_warnings >= 1, result.notes  # the pipeline said so
    assert "recoveries reported" in result.notes[0] and not result.notes[0].endswith(" 0 recoveries reported")


@pytest.mark.kafka
@pytest.mark.slow
def test_broker_port_refusing_connections(broker_kind, stream, tmp_path):
    result = run_broker_fault_trial("refuse", 8, stream, str(tmp_path), broker_kind=broker_kind)
    _assert_survived(result)
    assert result.fallback_warnings >= 1, result.notes
    assert not result.notes[0].endswith(" 0 recoveries reported"), result.notes


@pytest.mark.kafka
@pytest.mark.slow
def test_with_exactly_once_a_broker_crash_and_restart_writes_each_prediction_once(stream, tmp_path):
    """Apache Kafka killed (-9) mid-stream and restarted on its data 5 s
    later, with ``--exactly-once``: transactions open at the crash are
    aborted or ridden out, and a read_committed consumer sees every
    prediction exactly once."""
    result = run_broker_fault_trial("restart", 5, stream, str(tmp_path), ("--exactly-once",), broker_kind="kafka")
    _assert_survived(result)
    assert result.duplicate_predictions == 0, result


@pytest.mark.kafka
@pytest.mark.slow
def test_writer_waits_out_a_refusing_broker_and_says_so(broker_kind, caplog):
    """The prediction writer's flush (before every checkpoint) rides out an
    outage with warnings, where it used to give up after 60 s."""
    proxy = TcpProxy(target_port=0)
    broker = make_broker(broker_kind, advertised_port=proxy.port)
    proxy.target_port = broker.port
    with proxy, broker:
        writer = KafkaWriter(f"127.0.0.1:{proxy.port}", "writer-outage")
        writer.report_every = 1.0
        for i in range(50):
            writer.produce(b"%d" % i)
        writer.flush()
        proxy.refuse()
        for i in range(50):
            writer.produce(b"%d" % i)
        with caplog.at_level(logging.WARNING):
            import threading
            threading.Timer(4.0, proxy.accept).start()
            writer.flush()
        assert writer.delivered == 100
        assert "has not acknowledged" in caplog.text and "broker trouble" in caplog.text


@pytest.mark.kafka
def test_a_failures_only_writer_says_when_the_broker_answers_again(caplog):
    """Without success reports, the end of a flush that left nothing
    unacknowledged is what tells the operator the outage is over."""
    proxy = TcpProxy(target_port=0)
    broker = make_broker("tansu", advertised_port=proxy.port)
    proxy.target_port = broker.port
    with proxy, broker:
        writer = KafkaWriter(f"127.0.0.1:{proxy.port}", "writer-outage-quiet", count_delivered=False)
        writer.report_every = 1.0
        proxy.refuse()
        writer.produce_values([b"%d" % i for i in range(50)])
        with caplog.at_level(logging.WARNING):
            import threading
            threading.Timer(3.0, proxy.accept).start()
            writer.flush()
        assert writer.delivered == 0  # not counted in this mode
        assert "broker trouble" in caplog.text and "working again" in caplog.text
        got = read_topic(f"127.0.0.1:{proxy.port}", "writer-outage-quiet", timeout=30, raw=True)
        assert sorted(value for _, _, value in got) == sorted(b"%d" % i for i in range(50))


@pytest.mark.kafka
@pytest.mark.parametrize("count_delivered", [True, False], ids=["every-report", "failures-only"])
def test_writer_raises_when_librdkafka_gives_up(count_delivered):
    """Also when librdkafka reports failures only (``scinol produce``'s bulk load)."""
    proxy = TcpProxy(target_port=1)  # refuses: never accepted
    writer = KafkaWriter(f"127.0.0.1:{proxy.port}", "nowhere", {"message.timeout.ms": 1500},
                         count_delivered=count_delivered)
    writer.produce_values([b"x", b"y"])
    with pytest.raises(KafkaDeliveryError, match=r"timed out.* \(and 1 more messages failed\)"):
        writer.flush()


def test_a_reordered_input_topic_is_learned_as_written_and_a_lossy_one_is_refused():
    """The broker trials compare the models with references learned in the
    order the input topic holds (a broker crash can reorder what the feeder
    wrote); records lost or repeated in the topic leave no reference."""
    stream = make_stream(60, seed=3)
    values = list(stream.values[0])
    poison_at = min(k for (p, k) in stream.poison if p == 0)
    order = list(range(len(values)))
    order[2], order[3] = 3, 2  # two events swapped
    order.insert(0, order.pop(poison_at))  # a poison message moved to the front
    written = {0: [values[k] for k in order], 1: list(stream.values[1])}
    same, note = reorder_stream(stream, dict(stream.values))
    assert same is stream and note is None
    moved, note = reorder_stream(stream, written)
    assert "partition 0 reordered from offset 0" in note and "partition 1" not in note
    assert moved.poison[(0, 0)] == stream.poison[(0, poison_at)] and (0, poison_at) not in moved.poison
    assert [(q, k) for (q, k) in moved.poison if q == 1] == [(q, k) for (q, k) in stream.poison if q == 1]
    X, y = stream.data["a"]
    X2, y2 = moved.data["a"]
    assert np.array_equal(X2[:2], X[:2]) and np.array_equal(X2[2], X[3]) and np.array_equal(X2[3], X[2])
    assert np.array_equal(X2[4:], X[4:]) and np.array_equal(y2[[2, 3]], y[[3, 2]], equal_nan=True)
    assert [e["id"] for e in moved.events["a"][:4]] == [stream.events["a"][i]["id"] for i in (0, 1, 3, 2)]
    assert not same_state(reference_learners(moved)["a"], reference_learners(stream)["a"])
    for lossy in ([values[0]] + values, values[1:], values[:-1] + [b"\x00junk"]):
        with pytest.raises(RuntimeError, match="does not hold the stream fed to it"):
            reorder_stream(stream, {0: lossy, 1: list(stream.values[1])})

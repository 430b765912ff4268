"""``--exactly-once``: predictions written in Kafka transactions together
with the input offsets they answer. A run restarted from an older model
state (here: the newest checkpoint file removed, as if the crash came
before it was written) recomputes the events after that state but writes
none of their predictions again: a ``read_committed`` consumer sees each
prediction once, and the same run without the option shows the duplicates
it would otherwise have written. The tansu stand-in broker takes
transactions but shows aborted data to read_committed consumers, so there
the option is at-least-once (the last test keeps that statement honest)."""

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from learners import make_learner
from pipelines.kafka.apache_broker import ApacheKafkaBroker
from pipelines.kafka.producer import KafkaDeliveryError
from pipelines.kafka.transactions import TransactionalOutput
from pipelines.launch import run
from pipelines.records.topics import produce_events
from tests.support.runs import config, toy_stream
from tests.support.faultkit import pause_process
from tests.support.trialkit import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def apache_kafka_broker():
    from tests.support.brokers import started

    broker = started(ApacheKafkaBroker())
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def apache_kafka(apache_kafka_broker):
    return apache_kafka_broker.bootstrap


def committed_predictions(bootstrap: str, topic: str) -> list[dict]:
    # librdkafka consumers read with isolation.level=read_committed by default
    return [record for _, _, record in read_topic(bootstrap, topic)]


def drop_newest_checkpoint(ckpt_dir: str) -> None:
    """As if the run had crashed just before writing its newest checkpoint
    (and so the progress files written after it)."""
    folder = Path(ckpt_dir) / "default"
    newest = sorted(folder.glob("ckpt-*.scinol"))[-1]
    assert newest.stem != "ckpt-000000000000", "expected checkpoints to drop back to"
    newest.unlink()
    newest.with_suffix(".json").unlink()
    for progress in (Path(ckpt_dir) / ".progress").glob("*"):
        if progress.name != "run-start.json":
            progress.unlink()


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_restart_from_an_older_state_writes_no_prediction_twice(apache_kafka, topic_name, tmp_path, exactly_once):
    X, y, events = toy_stream(1200)
    produce_events(apache_kafka, topic_name, events[:800], partitions=1, progress=False)
    cfg = config(apache_kafka, topic_name, tmp_path, checkpoint_every=300, max_batch=100, exactly_once=exactly_once)
    run(cfg)
    drop_newest_checkpoint(cfg.checkpoint_dir)  # the state restarts at event 600, not 800
    produce_events(apache_kafka, topic_name, events[800:], partitions=1, progress=False)
    run(cfg)
    preds = committed_predictions(apache_kafka, cfg.predictions_topic)
    ids = [p["event_id"] for p in preds]
    if exactly_once:
        assert ids == [e["id"] for e in events]
    else:
        assert ids == [e["id"] for e in events[:800]] + [e["id"] for e in events[600:]]
    want = make_learner("scinol2", "logistic").learn(X, y)
    first = {}
    for p in preds:
        first.setdefault(p["event_id"], p["score"])
    np.testing.assert_allclose([first[e["id"]] for e in events], want, rtol=1e-12, atol=1e-300)


def test_a_second_writer_fences_the_first(apache_kafka, topic_name):
    produce_events(apache_kafka, topic_name, [], partitions=1, progress=False)
    source = (topic_name, 0)  # the input whose offsets the outputs answer: here the same topic
    old = TransactionalOutput(apache_kafka, topic_name, "fence-" + topic_name)
    new = None
    try:
        old.commit([(b"a", None)], {source: 1})
        new = TransactionalOutput(apache_kafka, topic_name, "fence-" + topic_name)
        assert new.already_written(*source, 0) and not new.already_written(*source, 1)
        with pytest.raises(KafkaDeliveryError, match="transaction on topic .* failed"):
            old.commit([(b"zombie", None)], {source: 2})
        new.commit([(b"b", None)], {source: 2})
        assert [v for _, _, v in read_raw(apache_kafka, topic_name)] == [b"a", b"b"]
    finally:
        old.close()
        if new is not None:
            new.close()


def test_a_transaction_aborted_by_a_paused_broker_is_written_again_once(apache_kafka_broker, topic_name, caplog):
    """The broker paused mid-transaction until its messages time out: the
    commit fails abortably, the writer aborts and writes the batch again,
    and the failed deliveries of the aborted attempt are not taken for a
    failure of the batch (they once stopped a run with --exactly-once)."""
    bootstrap = apache_kafka_broker.bootstrap
    produce_events(bootstrap, topic_name, [], partitions=1, progress=False)
    source = (topic_name, 0)
    out = TransactionalOutput(bootstrap, topic_name, "pause-" + topic_name, {"message.timeout.ms": 3000})
    try:
        out.commit([(b"a", None)], {source: 1})
        pause = threading.Thread(target=pause_process, args=(apache_kafka_broker.process.pid, 6.0))
        pause.start()
        time.sleep(0.5)  # stopped before the batch is queued: its messages cannot be delivered in time
        try:
            with caplog.at_level("INFO", logger="pipelines.kafka"):
                out.commit([(b"b%d" % i, None) for i in range(50)], {source: 2})
        finally:
            pause.join()
        assert "deliveries of aborted transactions" in caplog.text  # the path this test is about was taken
        assert [v for _, _, v in read_raw(bootstrap, topic_name)] == [b"a"] + [b"b%d" % i for i in range(50)]
        assert not out.already_written(*source, 2) and out.already_written(*source, 1)
    finally:
        out.close()


def test_a_read_right_after_a_commit_waits_for_its_markers(apache_kafka, topic_name):
    """Kafka answers commit_transaction before it writes the markers that make
    the transaction visible; until then a read_committed consumer's end of the
    partition is the transaction's first offset. read_topic, which verifies
    the fault trials' predictions right after the run ends, waits for an
    undecided transaction instead of missing it, and says so if it stays open."""
    produce_events(apache_kafka, topic_name, [], partitions=1, progress=False)
    producer = Producer({"bootstrap.servers": apache_kafka, "transactional.id": "late-" + topic_name})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(100):
        producer.produce(topic_name, b"%d" % i)
    assert producer.flush(30) == 0  # in the log, the transaction undecided
    with pytest.raises(AssertionError, match="a transaction still open"):
        read_topic(apache_kafka, topic_name, raw=True, settle=1.0)
    commit = threading.Timer(2.0, producer.commit_transaction, args=(30,))
    commit.start()
    try:
        assert [v for _, _, v in read_topic(apache_kafka, topic_name, raw=True)] == [b"%d" % i for i in range(100)]
    finally:
        commit.join()


def read_raw(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out = []
        while True:
            msg = consumer.poll(10.0)
            assert msg is not None, "no end of partition within 10 s"
            if msg.error():
                return out
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()


def test_the_stand_in_broker_shows_aborted_data_to_read_committed_consumers(tansu_bootstrap, topic_name):
    """Why docs/runners.md calls --exactly-once at-least-once on tansu: it
    takes transactions, but a read_committed consumer still sees what was
    aborted. (If this starts failing, tansu has fixed it: update the docs.)"""
    produce_events(tansu_bootstrap, topic_name, [], partitions=1, progress=False)
    out = TransactionalOutput(tansu_bootstrap, topic_name, "probe-" + topic_name, timeout=10)
    try:
        producer = out.writer.producer
        producer.begin_transaction()
        out.writer.produce(b"aborted")
        out.writer.flush()
        producer.abort_transaction(10)
        out.commit([(b"committed", None)], {(topic_name, 0): 1})
    finally:
        out.close()
    assert [v for _, _, v in read_raw(tansu_bootstrap, topic_name)] == [b"aborted", b"committed"]


@pytest.mark.parametrize("seeds", [(1, 2), (3, 0)], ids=["seeds-1-2", "seeds-3-0"])
def test_one_model_over_four_partitions_restarts_in_the_committed_order(apache_kafka, topic_name, tmp_path, seeds):
    """One model reads four partitions, and each run meets them in another
    order (a harness shuffles the batches). The restart from an older state
    re-applies what the first run had committed after it: in the order the
    first run applied it (its order journal), not in the order it comes
    now, so the committed predictions are one online run: each model
    version once, every score the learner's over that order, and the last
    checkpoint that learner's state."""
    from tests.support.partitioned import PARTITIONS, check_one_model
    from tests.support.reorder import Harness

    X, y, events = toy_stream(1200)
    produce_events(apache_kafka, topic_name, events[:800], partitions=PARTITIONS, progress=False)
    settings = dict(checkpoint_every=300, max_batch=30, exactly_once=True)
    run(config(apache_kafka, topic_name, tmp_path, reorder=Harness(seeds[0], repeat=0.0), **settings))
    drop_newest_checkpoint(str(tmp_path / "ckpt"))  # the restart re-applies what the first run committed last
    produce_events(apache_kafka, topic_name, events[800:], partitions=PARTITIONS, progress=False)
    run(config(apache_kafka, topic_name, tmp_path, reorder=Harness(seeds[1], repeat=0.0), **settings))
    check_one_model(apache_kafka, topic_name, tmp_path, X, y, events)

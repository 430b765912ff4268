"""The Beam Kafka source and sink (pipelines.beam_io) against real brokers (tansu and Apache Kafka), through Beam on the FnApiRunner.

Nothing is mocked: topics are created on the session broker, written with a
plain confluent-kafka producer (or WriteToKafka), and read through Beam.
"""

import os
import threading
import time
import uuid

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.kafka.broker import free_port
from pipelines.beam_io.partition_fn import METRICS_NAMESPACE
from pipelines.beam_io import KafkaMessage, ReadFromKafka, WriteToKafka

pytestmark = pytest.mark.kafka

PARTITIONS = 4


# --------------------------------------------------------------------------- helpers

def _create_topic(bootstrap, topic, partitions=PARTITIONS):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(10)


def _produce(bootstrap, topic, ids, partitions=PARTITIONS):
    """Value = the decimal id; partition = id % partitions (so each partition is in id order: the
    producer is idempotent, or a retried batch could land after later ones on Apache Kafka)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in ids:
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def _read_all(bootstrap, topic, partitions=PARTITIONS, expect=None, timeout=20.0):
    """Plain consumer: {(partition, offset): (key, value)} for the whole topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-" + uuid.uuid4().hex,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, eof, deadline = {}, set(), time.monotonic() + timeout
    while time.monotonic() < deadline and (len(eof) < partitions or (expect is not None and len(got) < expect)):
        for m in consumer.consume(1000, timeout=0.2):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            assert (m.partition(), m.offset()) not in got
            got[(m.partition(), m.offset())] = (m.key(), m.value())
    consumer.close()
    return got


class _Collect(beam.DoFn):
    """Checks each batch and appends its messages to a file per bundle in `out_dir`."""

    def __init__(self, out_dir):
        self._out_dir = out_dir

    def start_bundle(self):
        self._lines = []

    def process(self, batch, ts=beam.DoFn.TimestampParam):
        assert isinstance(batch, list) and batch, batch
        assert all(isinstance(m, KafkaMessage) for m in batch)
        partition = batch[0].partition
        offsets = [m.offset for m in batch]
        assert all(m.partition == partition for m in batch), "a batch spans partitions"
        assert offsets == sorted(set(offsets)), "a batch is not in offset order"
        newest = max(m.timestamp_ms for m in batch)
        assert newest > 0 and ts.micros >= newest * 1000, (ts, newest)  # event time, never late
        for m in batch:
            key = "-" if m.key is None else m.key.decode()
            self._lines.append(f"{m.partition} {m.offset} {m.value.decode()} {key}\n")

    def finish_bundle(self):
        if self._lines:
            with open(os.path.join(self._out_dir, uuid.uuid4().hex + ".txt"), "w") as f:
                f.writelines(self._lines)
            self._lines = []


def _counters(result):
    """{name: committed value} of the kafka_io counters of a finished pipeline."""
    from apache_beam.metrics import MetricsFilter

    found = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    totals = {}
    for c in found:
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + c.committed
    return totals


def _run_read(tmp_path, *args, metrics=None, out=None, **kwargs):
    """Run ReadFromKafka(*args, **kwargs) on the FnApiRunner; [(partition, offset, value)] in file order.

    `metrics`, a dict, receives the kafka_io counters; `out`, the directory for the collected files."""
    if out is None:
        out = tmp_path / uuid.uuid4().hex
        out.mkdir()
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | ReadFromKafka(*args, **kwargs) | beam.ParDo(_Collect(str(out)))
    result = p.run()
    result.wait_until_finish()
    if metrics is not None:
        metrics.update(_counters(result))
    rows = []
    for name in sorted(os.listdir(out)):
        with open(out / name) as f:
            for line in f:
                part, off, value, _key = line.split()
                rows.append((int(part), int(off), int(value)))
    return rows


def _assert_contiguous(rows, starts, stops):
    by_part = {}
    for part, off, _ in rows:
        by_part.setdefault(part, []).append(off)
    for part in range(PARTITIONS):
        offs = sorted(by_part.get(part, []))
        assert offs == list(range(starts[part], stops[part])), f"partition {part}: offsets not contiguous"


# --------------------------------------------------------------------------- reading

def test_bounded_read_gives_every_message_exactly_once(kafka_bootstrap, topic_name, tmp_path):
    n = 50_000
    _create_topic(kafka_bootstrap, topic_name)
    _produce(kafka_bootstrap, topic_name, range(n))

    rows = _run_read(tmp_path, kafka_bootstrap, topic_name)
    _check_all_once(rows, n)


def test_bounded_read_with_a_checkpoint_after_every_batch(kafka_bootstrap, topic_name, tmp_path):
    """checkpoint_seconds=0: an SDF checkpoint (deferred residual, new bundle, finalizer commit) per batch."""
    n, group = 8_000, "g-" + topic_name
    _create_topic(kafka_bootstrap, topic_name)
    _produce(kafka_bootstrap, topic_name, range(n))

    metrics = {}
    rows = _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group, max_batch=300, checkpoint_seconds=0,
                     metrics=metrics)
    _check_all_once(rows, n)
    assert metrics["timed_checkpoints"] >= n // 300 - PARTITIONS
    assert metrics["batches_read"] >= n // 300
    assert _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group) == []


def _check_all_once(rows, n):
    ids = [v for _, _, v in rows]
    assert len(ids) == n
    assert set(ids) == set(range(n))
    _assert_contiguous(rows, [0] * PARTITIONS, [n // PARTITIONS] * PARTITIONS)
    # partition p holds ids p, p+4, ... in offset order
    assert all(v == off * PARTITIONS + part for part, off, v in rows)


def test_bounded_read_ends_at_the_offsets_seen_at_start(kafka_bootstrap, topic_name, tmp_path):
    """Messages produced while a bounded read runs are not read; an empty topic reads nothing."""
    _create_topic(kafka_bootstrap, topic_name)
    assert _run_read(tmp_path, kafka_bootstrap, topic_name) == []
    _produce(kafka_bootstrap, topic_name, range(400))
    stop = threading.Event()

    def keep_producing():
        i = 400
        while not stop.is_set():
            _produce(kafka_bootstrap, topic_name, range(i, i + 40))
            i += 40

    t = threading.Thread(target=keep_producing)
    t.start()
    try:
        rows = _run_read(tmp_path, kafka_bootstrap, topic_name, max_batch=7)
    finally:
        stop.set()
        t.join()
    per_part = {}
    for part, off, _ in rows:
        per_part[part] = per_part.get(part, 0) + 1
    assert len(rows) == len({(p, o) for p, o, _ in rows})  # no duplicates
    assert set(range(400)) <= {v for _, _, v in rows}
    _assert_contiguous(rows, [0] * PARTITIONS, [per_part[p] for p in range(PARTITIONS)])


def test_unbounded_read_while_producing_stops_after_first_n_per_partition(kafka_bootstrap, topic_name, tmp_path):
    total, stop_after = 20_000, 1_250  # 1,250 per partition x 4 = the first 5,000
    _create_topic(kafka_bootstrap, topic_name)
    _produce(kafka_bootstrap, topic_name, range(1_000))
    out = tmp_path / "unbounded"
    out.mkdir()
    error = []

    def producer():
        # The rest only once the pipeline has emitted a bundle: it has read the first
        # 1,000, caught up, and must wait (idle checkpoints) for the stream to go on.
        try:
            deadline = time.monotonic() + 60
            while not os.listdir(out) and time.monotonic() < deadline:
                time.sleep(0.01)
            for lo in range(1_000, total, 500):
                _produce(kafka_bootstrap, topic_name, range(lo, lo + 500))
                time.sleep(0.02)
        except Exception as exc:  # noqa: BLE001
            error.append(exc)

    t = threading.Thread(target=producer)
    t.start()
    try:
        metrics = {}
        rows = _run_read(tmp_path, kafka_bootstrap, topic_name, bounded=False, stop_after=stop_after,
                         poll_timeout=0.05, metrics=metrics, out=out)
    finally:
        t.join()
    assert not error
    assert metrics["messages_read"] == PARTITIONS * stop_after
    assert metrics["idle_checkpoints"] >= PARTITIONS  # caught up with the producer: deferred, resumed

    assert len(rows) == PARTITIONS * stop_after
    assert len({(p, o) for p, o, _ in rows}) == len(rows)  # no duplicates
    _assert_contiguous(rows, [0] * PARTITIONS, [stop_after] * PARTITIONS)
    # exactly the messages at those offsets, as the broker has them
    on_broker = _read_all(kafka_bootstrap, topic_name, expect=total)
    assert len(on_broker) == total
    assert {(p, o): v for p, o, v in rows} == {
        (p, o): int(kv[1]) for (p, o), kv in on_broker.items() if o < stop_after}
    assert {v for _, _, v in rows} == set(range(PARTITIONS * stop_after))


def test_restart_with_group_resumes_without_loss_or_repeat(kafka_bootstrap, topic_name, tmp_path):
    group = "g-" + topic_name
    _create_topic(kafka_bootstrap, topic_name)
    _produce(kafka_bootstrap, topic_name, range(10_000))

    first = _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group)
    assert sorted(v for _, _, v in first) == list(range(10_000))

    _produce(kafka_bootstrap, topic_name, range(10_000, 15_000))
    second = _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group)
    assert sorted(v for _, _, v in second) == list(range(10_000, 15_000))
    _assert_contiguous(second, [2_500] * PARTITIONS, [3_750] * PARTITIONS)

    # the group's committed offsets are the ends (committed from bundle finalizers)
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    committed = c.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=10)
    c.close()
    assert [tp.offset for tp in committed] == [3_750] * PARTITIONS

    assert _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group) == []

    # unbounded reads commit from bundle finalizers too: two runs of 100 per partition follow on
    _produce(kafka_bootstrap, topic_name, range(15_000, 16_000))
    a = _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group, bounded=False, stop_after=100)
    b = _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group, bounded=False, stop_after=100)
    assert sorted(v for _, _, v in a) == list(range(15_000, 15_400))
    assert sorted(v for _, _, v in b) == list(range(15_400, 15_800))


def test_explicit_start_offsets(kafka_bootstrap, topic_name, tmp_path):
    group = "g-" + topic_name
    _create_topic(kafka_bootstrap, topic_name)
    _produce(kafka_bootstrap, topic_name, range(4_000))  # 1,000 per partition

    starts = {0: 0, 1: 250, 2: 999, 3: 1_000}
    rows = _run_read(tmp_path, kafka_bootstrap, topic_name, start_offsets=starts)
    _assert_contiguous(rows, [0, 250, 999, 1_000], [1_000] * PARTITIONS)
    assert {v for _, _, v in rows} == {i for i in range(4_000) if i // PARTITIONS >= starts[i % PARTITIONS]}

    # explicit offsets win over the group's; partitions not named resume from the group
    _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group, stop_after=600)
    rows = _run_read(tmp_path, kafka_bootstrap, topic_name, group_id=group, start_offsets={2: 100})
    _assert_contiguous(rows, [600, 600, 100, 600], [1_000] * PARTITIONS)


def test_runner_initiated_split_is_honoured(kafka_bootstrap, topic_name):
    """A runner may split a restriction while it is read (dynamic work rebalancing): the primary
    stops at the split point and the residual, read later, continues from there; nothing twice."""
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
    from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker

    from pipelines.beam_io.partition_fn import BoundedReadPartitionFn, PartitionSpec

    _create_topic(kafka_bootstrap, topic_name, partitions=1)
    _produce(kafka_bootstrap, topic_name, range(1_000), partitions=1)

    class Finalizer:
        def __init__(self):
            self.callbacks = []

        def register(self, cb):
            self.callbacks.append(cb)

    fn = BoundedReadPartitionFn(kafka_bootstrap, None, None, max_batch=100, poll_timeout=0.2,
                                 checkpoint_seconds=10, unbounded=False)
    fn.setup()
    spec = PartitionSpec(topic_name, 0, 0, 1_000)
    tracker = ThreadsafeRestrictionTracker(OffsetRestrictionTracker(OffsetRange(0, 1_000)))
    got, spans, residual = [], [], None
    for out in fn.process(spec, Finalizer(), RestrictionTrackerView(tracker), ManualWatermarkEstimator(None)):
        got.extend(m.offset for m in _batch(out))
        spans.append(_batch(out).span)
        if residual is None:
            _primary, residual = tracker.try_split(0.5)  # as a runner's split request would
    tracker.check_done()
    assert got == list(range(residual.start))
    assert 100 <= residual.start < 1_000 and residual.stop == 1_000
    assert spans[-1].end == residual.start  # the primary's chain ends where the residual's begins

    tracker = ThreadsafeRestrictionTracker(OffsetRestrictionTracker(residual))
    for out in fn.process(spec, Finalizer(), RestrictionTrackerView(tracker), ManualWatermarkEstimator(None)):
        got.extend(m.offset for m in _batch(out))
        spans.append(_batch(out).span)
    tracker.check_done()
    fn.teardown()
    assert got == list(range(1_000))
    _assert_tiled(spans, topic_name, 0, 1_000)


def _batch(out):
    return getattr(out, "value", out)


def _assert_tiled(spans, topic, start, end):
    """The spans of a read tile [start, end): each begins where the one before ended."""
    assert all(s.topic == topic and s.partition == 0 and s.origin == start for s in spans)
    assert [s.start for s in spans] == [start] + [s.end for s in spans[:-1]]
    assert spans[-1].end == end and all(s.end > s.start for s in spans)


def test_spans_tile_the_partition_across_calls_and_the_gaps_transactions_leave(kafka_bootstrap, topic_name):
    """Every batch says which offsets it covers, linked to the one before:
    across SDF checkpoints (a call per batch) and over the offsets Kafka's
    transaction markers take, which no message has; the first links to the
    read's start."""
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
    from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker
    from confluent_kafka import Producer

    from pipelines.beam_io.partition_fn import BoundedReadPartitionFn, PartitionSpec
    from pipelines.kafka.admin import KafkaAdmin

    _create_topic(kafka_bootstrap, topic_name, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic_name})
    producer.init_transactions(30)
    for k in range(5):  # each transaction's commit marker takes an offset of its own
        producer.begin_transaction()
        for i in range(7):
            producer.produce(topic_name, str(10 * k + i).encode(), partition=0)
        producer.commit_transaction(30)
    end = KafkaAdmin(kafka_bootstrap).end_offsets(topic_name)[0]
    assert end == 5 * 8  # 35 messages and 5 markers

    class Finalizer:
        def register(self, cb):
            pass

    fn = BoundedReadPartitionFn(kafka_bootstrap, None, {"isolation.level": "read_committed"}, max_batch=4,
                                 poll_timeout=0.2, checkpoint_seconds=30, unbounded=False)
    fn.setup()
    spec, got, spans = PartitionSpec(topic_name, 0, 3, end), [], []
    tracker = ThreadsafeRestrictionTracker(OffsetRestrictionTracker(OffsetRange(3, end)))
    for out in fn.process(spec, Finalizer(), RestrictionTrackerView(tracker), ManualWatermarkEstimator(None)):
        got.extend(int(m.value) for m in _batch(out))
        spans.append(_batch(out).span)
    tracker.check_done()
    fn.teardown()
    assert got == [10 * k + i for k in range(5) for i in range(7)][3:]
    _assert_tiled(spans, topic_name, 3, end)


def test_portable_runner_reads_writes_and_commits(kafka_bootstrap, topic_name):
    """Nothing FnApiRunner-specific: the same transforms through the PortableRunner (local job
    service, LOOPBACK worker over gRPC), including offset commits from bundle finalizers."""
    from apache_beam.metrics import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    group, out_topic = "g-" + topic_name, topic_name + "-out"
    _create_topic(kafka_bootstrap, topic_name)
    _create_topic(kafka_bootstrap, out_topic)
    _produce(kafka_bootstrap, topic_name, range(2_000))

    class Count(beam.DoFn):
        def __init__(self):
            self.n = beam.metrics.Metrics.counter("test", "read")

        def process(self, batch):
            self.n.inc(len(batch))
            yield [m.value for m in batch]

    opts = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"])
    p = beam.Pipeline(options=opts)
    _ = (p | ReadFromKafka(kafka_bootstrap, topic_name, group_id=group) | beam.ParDo(Count())
         | WriteToKafka(kafka_bootstrap, out_topic))
    result = p.run()
    result.wait_until_finish()
    assert sum(c.committed for c in result.metrics().query(MetricsFilter().with_name("read"))["counters"]) == 2_000

    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    committed = c.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=10)
    c.close()
    assert [tp.offset for tp in committed] == [500] * PARTITIONS
    copied = _read_all(kafka_bootstrap, out_topic, expect=2_000)
    assert sorted(int(v) for _, v in copied.values()) == list(range(2_000))


# --------------------------------------------------------------------------- writing

def test_write_to_kafka_delivers_every_value_once(kafka_bootstrap, topic_name):
    _create_topic(kafka_bootstrap, topic_name)
    n = 10_000
    bare = [b"%d" % i for i in range(n // 2)]                                         # bytes values, keyed by key_fn
    batches = [[(b"k%d" % i, b"%d" % i) for i in range(lo, lo + 100)] for lo in range(n // 2, n, 100)]  # lists of pairs

    p = beam.Pipeline(runner=FnApiRunner())
    _ = (p | "bare" >> beam.Create(bare)
         | "w1" >> WriteToKafka(kafka_bootstrap, topic_name, key_fn=lambda v: b"k" + v))
    _ = (p | "batches" >> beam.Create(batches)
         | "w2" >> WriteToKafka(kafka_bootstrap, topic_name))
    result = p.run()
    result.wait_until_finish()
    assert _counters(result)["messages_delivered"] == n

    got = _read_all(kafka_bootstrap, topic_name, expect=n)
    values = sorted(int(v) for _, v in got.values())
    assert values == list(range(n))  # all there, once
    assert all(k == b"k" + v for k, v in got.values())


def test_a_keyed_batch_is_queued_whole_in_order_and_partitioned_by_key(kafka_bootstrap, topic_name):
    """KafkaWriter.produce_values with keys (how the pipelines write their
    predictions), its local queue kept small so that the batch fills it
    and the waiting path takes over midway."""
    from pipelines.kafka.producer import KafkaWriter

    _create_topic(kafka_bootstrap, topic_name)
    n = 3_000
    keys = [b"k%d" % (i % 7) for i in range(n)]
    values = [b"%d" % i for i in range(n)]
    writer = KafkaWriter(kafka_bootstrap, topic_name, {"queue.buffering.max.messages": 200}, count_delivered=False)
    try:
        writer.produce_values(values, keys=keys)
        with pytest.raises(ValueError):
            writer.produce_values([b"a", b"b"], keys=[b"k0"])  # one key per value, or nothing is queued
        writer.flush(30)
    finally:
        writer.close()
    got = _read_all(kafka_bootstrap, topic_name, expect=n)
    by_key: dict = {}
    for (partition, offset), (key, value) in sorted(got.items()):
        by_key.setdefault(key, []).append((partition, int(value)))
    assert sorted(by_key) == sorted(set(keys))
    for key, written in by_key.items():
        assert len({partition for partition, _ in written}) == 1  # one key, one partition
        expected = [i for i in range(n) if keys[i] == key]
        assert [v for _, v in written] == expected  # each value once, in the order given


def test_delivered_counter_counts_acknowledgements_seen_before_the_bundle_ends(kafka_bootstrap, topic_name):
    """flush_each: every acknowledgement is reported inside process(), none
    is left for finish_bundle's flush; the counter must count them all
    (it counted only those reported by the last flush, 0 here, and fewer
    than written when Apache Kafka acknowledged during the bundle)."""
    _create_topic(kafka_bootstrap, topic_name)
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | beam.Create([b"%d" % i for i in range(50)]) | WriteToKafka(kafka_bootstrap, topic_name, flush_each=True)
    result = p.run()
    result.wait_until_finish()
    assert _counters(result)["messages_delivered"] == 50
    assert sorted(int(v) for _, v in _read_all(kafka_bootstrap, topic_name, expect=50).values()) == list(range(50))


def test_write_to_a_refusing_broker_raises(topic_name):
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(Exception, match=rf"(?s)Kafka delivery to topic '{topic_name}'.*timed out"):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = (p | beam.Create([b"a", b"b", b"c"])
                 | WriteToKafka(bootstrap, topic_name, producer_config={"message.timeout.ms": 1500}))
    assert time.monotonic() - t0 < 20


def test_write_to_an_invalid_topic_raises(kafka_bootstrap):
    bad = "not a valid topic!"
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"Kafka delivery to topic 'not a valid topic!'"):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = (p | beam.Create([b"a"] * 10)
                 | WriteToKafka(kafka_bootstrap, bad, producer_config={"message.timeout.ms": 2000}))
    assert time.monotonic() - t0 < 20


def test_reading_a_missing_topic_raises(kafka_bootstrap, topic_name, tmp_path):
    with pytest.raises(Exception, match="not available"):
        _run_read(tmp_path, kafka_bootstrap, topic_name + "-missing", resolve_timeout=5)


@pytest.mark.parametrize("linger,asked", [(0.0, True), (3.0, True), (3.0, False)])
def test_an_unbounded_read_lingers_at_the_end_after_a_batch_when_its_rule_asks(kafka_bootstrap, topic_name, linger,
                                                                               asked):
    """A rule's ``linger_seconds`` (sharded mode's feedback reader) keeps the
    call polling at the end of the partition after a batch, when its
    ``linger_after`` that batch says so: a message that comes meanwhile is
    emitted by the same call. Without it the call defers as soon as the
    partition is idle, and the message waits for the next."""
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
    from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker

    from pipelines.beam_io.partition_fn import PartitionSpec, UnboundedReadPartitionFn
    from pipelines.kafka.consumer import UNBOUNDED_STOP, StopRule

    class Lingering(StopRule):
        linger_seconds = linger

        def linger_after(self, batch):
            return self.linger_seconds if asked else 0.0

    class Finalizer:
        def register(self, cb):
            pass

    _create_topic(kafka_bootstrap, topic_name, partitions=1)
    _produce(kafka_bootstrap, topic_name, range(10), partitions=1)
    fn = UnboundedReadPartitionFn(kafka_bootstrap, None, None, max_batch=100, poll_timeout=0.2,
                                  checkpoint_seconds=30, unbounded=True)
    fn.setup()
    tracker = ThreadsafeRestrictionTracker(OffsetRestrictionTracker(OffsetRange(0, UNBOUNDED_STOP)))
    late = threading.Timer(0.5, _produce, (kafka_bootstrap, topic_name, [10], 1))
    got, started = [], time.monotonic()
    for k, out in enumerate(fn.process(PartitionSpec(topic_name, 0, 0, UNBOUNDED_STOP, Lingering()), Finalizer(),
                                       RestrictionTrackerView(tracker), ManualWatermarkEstimator(None))):
        got.extend(m.offset for m in out.value)
        if k == 0:
            late.start()  # once the first batch is out
    took = time.monotonic() - started
    late.join()
    fn.teardown()
    _residual, deferred = tracker.deferred_status()
    assert deferred is not None  # the call ended by deferring, idle, either way
    if linger and asked:
        assert got == list(range(11)) and took >= 0.5 + linger
    else:
        assert got == list(range(10)) and took < 0.5


def test_an_idle_partition_does_not_wait_while_another_partition_of_the_read_is_busy(kafka_bootstrap, topic_name):
    """The calls of one read instance run one after another: an idle
    partition's wait for its first message would hold back a busy one (in
    sharded mode, the feedback beside idle events). It waits only when every
    partition it reads beside is idle too, so an idle read does not spin."""
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
    from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker

    from pipelines.beam_io.partition_fn import PartitionSpec, UnboundedReadPartitionFn
    from pipelines.kafka.consumer import UNBOUNDED_STOP

    _create_topic(kafka_bootstrap, topic_name, partitions=2)
    _produce(kafka_bootstrap, topic_name, [0, 2, 4, 6], partitions=2)  # all on partition 0; 1 stays empty

    class Finalizer:
        def register(self, cb):
            pass

    poll_timeout = 2.0
    fn = UnboundedReadPartitionFn(kafka_bootstrap, None, None, max_batch=100, poll_timeout=poll_timeout,
                                  checkpoint_seconds=30, unbounded=True)
    fn.setup()
    waits = []
    idle = fn._reader(topic_name, 1, 0)
    real_poll = idle.poll
    idle.poll = lambda want, timeout: waits.append(timeout) or real_poll(want, timeout)

    def call(partition, start):
        tracker = ThreadsafeRestrictionTracker(OffsetRestrictionTracker(OffsetRange(start, UNBOUNDED_STOP)))
        spec = PartitionSpec(topic_name, partition, start, UNBOUNDED_STOP)
        out = list(fn.process(spec, Finalizer(), RestrictionTrackerView(tracker), ManualWatermarkEstimator(None)))
        return [m.offset for o in out for m in _batch(o)]

    assert call(1, 0) == [] and waits and waits[0] == poll_timeout  # alone and idle: it waits as before
    assert call(0, 0) == [0, 1, 2, 3]
    del waits[:]
    assert call(1, 0) == []
    assert waits and set(waits) == {0.0}  # partition 0 just emitted: partition 1 defers without waiting
    fn.teardown()

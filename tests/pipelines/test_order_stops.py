"""When a partition cannot be applied in offset order the run stops with one
line and exit status 4, and nothing it wrote before is lost or doubled:
more batches waiting for an earlier one than ``--max-waiting`` allows, and
offsets deleted by retention before the run read them."""

import subprocess
import sys

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from pipelines.cli.errors import EXIT_ORDER
from pipelines.cli.run import launch
from pipelines.kafka.consumer import read_topic
from pipelines.records.topics import produce_events
from schemas.codec import Codec
from tests.support.reorder import Harness
from tests.support.runs import config, toy_stream


def predictions(bootstrap, topic):
    codec = Codec()
    return [codec.decode(m.value) for m in read_topic(bootstrap, topic, idle_timeout=3.0)]


def test_more_waiting_than_the_bound_stops_the_run_naming_the_partition(tansu_bootstrap, topic_name, tmp_path,
                                                                         capsys):
    _, _, events = toy_stream(600)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, max_batch=10, max_waiting=50,
                 reorder=Harness(3, hold=0.5, spread=12))
    assert launch(cfg) == EXIT_ORDER
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("scinol: error: run: ")
    assert f"wait for {topic_name}[0] offsets " in err[0] and "--max-waiting 50" in err[0]
    written = [p["source_offset"] for p in predictions(tansu_bootstrap, cfg.predictions_topic)]
    assert written == list(range(len(written)))  # what was written: each once, a prefix in offset order


def test_offsets_deleted_before_a_restart_read_them_stop_it(apache_kafka_bootstrap, topic_name, tmp_path):
    bootstrap = apache_kafka_bootstrap
    _, _, events = toy_stream(600)
    produce_events(bootstrap, topic_name, events[:300], partitions=1, progress=False)
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic_name,
           "--predictions-topic", topic_name + ".pred", "--checkpoint-dir", str(tmp_path / "ckpt"), "--bounded"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stderr[-2000:]
    produce_events(bootstrap, topic_name, events[300:], progress=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: its futures die with it
    for future in admin.delete_records([TopicPartition(topic_name, 0, 450)]).values():
        future.result(timeout=30)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert again.returncode == EXIT_ORDER, again.stderr[-2000:]
    errors = [line for line in again.stderr.splitlines() if line.startswith("scinol: error:")]
    assert len(errors) == 1 and "Traceback" not in again.stderr
    assert f"{topic_name}[0]: the messages from offset 300 on were deleted" in errors[0]
    assert "now starts at offset 450" in errors[0]
    written = [p["event_id"] for p in predictions(bootstrap, topic_name + ".pred")]
    assert written == [e["id"] for e in events[:300]]  # the first run's, once each; nothing after the gap

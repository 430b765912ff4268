"""The command line as Kafka's own tools have taught their users:
``--bootstrap-server`` (``--bootstrap`` still works), ``scinol tail
--from-beginning | --from-end | --offset N | --follow`` with keys and
headers printable, and refusals in one line with exit status 2."""

import json
import threading
import time

import pytest
from confluent_kafka import Producer

from pipelines.cli.main import main
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.consumer import commit_offset, resolve_ranges
from schemas.codec import Codec

from tests.support.runs import toy_stream


def produce(bootstrap, topic, events, keys=None, headers=None):
    producer, codec = Producer({"bootstrap.servers": bootstrap}), Codec()
    for i, event in enumerate(events):
        producer.produce(topic, codec.encode("Event", event), keys[i] if keys else None,
                         headers=headers[i] if headers else None)
    producer.flush(10)


def tail_json(capsys, *args) -> list[dict]:
    assert main(["tail", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_tail_start_positions_keys_and_headers(kafka_bootstrap, topic_name, capsys):
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    _, _, events = toy_stream(6)
    keys = [b"k0", None, b"\xff\xfe", b"k3", b"k4", b"k5"]
    headers = [None, [("trace", b"abc")], [("bin", b"\xff"), ("none", None)], None, None, None]
    produce(kafka_bootstrap, topic_name, events, keys, headers)
    base = [topic_name, "--bootstrap-server", kafka_bootstrap, "--timeout", "2"]

    assert [r["id"] for r in tail_json(capsys, *base)] == [e["id"] for e in events]  # from the beginning
    assert [r["id"] for r in tail_json(capsys, *base, "--from-beginning", "--max", "2")] == ["default-0", "default-1"]
    assert [r["id"] for r in tail_json(capsys, *base, "--offset", "4")] == ["default-4", "default-5"]
    assert tail_json(capsys, *base, "--from-end") == []  # nothing new arrived

    framed = tail_json(capsys, *base, "--max", "3", "--print-key", "--print-headers")
    assert [(r["offset"], r["key"], r["headers"]) for r in framed] == [
        (0, "k0", []), (1, None, [["trace", "abc"]]), (2, "base64://4=", [["bin", "base64:/w=="], ["none", None]])]
    assert [r["value"]["id"] for r in framed] == ["default-0", "default-1", "default-2"]
    only_keys = tail_json(capsys, *base, "--max", "1", "--print-key")
    assert set(only_keys[0]) == {"partition", "offset", "timestamp", "key", "value"}


def test_tail_follow_prints_what_arrives_later(kafka_bootstrap, topic_name, capsys):
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    _, _, events = toy_stream(4)
    produce(kafka_bootstrap, topic_name, events[:2])
    later = threading.Timer(3.0, produce, (kafka_bootstrap, topic_name, events[2:]))
    later.start()
    started = time.monotonic()
    # --follow ignores --timeout: it waits past 1 s of silence for the records produced after 3 s
    records = tail_json(capsys, topic_name, "--bootstrap", kafka_bootstrap, "--follow", "--timeout", "1",
                        "--max", "4")
    later.join()
    assert [r["id"] for r in records] == [e["id"] for e in events] and time.monotonic() - started >= 3.0


def test_group_id_without_checkpoints_is_refused(capsys):
    assert main(["run", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p",
                 "--group-id", "g"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scinol: error: run: --group-id without --checkpoint-dir") and "\n" not in err


@pytest.mark.parametrize("args, message", [
    (["--max-dead-letter-ratio", "1.5"], "--max-dead-letter-ratio must be at least 0 and below 1"),
    (["--replication-factor", "0"], "--replication-factor must be at least 1"),
    (["--topic-config", "retention.ms"], "--topic-config: expected KEY=VALUE"),
    (["--schema-registry-config", "basic.auth.user.info=a:b"], "need --schema-registry URL"),
    (["--schema-registry", "http://h:1", "--schema-registry-config", "nope=1"], "Unrecognized properties: nope"),
    (["--schema-registry", "http://h:1", "--subject-name-strategy", "X"], "invalid choice: 'X'"),
])
def test_bad_kafka_and_registry_options_are_one_line(capsys, args, message):
    assert main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scinol: error:") and message in err and "\n" not in err


def test_checkpointed_runs_never_start_at_the_groups_committed_offsets(kafka_bootstrap, topic_name):
    """A checkpointed run reads from its checkpoints' offsets, else from the
    log start, whatever the group has committed: a model restored from an
    older checkpoint (or none) never skips what the group's last run read."""
    from confluent_kafka import Consumer

    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    produce(kafka_bootstrap, topic_name, toy_stream(10)[2])
    group = topic_name + "-group"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    commit_offset(consumer, topic_name, 0, 7)
    consumer.close()
    committed = resolve_ranges(kafka_bootstrap, topic_name, bounded=True, group_id=group)
    assert [(r.start, r.stop) for r in committed] == [(7, 10)]
    ignored = resolve_ranges(kafka_bootstrap, topic_name, bounded=True, group_id=group, use_committed=False)
    assert [(r.start, r.stop) for r in ignored] == [(0, 10)]


@pytest.mark.registry
@pytest.mark.slow
def test_scinol_registry_serves_confluents_api_with_basic_auth(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from schemas.registry import Registry, SchemaRegistryError

    secret = tmp_path / "password"
    secret.write_text("pw-registry-test\n")
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "registry", "--user", "me", "--password-file",
                             str(secret)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/apis/ccompat/v7"), proc.stderr.read()
        topic = "registry-command-test"
        sid = Codec(Registry(url, {"basic.auth.user.info": "me:pw-registry-test"})).schema_id("Event", topic)
        assert Registry(url, {"basic.auth.user.info": "me:pw-registry-test"}).schema_by_id(sid) is not None
        with pytest.raises(SchemaRegistryError) as info:
            Registry(url).schema_by_id(sid)
        assert info.value.status == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "registry stopped" in err and "pw-registry-test" not in err

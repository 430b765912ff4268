"""scinol produce and scinol tail against real brokers (tansu and Apache Kafka)."""

import csv
import io
import json

from confluent_kafka.admin import AdminClient

from pipelines.cli.main import main
from pipelines.cli.tail import tail


def test_produce_generated_events_then_tail_them(kafka_bootstrap, topic_name, capsys):
    assert main(["produce", "--generate", "toy", "--n", "500", "--seed", "3", "--topic", topic_name,
                 "--bootstrap", kafka_bootstrap, "--partitions", "2", "--quiet"]) == 0
    assert "produced 500 events" in capsys.readouterr().err
    meta = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert len(meta.topics[topic_name].partitions) == 2
    out = io.StringIO()
    assert tail(kafka_bootstrap, topic_name, max_records=500, timeout=5, out=out) == 500
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(f"toy-3-{i}" for i in range(500))
    assert all(len(r["features"]["values"]) == 21 and r["label"] in (-1.0, 1.0) for r in records)


def test_produce_a_csv_file_with_stable_ids_and_tail_as_csv(kafka_bootstrap, topic_name, tmp_path, capsys):
    data = tmp_path / "rows.csv"
    data.write_text("a,b,y\n1.5,0,1\n0,-2,0\n3,4,1\n")
    assert main(["produce", str(data), "--label", "y", "--topic", topic_name, "--bootstrap", kafka_bootstrap,
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["tail", topic_name, "--bootstrap", kafka_bootstrap, "--format", "csv", "--max", "3",
                 "--timeout", "5"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["id"] for r in rows] == ["rows.csv:2", "rows.csv:3", "rows.csv:4"]
    assert [json.loads(r["features"])["values"] for r in rows] == [[1.5, 0.0], [0.0, -2.0], [3.0, 4.0]]


def test_tail_of_a_missing_topic_is_a_one_line_error(kafka_bootstrap, capsys):
    assert main(["tail", "no-such-topic-xyz", "--bootstrap", kafka_bootstrap, "--timeout", "1"]) == 2
    assert capsys.readouterr().err.strip().startswith("scinol: error: topic 'no-such-topic-xyz' does not exist")


def test_produce_needs_exactly_one_source(kafka_bootstrap, capsys):
    assert main(["produce", "--topic", "t", "--bootstrap", kafka_bootstrap]) == 2
    assert "give a DATA file or --generate" in capsys.readouterr().err

"""scinol model inspect / export on a saved model."""

import json

import numpy as np
import pyarrow.parquet as pq

from learners import make_learner
from learners.datasets import toy_examples
from pipelines.cli.main import main


def saved_model(tmp_path):
    X, y = toy_examples(500, 0)
    model = make_learner("scinol2")
    model.learn(X, y)
    path = tmp_path / "m.scinol"
    model.save(str(path), extra={"model": "toy"})
    return model, str(path)


def test_inspect_prints_header_and_top_weights(tmp_path, capsys):
    model, path = saved_model(tmp_path)
    assert main(["model", "inspect", path, "--top", "3"]) == 0
    out = capsys.readouterr().out
    header = json.loads(out[: out.index("\n}\n") + 2])
    assert header["learner"] == "scinol2" and header["model"] == "toy" and header["loss"] == "logistic"
    assert "scinol2, 500 examples learned, 22 coordinates" in out
    w = model.weights()[:, 0]
    top = np.argsort(-np.abs(w))[:3]
    lines = out.strip().splitlines()[-3:]
    assert [line.split(":")[0].strip() for line in lines] == [("bias" if j == 0 else str(j - 1)) for j in top]
    assert [float(line.split(":")[1]) for line in lines] == [float(f"{w[j]:+.6g}") for j in top]


def test_export_json_csv_parquet_agree_with_the_weights(tmp_path, capsys):
    model, path = saved_model(tmp_path)
    w = model.weights()[:, 0]
    for fmt in ("json", "csv", "parquet"):
        assert main(["model", "export", path, "--format", fmt, "-o", str(tmp_path / f"w.{fmt}")]) == 0
    assert np.array_equal(np.array(json.load(open(tmp_path / "w.json"))["weights"])[:, 0], w)
    rows = [line.split(",") for line in (tmp_path / "w.csv").read_text().splitlines()[1:]]
    assert [r[0] for r in rows][:2] == ["bias", "0"] and np.array_equal([float(r[2]) for r in rows], w)
    table = pq.read_table(tmp_path / "w.parquet")
    assert np.array_equal(table.column("weight").to_numpy(), w)


def test_inspect_of_a_non_model_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "x.scinol"
    bad.write_text("not a model")
    assert main(["model", "inspect", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("scinol: error:")

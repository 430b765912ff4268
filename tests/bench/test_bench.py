"""`scinol bench accuracy --quick` through the real CLI, asserting on what it
writes: the markdown tables, the numbers in them, the PNGs. Works with or
without the optional competitors (VW, River): without them the output must
say so and leave their rows out, which the second test forces."""

import math
import re
import sys

import numpy as np

from pipelines.bench.metrics import LOSS_CAP, binary_score_losses, capped, proba_losses, softmax_score_losses
from pipelines.bench.optional import have
from pipelines.bench.report import update_section
from pipelines.cli.main import main
from tests.support.png import assert_png

OURS = ["ScInOL2", "ScInOL1", "Alg1-K17 (kotlowski1)", "SGD (best lr)", "AdaGrad (best lr)", "Adam (best lr)",
        "NAG (best lr)"]
VW = ["VW default", "VW --coin", "VW best -l"]
RIVER = ["River LogReg default", "River StandardScaler+LogReg", "River LogReg best optimizer"]
PM = re.compile(r"^\**([-\d.e+]+|inf|nan) ± ([-\d.e+]+|inf|nan)\**$")


def table_after(md: str, heading: str) -> list[list[str]]:
    """The rows (cells) of the first markdown table after ``heading``."""
    rest = md[md.index(heading):].splitlines()
    start = next(i for i, line in enumerate(rest) if line.startswith("|"))
    rows = []
    for line in rest[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def mean_of(cell: str) -> float:
    m = PM.match(cell)
    assert m, f"not 'mean ± std': {cell!r}"
    mean, std = float(m.group(1)), float(m.group(2))
    assert math.isfinite(mean) and math.isfinite(std) and std >= 0, cell
    return mean


def run_quick(tmp_path, capsys, *extra):
    status = main(["bench", "accuracy", "--quick", "--out", str(tmp_path), *extra])
    out = capsys.readouterr()
    assert status == 0, out.err
    return (tmp_path / "benchmarks.md").read_text(), out.out + out.err


def test_quick_accuracy_writes_tables_and_figures(tmp_path, capsys):
    md, output = run_quick(tmp_path, capsys)

    toy = {(r[0], r[1]): r for r in table_after(md, "Kempka et al. 2019 §4.1, Figure 1")}
    assert {m for m, _ in toy} == {"ScInOL1", "ScInOL2", "SGD", "AdaGrad", "Adam", "NAG"}
    assert len(toy) == 2 + 4 * 2  # quick grid: two learning rates per tuned method
    finals = {k: mean_of(r[2]) for k, r in toy.items()}
    for k, r in toy.items():
        mean_of(r[3])  # progressive loss: finite
    optimal = float(re.search(r"optimal model u: ([\d.]+)", md).group(1))
    assert 0.2 < optimal < finals[("ScInOL2", "-")] < math.log(2), finals  # ScInOL2 beats the zero model
    assert finals[("ScInOL2", "-")] < finals[("ScInOL1", "-")]
    assert max(finals[("SGD", lr)] for lr in ("0.01", "1")) > math.log(2)  # as in the paper's Figure 1

    vw, river = have("vowpalwabbit"), have("river")
    expected = OURS + (VW if vw else []) + (RIVER if river else [])
    for name in ("breast-cancer", "wine"):
        rows = table_after(md, f"### {name}")
        assert [r[0] for r in rows] == expected
        for r in rows:
            progressive, loss, acc = mean_of(r[3]), mean_of(r[4]), mean_of(r[5])
            assert 0 <= progressive <= LOSS_CAP and 0 <= loss <= LOSS_CAP and 0 <= acc <= 1, r
            assert (r[2] != "-") == ("best" in r[0]), r  # tuned rows name the learning rate they chose
        scinol2 = next(r for r in rows if r[0] == "ScInOL2")
        assert mean_of(scinol2[4]) < math.log(2 if name == "breast-cancer" else 3)
        assert "ScInOL2 ranks" in md[md.index(f"### {name}"):]
    for package, shown in (("vowpalwabbit", vw), ("river", river)):
        assert (f"{package} not installed" in output) == (not shown)

    for png in ("bench_toy.png", "bench_datasets_loss.png", "bench_datasets_accuracy.png"):
        assert_png(tmp_path / png)
        assert f"]({png})" in md
    assert "Quick mode" in md and "Tuning is on the test set" in md


def test_missing_vw_and_river_are_said_and_skipped(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vowpalwabbit", None)  # import vowpalwabbit → ImportError
    monkeypatch.setitem(sys.modules, "river", None)
    md, output = run_quick(tmp_path, capsys, "--no-toy", "--datasets", "breast-cancer")
    assert "vowpalwabbit not installed" in output and "river not installed" in output
    assert "vowpalwabbit not installed" in md and "river not installed" in md
    assert [r[0] for r in table_after(md, "### breast-cancer")] == OURS
    assert "Kempka et al. 2019 §4.1" not in md  # --no-toy: no toy section
    assert_png(tmp_path / "bench_datasets_loss.png")


def test_bad_options_end_in_one_line(tmp_path, capsys):
    assert main(["bench", "accuracy", "--runs", "0", "--out", str(tmp_path)]) == 2
    assert main(["bench", "accuracy", "--quick", "--no-toy", "--datasets", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("scinol: error: bench accuracy: --runs must be at least 1")
    assert err[-1].startswith("scinol: error: bench accuracy: unknown data set 'nope'")


def test_sections_replace_only_themselves(tmp_path):
    path = str(tmp_path / "b.md")
    update_section(path, "throughput", "## Throughput\nold")
    update_section(path, "toy", "## Toy\nfirst")
    with open(path, "a") as f:
        f.write("\nhand-written notes\n")
    update_section(path, "throughput", "## Throughput\nnew")
    text = open(path).read()
    assert text.index("## Toy") < text.index("## Throughput")  # fixed order: toy first
    assert "new" in text and "old" not in text and "hand-written notes" in text and text.count("## Toy") == 1


def test_losses_match_their_definitions():
    scores, labels = np.array([2.0, -1.0, 0.0]), np.array([1, 1, 0])
    np.testing.assert_allclose(binary_score_losses(scores, labels),
                               [math.log1p(math.exp(-2)), math.log1p(math.e), math.log(2)])
    S = np.array([[1.0, 2.0, 3.0], [1000.0, 0.0, -1000.0]])
    p = np.exp(S[0]) / np.exp(S[0]).sum()
    np.testing.assert_allclose(softmax_score_losses(S, np.array([0, 0])), [-math.log(p[0]), 0.0], atol=1e-12)
    np.testing.assert_allclose(proba_losses(np.array([1.0, 0.0, np.nan])), [0.0, LOSS_CAP, LOSS_CAP])
    assert capped(np.array([1e9, np.nan]))[0] == LOSS_CAP


def test_one_pass_quick_table_holds_every_set_and_contender_and_its_ratios(tmp_path, capsys):
    """`--one-pass --quick`: every data set and contender is in the tables, and
    the ratios and verdicts printed agree with the losses printed beside them."""
    from pipelines.bench.contenders import UNTUNED_COMPETITORS
    from pipelines.bench.one_pass import DETAIL_HEADER, VERDICT_HEADER

    md, output = run_quick(tmp_path, capsys, "--one-pass")
    assert "scinol-mix" in output  # named in the list: run if registered, noted if not
    vw, river = have("vowpalwabbit"), have("river")
    rivals = [c for c in UNTUNED_COMPETITORS if (vw or "VW" not in c) and (river or "River" not in c)]
    assert len(rivals) == 2 * vw + 2 * river
    verdict = table_after(md, "One pass, untuned")
    assert len(verdict[0]) == len(VERDICT_HEADER)
    assert {r[0] for r in verdict} == {"breast-cancer", "wine"} and "ScInOL2" in {r[2] for r in verdict}
    for name in ("breast-cancer", "wine"):
        rows = {r[0]: r for r in table_after(md, f"### {name} (one pass)")}
        assert len(next(iter(rows.values()))) == len(DETAIL_HEADER)
        tuned = [label for label in rows if label.startswith("† test-tuned best: ")]
        assert {*rivals, "ScInOL2", "zero model"} <= set(rows) and len(tuned) == 1
        prog = {label: mean_of(r[1]) for label, r in rows.items()}
        for r in rows.values():
            assert 0 <= mean_of(r[2]) <= 1 and 0 <= mean_of(r[4]) <= 1 and 0 <= mean_of(r[3]) <= LOSS_CAP, r
        k = 2 if name == "breast-cancer" else 3
        assert math.isclose(prog["zero model"], math.log(k), abs_tol=1e-4)
        for v in (v for v in verdict if v[0] == name):
            mine = prog[v[2]]
            assert math.isclose(float(v[3]), mine, abs_tol=1e-4)
            assert math.isclose(float(v[6]), math.log(k), abs_tol=1e-4)
            assert math.isclose(float(v[7]), mine / prog["zero model"], abs_tol=2e-3)
            ok = float(v[7]) <= 1.01
            if rivals:
                best = min(rivals, key=prog.get)
                assert v[4].startswith(best) and math.isclose(float(v[5]), mine / prog[best], abs_tol=2e-3)
                ok = ok and float(v[5]) <= 1.02
            if k > 2 and vw:
                assert math.isclose(float(v[9].rstrip("%")), 100 * mean_of(rows["VW default"][2]), abs_tol=0.06)
                ok = ok and float(v[8].rstrip("%")) <= float(v[9].rstrip("%"))
            assert (v[10] == "pass") == ok, v
    assert_png(tmp_path / "bench_one_pass.png")
    assert "](bench_one_pass.png)" in md and "Quick mode" in md and "test-tuned best" in md


def test_one_pass_rejects_options_of_the_multi_pass_run(tmp_path, capsys):
    assert main(["bench", "accuracy", "--one-pass", "--epochs", "2", "--out", str(tmp_path)]) == 2
    assert main(["bench", "accuracy", "--learners", "scinol2", "--quick", "--out", str(tmp_path)]) == 2
    assert main(["bench", "accuracy", "--one-pass", "--learners", "scinol2:bogus=1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "scinol: error: bench accuracy: --epochs does not apply to --one-pass"
    assert err[1] == "scinol: error: bench accuracy: --learners needs --one-pass"
    assert err[2].startswith("scinol: error: bench accuracy: --learners scinol2:bogus=1: scinol2 has no parameter")
    assert len(err) == 3


def test_one_pass_without_vw_and_river_checks_the_zero_model_only(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vowpalwabbit", None)
    monkeypatch.setitem(sys.modules, "river", None)
    md, output = run_quick(tmp_path, capsys, "--one-pass", "--datasets", "wine",
                           "--learners", "scinol2,scinol2:eps=4,kotlowski2,nope")
    assert "vowpalwabbit not installed" in md and "nope: not in this build's learner registry" in md
    assert "kotlowski2 left out: kotlowski2 has one output" in md  # binary only; wine has 3 classes
    rows = {r[0]: r for r in table_after(md, "### wine (one pass)")}
    assert set(rows) == {"ScInOL2", "scinol2:eps=4", "zero model"} | {k for k in rows if k.startswith("† test-tuned")}
    assert rows["ScInOL2"][1] != rows["scinol2:eps=4"][1]  # the parameter reached the learner
    verdict = table_after(md, "One pass, untuned")
    assert [v[2] for v in verdict] == ["ScInOL2", "scinol2:eps=4"]
    for v in verdict:
        assert v[4] == v[5] == v[9] == "n/a"
        assert (v[10] == "pass") == (float(v[7]) <= 1.01)

"""pipelines.bench.mixture on tiny sizes: both tables come out, each figure
beside its same-run baseline, and the mixture's progressive loss respects
its ln N bound against ScInOL2 and the zero model on a bundled set."""

import math

from pipelines.bench import mixture


def test_tables_with_same_run_baselines_and_the_bound(capsys):
    assert mixture.main(["--rows", "3000", "--sparse-rows", "500", "--repeats", "1", "--runs", "2",
                         "--datasets", "iris"]) == 0
    out = capsys.readouterr().out
    kernel_rows = [line.split("|") for line in out.splitlines() if line.startswith("| dense") or
                   line.startswith("| sparse")]
    assert {r[3].strip() for r in kernel_rows} == {"scinol2", "scinol-mix", "scinol-mix all 7",
                                                  "scinol-mix without wide", "scinol-mix ScInOL2+zero"}
    assert all(float(r[5]) > 0 for r in kernel_rows)
    iris = next(line for line in out.splitlines() if line.startswith("| iris"))
    cells = [c.strip() for c in iris.split("|")[3:-1]]
    scinol2, mix, zero = (float(cells[i].split(" / ")[0]) for i in (0, 1, -1))
    assert zero == round(math.log(3), 4)
    t = 100  # iris training rows (2/3 of 150)
    assert mix <= min(scinol2, zero) + math.log(4) / t + 1e-4


def test_held_out_accuracy_after_several_passes(capsys):
    assert mixture.main(["--skip-cost", "--passes", "2", "--runs", "1", "--datasets", "iris"]) == 0
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| iris")]
    assert [r[1] for r in rows] == ["scinol2", "scinol-mix", "scinol-mix:average=1"]
    assert all(0.0 <= float(r[2]) <= 1.0 and 0.0 < float(r[3]) for r in rows)
    assert float(rows[1][2]) > 1 / 3  # better than guessing one of three classes

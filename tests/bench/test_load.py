"""The load benchmark's command line on the embedded broker with tiny sizes:
every part prints its table with the expected rows and positive rates (the
timings themselves are the benchmark, not a test)."""

import pytest

from pipelines.bench.load import main


def _rows(text: str, header_start: str) -> list[list[str]]:
    """The data rows of the markdown table whose header starts with ``header_start``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"| {header_start}"))
    rows = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("*") for cell in line.strip("|").split("|")])
    return rows


def _number(cell: str) -> float:
    return float(cell.split()[0].replace(",", "").rstrip("x%"))


def test_all_three_parts_print_their_tables_with_positive_rates(capsys, tmp_path):
    assert main(["--rows", "300", "--repeats", "1", "--rate", "400", "--seconds", "2", "--minutes", "0.1",
                 "--sample", "1", "--max-events", "3000", "--write", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    produce = _rows(out, "broker")
    assert [(r[0], r[1]) for r in produce] == [("tansu (embedded)", "toy CSV (21 dense)"),
                                               ("tansu (embedded)", "toy VW text (21 named)"),
                                               ("tansu (embedded)", "sparse libsvm (50 of 2^20)")]
    assert all(_number(r[k]) > 0 for r in produce for k in (3, 4, 5))  # rates and the ratio
    assert all(r[8] == "—" or _number(r[8]) > 0 for r in produce)  # "—": within the start-up's noise
    latency = _rows(out, "offered")
    assert len(latency) == 1 and latency[0][2] == "800"  # 400 events/s for 2 s
    assert 0 <= _number(latency[0][4]) <= _number(latency[0][5]) <= _number(latency[0][6])
    memory = _rows(out, "measured maximum")
    assert len(memory) == 1 and _number(memory[0][0]) > 0 and _number(memory[0][3]) > 0
    assert _number(memory[0][5]) > 0 and _number(memory[0][6]) > 0  # RSS in MiB
    most, last = (int(v.replace(",", "")) for v in memory[0][10].split(" / "))  # lag, from end offsets
    assert 0 <= last <= most
    written = (tmp_path / "benchmarks.md").read_text()
    assert "<!-- scinol bench: load start -->" in written and "### Latency at a fixed offered load" in written


@pytest.mark.parametrize("args", [["--rows", "0"], ["--repeats", "0"], ["--rate", "0"], ["--minutes", "-1"]])
def test_bad_counts_are_one_usage_line_and_exit_2(args, capsys):
    assert main(args) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

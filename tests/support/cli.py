"""Running ``scinol`` commands in-process in tests, and reading what they write."""

import numpy as np

from pipelines.cli.main import main


def run(capsys, *args):
    """main(args) in-process -> (exit status, stderr lines)."""
    capsys.readouterr()  # drop anything earlier
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert out == "", "scinol writes nothing to stdout"
    return rc, err.splitlines()


def ok(capsys, *args):
    """Run a command that must succeed; returns its stderr lines."""
    rc, err = run(capsys, *args)
    assert rc == 0, "\n".join(err)
    assert not any(line.startswith("scinol: error:") for line in err)
    return err


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def read_predictions(path):
    """Predictions file -> float array (n,) or (n, K); checks every value is
    written at full precision (%.17g, so it round-trips to the same double)."""
    rows = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            values = [float(v) for v in fields]
            assert fields == [f"{v:.17g}" for v in values], f"not full precision: {line!r}"
            rows.append(values)
    arr = np.array(rows, dtype=np.float64)
    return arr[:, 0] if arr.shape[1] == 1 else arr


def assert_one_error_line(err, expected):
    """Exactly one `scinol: error:` line, the last one on stderr, naming the problem."""
    errors = [line for line in err if line.startswith("scinol: error:")]
    assert len(errors) == 1, err
    assert err[-1] == errors[0], "the error line ends the output"
    assert not any("Traceback" in line for line in err)
    for part in expected:
        assert part in errors[0], (part, errors[0])
    return errors[0]

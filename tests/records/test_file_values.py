"""file_values: data file rows encoded a batch per compiled call are the
Event records file_events gives, framed byte for byte as the codec frames
them (the path ``scinol produce FILE`` takes)."""

import os

import numpy as np
import pytest

from pipelines.records.columnar import file_values
from pipelines.records.datafiles import open_reader
from pipelines.records.events import file_events
from schemas.codec import Codec

FILES = {
    "rows.libsvm": ("1 1:2 3:1.5 7:-2\n-1:0 2:1\n1:0.5\n0 5:1e300 9:-0.0\n-1:1 1:1\n-1:2.5 4:3\n", {}),
    "rows.csv": ("y,a,b,w\n1,0,2,0.5\n-1,-0.0,3,0\n1,1,1,1\n0,1e-300,-7,2\n", {"label": "y", "weight": "w"}),
    "plain.csv": ("a,b,c\n1,2,0\n0,0,0\n3.25,-1,1\n", {"label": "c"}),
}


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("model", ["default", "mödel-ünïcode"])
def test_values_are_the_codecs_frames_of_file_events(tmp_path, name, model):
    text, options = FILES[name]
    path = os.path.join(tmp_path, name)
    with open(path, "w") as f:
        f.write(text)
    codec = Codec()
    fast = list(file_values(open_reader(path, None, **options), model, codec, None))
    slow = list(file_events(open_reader(path, None, **options), model))
    assert len(fast) == len(slow) == text.count("\n") - name.endswith(".csv")
    for value, event in zip(fast, slow):
        got = codec.decode(value)
        assert abs(got.pop("timestamp") - event.pop("timestamp")) < 60_000
        assert got == {**event, "features": got["features"]} and _same(got["features"], event["features"])
        assert codec.encode("scinol.Event", codec.decode(value)) == value  # byte for byte the codec's framing


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) and
                                        np.array_equal(np.signbit(np.asarray(a[k], float)),
                                                       np.signbit(np.asarray(b[k], float))) for k in a)


def test_many_batches_keep_order_and_line_ids(tmp_path):
    path = os.path.join(tmp_path, "many.libsvm")
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for i in range(30_000):
            f.write(f"{rng.choice([-1, 1])} {i % 97 + 1}:{rng.normal():.6g}\n")
    codec = Codec()
    ids = [codec.decode(v)["id"] for v in file_values(open_reader(path, None), "default", codec, None)]
    assert ids == [f"many.libsvm:{line}" for line in range(1, 30_001)]

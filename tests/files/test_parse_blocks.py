"""Blocks parsed on several threads come back in file order, with each
block's first line number right, and a block's error after what came before."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipelines.files import blocks


def _lines_of(block: np.ndarray, first: int) -> list[tuple[int, str]]:
    text = bytes(block).decode()
    return [(first + k, line) for k, line in enumerate(text.splitlines())]


@pytest.mark.parametrize("seed", range(6))
def test_count_lines_counts_line_breaks_as_python_does(seed):
    rng = random.Random(seed)
    text = "".join(rng.choice(["a", "bb", " ", ""]) + rng.choice(["\n", "\r\n", "\r"]) for _ in range(500))
    assert blocks.count_lines(np.frombuffer(text.encode(), dtype=np.uint8)) == len(text.splitlines())
    for _ in range(200):  # any slice: a lone CR or LF at either end, no break at the end, empty
        a, b = sorted(rng.sample(range(len(text) + 1), 2))
        piece = text[a:b]
        unended = piece != "" and not piece.endswith(("\n", "\r"))  # a last line without a break
        assert blocks.count_lines(np.frombuffer(piece.encode(), dtype=np.uint8)) == len(piece.splitlines()) - unended


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_blocks_come_back_in_order_with_their_first_line_numbers(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 50)
    rng = random.Random(threads)
    lines = [f"row {i} " + "x" * rng.randint(0, 30) for i in range(1, 400)]
    path = tmp_path / "t.txt"
    path.write_bytes("".join(line + rng.choice(["\n", "\r\n", "\r"]) for line in lines).encode())
    got = list(blocks.parse_blocks(str(path), _lines_of, threads=threads))
    assert got == list(enumerate(lines, 1))
    assert all(text.startswith(f"row {n} ") for n, text in got)


def test_a_blocks_error_comes_after_everything_before_it(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 20)
    path = tmp_path / "t.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 200)))

    def parse(block, first):
        if first > 100:
            raise ValueError(f"bad block at line {first}")
        return _lines_of(block, first)

    seen = []
    with pytest.raises(ValueError, match="bad block at line") as caught:
        for item in blocks.parse_blocks(str(path), parse, threads=2):
            seen.append(item)
    first_bad = int(str(caught.value).rsplit(" ", 1)[1])
    assert first_bad > 100
    assert [n for n, _ in seen] == list(range(1, first_bad))  # every line before the bad block, none of it


@pytest.mark.parametrize("seed", range(8))
def test_byte_blocks_are_the_file_cut_at_line_breaks(tmp_path, seed, monkeypatch):
    """Any block size, lines longer than a block, CR LF across a read's end,
    a byte order mark, no break at the end, gzip: the blocks joined are the
    file (without the mark, with a final break), each ends at a break that
    is not the CR of a CR LF, and none can be written to."""
    import gzip

    rng = random.Random(seed)
    text = "".join("y" * rng.choice([0, 1, 5, 40]) + rng.choice(["\n", "\r\n", "\r"]) for _ in range(300))
    if seed % 3 == 0:
        text += "last line without a break"
    data = ("\ufeff" if seed % 2 else "").encode() + text.encode()
    path = tmp_path / ("t.txt.gz" if seed % 4 == 1 else "t.txt")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    monkeypatch.setattr(blocks, "FIRST_BLOCK_BYTES", rng.choice([1, 5, 64, 1 << 16]))  # growing blocks
    got = list(blocks.byte_blocks(str(path), size=rng.choice([1, 2, 7, 64, 1000])))
    joined = b"".join(bytes(b) for b in got)
    assert joined == text.encode() + (b"\n" if seed % 3 == 0 else b"")
    assert all(bytes(b).endswith((b"\n", b"\r")) for b in got)
    assert not any(bytes(a).endswith(b"\r") and bytes(b).startswith(b"\n") for a, b in zip(got, got[1:]))
    assert not any(b.flags.writeable for b in got)


def test_the_first_blocks_are_small_and_grow_to_the_block_size(tmp_path, monkeypatch):
    """A reader's first rows come after a small block is parsed, not a whole
    block; the blocks double from there up to the block size."""
    monkeypatch.setattr(blocks, "FIRST_BLOCK_BYTES", 1000)
    path = tmp_path / "t.txt"
    path.write_bytes(b"".join(b"%099d\n" % k for k in range(2000)))  # 100-byte lines
    sizes = [b.shape[0] for b in blocks.byte_blocks(str(path), size=16_000)]
    assert sum(sizes) == 200_000
    assert sizes[:5] == [1000, 2000, 4000, 8000, 16_000]  # the carried partial lines fit the doubling exactly here
    assert set(sizes[4:-1]) == {16_000}

"""Blocks parsed on several threads come back in file order, with each
block's first line number right, and a block's error after what came before."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipelines.records import blocks


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
    with pytest.raises(ValueError, match="bad block at line 1"):
        for item in blocks.parse_blocks(str(path), parse, threads=2):
            seen.append(item)
    assert [n for n, _ in seen] == list(range(1, len(seen) + 1))
    assert 95 <= len(seen) <= 100

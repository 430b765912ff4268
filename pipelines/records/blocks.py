"""A text file as blocks of whole lines, for the compiled parsers.

Blocks are uint8 arrays of about ``size`` bytes that end at a line break, so
a parser never sees half a line; the last block gets a final ``\\n`` if the
file lacks one. A UTF-8 byte order mark at the start (as Excel writes it) is
dropped, as the text readers do with ``utf-8-sig``. Lines end at ``\\n``,
``\\r\\n`` or a lone ``\\r`` (Python's universal newlines); :func:`line_end`
finds them the same way the parsers do.
"""

from __future__ import annotations

import gzip
from typing import Iterator

import numpy as np
from numba import njit

BLOCK_BYTES = 1 << 22
_BOM = b"\xef\xbb\xbf"


def open_binary(path: str):
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


def byte_blocks(path: str, size: int | None = None) -> Iterator[np.ndarray]:
    """Blocks of whole lines (about ``size`` bytes, default BLOCK_BYTES); I/O
    and gzip errors surface as they happen."""
    size = size or BLOCK_BYTES
    with open_binary(path) as f:
        carry = f.read(size)
        if carry.startswith(_BOM):
            carry = carry[len(_BOM):]
        while True:
            chunk = f.read(size)
            if not chunk:
                break
            data = carry + chunk
            cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
            if cut == 0:  # one line longer than the block: read on
                carry = data
                continue
            carry = data[cut:]
            yield np.frombuffer(data[:cut], dtype=np.uint8)
        if carry:
            if not carry.endswith((b"\n", b"\r")):
                carry += b"\n"
            yield np.frombuffer(carry, dtype=np.uint8)


@njit(cache=True)
def line_end(buf, pos):
    """(end of the line's text, start of the next line) for the line at pos."""
    n = buf.shape[0]
    i = pos
    while i < n and buf[i] != 10 and buf[i] != 13:
        i += 1
    if i < n and buf[i] == 13 and i + 1 < n and buf[i + 1] == 10:
        return i, i + 2
    return i, min(i + 1, n)

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
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

import numpy as np

from learners.jit import njit

BLOCK_BYTES = 1 << 22
FIRST_BLOCK_BYTES = 1 << 16
"""The first block's size; each next one doubles, up to BLOCK_BYTES. A
consumer waits for the whole first block to be parsed before it gets a row
(a 4 MB block: about 40 ms of a learner's start); growing blocks start it
at once and still read most of a file in large ones."""
PARSE_THREADS = min(2, os.cpu_count() or 1)
T = TypeVar("T")
_BOM = b"\xef\xbb\xbf"


def open_binary(path: str):
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


def byte_blocks(path: str, size: int | None = None) -> Iterator[np.ndarray]:
    """Blocks of whole lines (about ``size`` bytes, default BLOCK_BYTES, the
    first ones smaller: FIRST_BLOCK_BYTES), read-only; I/O and gzip errors
    surface as they happen."""
    limit = size or BLOCK_BYTES
    size = min(limit, FIRST_BLOCK_BYTES)
    with open_binary(path) as f:
        carry = f.read(len(_BOM))
        if carry == _BOM:
            carry = b""
        while True:
            # Read into a fresh buffer behind the last block's partial line and hand out a view up to
            # the last line break: one copy of each byte (the read), where joining and slicing bytes made three.
            buf = bytearray(len(carry) + size)
            buf[:len(carry)] = carry
            end = len(carry) + f.readinto(memoryview(buf)[len(carry):])
            if end == len(carry):
                break
            cut = max(buf.rfind(b"\n", 0, end), buf.rfind(b"\r", 0, end - 1)) + 1  # a CR at the end may precede LF
            if cut == 0:  # one line longer than the block: read on
                carry = bytes(buf[:end])
                continue
            yield _read_only(np.frombuffer(buf, np.uint8, count=cut))
            carry = bytes(buf[cut:end])
            size = min(2 * size, limit)
        if carry:
            if not carry.endswith((b"\n", b"\r")):
                carry += b"\n"
            yield np.frombuffer(carry, dtype=np.uint8)


def _read_only(block: np.ndarray) -> np.ndarray:
    """As the blocks over bytes are: the compiled parsers' exports are typed
    for read-only blocks (:func:`learners.jit.args_key`)."""
    block.flags.writeable = False
    return block


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


ONES = np.uint64(0x0101010101010101)
HIGHS = np.uint64(0x8080808080808080)
LF8, CR8, QUOTE8 = ONES * np.uint64(10), ONES * np.uint64(13), ONES * np.uint64(34)
"""A byte repeated in each of a word's eight, for :func:`has_byte` and :func:`count_byte`."""


@njit(cache=True, inline="always")
def has_byte(word, pattern):
    """Whether any byte of the uint64 word equals pattern's (the classic
    test for a zero byte in word ^ pattern; never a false alarm)."""
    x = word ^ pattern
    return ((x - ONES) & ~x & HIGHS) != np.uint64(0)


@njit(cache=True, inline="always")
def count_byte(word, pattern):
    """How many bytes of the uint64 word equal pattern's."""
    x = word ^ pattern
    low7 = ~HIGHS
    zero = ~(((x & low7) + low7) | x | low7)  # the high bit of each zero byte of x, exactly
    return np.int64(((zero >> np.uint64(7)) * ONES) >> np.uint64(56))


@njit(cache=True, nogil=True)
def count_lines(buf):
    """Line breaks in buf, as :func:`line_end` finds them (``\\r\\n`` is one).
    Eight bytes at a time: a word without CR holds only LF breaks; a word
    with one is counted a byte at a time (it may end a CR LF pair)."""
    n = buf.shape[0]
    if n == 0:
        return 0
    n_words = (n - 1) // 8  # whole words before the last byte, whose break is counted apart
    words = buf[:8 * n_words].view(np.uint64)
    count = 0
    for w in range(n_words):
        if has_byte(words[w], CR8):
            count += _count_breaks(buf, 8 * w, 8 * w + 8)
        else:
            count += count_byte(words[w], LF8)
    return count + _count_breaks(buf, 8 * n_words, n - 1) + ((buf[n - 1] == 10) | (buf[n - 1] == 13))


@njit(cache=True, inline="always")
def _count_breaks(buf, start, end):
    """Breaks starting at buf[start:end] (end < len(buf): a CR looks at the next byte)."""
    count = 0
    for i in range(start, end):  # branch-free: 2.4x faster than an if per byte
        c = buf[i]
        count += (c == 10) | ((c == 13) & (buf[i + 1] != 10))
    return count


def parse_blocks(path: str, parse_block: Callable[[np.ndarray, int], Iterable[T]],
                 threads: int | None = None) -> Iterator[T]:
    """What ``parse_block(block, number of its first line)`` returns for each
    block of the file, in file order, with blocks parsed on ``threads`` threads
    at once (the compiled parsers release the GIL). A block's error is raised
    after everything before it was yielded. Blocks end at line breaks, so each
    block's first line number is known before the blocks before it are parsed."""
    threads = threads or PARSE_THREADS
    with ThreadPoolExecutor(threads, thread_name_prefix="scinol-parse") as pool:
        running: deque = deque()
        line = 1
        try:
            for block in byte_blocks(path):
                running.append(pool.submit(lambda b, first: list(parse_block(b, first)), block, line))
                line += count_lines(block)
                if len(running) > threads:
                    yield from running.popleft().result()
            while running:
                yield from running.popleft().result()
        finally:
            for future in running:
                future.cancel()

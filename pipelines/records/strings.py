"""A column of UTF-8 strings as one byte buffer and each row's (start, end):
event ids carried through a batch's steps with no Python object per row
until one is read (a warning, a test), and written back to Avro without
decoding them. Pickled (between Beam steps, in state) it holds only its
own rows' bytes."""

from __future__ import annotations

from typing import Iterable

import numpy as np


class Strings:
    """Row i is ``buf[starts[i]:ends[i]]`` decoded; compares equal to a
    list (or Strings) of the same strings."""

    __slots__ = ("buf", "starts", "ends")

    def __init__(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        self.buf, self.starts, self.ends = buf, starts, ends

    @classmethod
    def of(cls, texts: Iterable[str]) -> "Strings":
        raw = [text.encode() for text in texts]
        lengths = np.fromiter(map(len, raw), np.int64, len(raw))
        ends = np.cumsum(lengths)
        return cls(np.frombuffer(b"".join(raw), np.uint8), ends - lengths, ends)

    @classmethod
    def concat(cls, parts: list["Strings"]) -> "Strings":
        if len(parts) == 1:
            return parts[0]
        bufs, lengths = zip(*(part.joined() for part in parts))
        ends = np.cumsum(np.concatenate(lengths))
        return cls(np.concatenate(bufs), ends - np.concatenate(lengths), ends)

    def __len__(self) -> int:
        return self.starts.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Strings(self.buf, self.starts[i], self.ends[i])
        return self.buf[self.starts[i]:self.ends[i]].tobytes().decode()

    def take(self, rows: np.ndarray) -> "Strings":
        return Strings(self.buf, self.starts[rows], self.ends[rows])

    def encoded(self) -> list[bytes]:
        """Each row's UTF-8 bytes (what a Kafka key or an Avro string holds)."""
        buf, lengths = self.joined()
        raw, ends = buf.tobytes(), np.cumsum(lengths).tolist()
        return [raw[a:b] for a, b in zip([0] + ends[:-1], ends)]

    def tolist(self) -> list[str]:
        return [value.decode() for value in self.encoded()]

    def __iter__(self):
        return iter(self.tolist())

    def __eq__(self, other) -> bool:
        if isinstance(other, Strings):
            other = other.tolist()
        return isinstance(other, (list, tuple)) and self.tolist() == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Strings({self.tolist()!r})"

    def empty(self) -> np.ndarray:
        """Per row: the empty string."""
        return self.starts == self.ends

    def joined(self) -> tuple[np.ndarray, np.ndarray]:
        """(the rows' bytes one after another, each row's length)."""
        lengths = self.ends - self.starts
        if lengths.shape[0] and self.starts[0] == 0 and self.ends[-1] == self.buf.shape[0] and (
                self.starts[1:] == self.ends[:-1]).all():
            return self.buf, lengths  # already packed
        at = np.cumsum(lengths) - lengths
        index = np.repeat(self.starts - at, lengths) + np.arange(int(lengths.sum()))
        return self.buf[index], lengths

    def __reduce__(self):
        buf, lengths = self.joined()
        ends = np.cumsum(lengths)
        return Strings, (buf, ends - lengths, ends)

"""Slow, obviously-correct feature crosses (the rules of learners/interactions.py)
with Python dicts and the mmh3 package."""

import struct

import mmh3


def cross_row(entries, interactions, bits, seed=0):
    """entries: [(namespace byte, index, value)] of one row → [(index, value)]."""
    base = {}
    for space, index, value in entries:  # 1. sum repeats of (namespace, index)
        key = (space, index)
        base[key] = base[key] + value if key in base else value
    items = [(space, index, value) for (space, index), value in base.items()]
    crosses = []
    for spec in interactions:  # 2. crosses in entry order; i <= j within one namespace
        letters = [ord(c) for c in spec]
        groups = [[e for e in items if e[0] == letter] for letter in letters]
        for combo in _combinations(groups, letters):
            h = mmh3.hash(struct.pack(f"<{len(combo)}I", *[e[1] & 0xFFFFFFFF for e in combo]), seed, signed=False)
            value = combo[0][2] * combo[1][2]
            if len(combo) == 3:
                value = value * combo[2][2]
            crosses.append((h & ((1 << bits) - 1), -value if h >> 31 else value))
    out = {}
    for index, value in [(i, v) for _, i, v in items] + crosses:  # 3. sum repeats of an index
        out[index] = out[index] + value if index in out else value
    return list(out.items())


def _combinations(groups, letters):
    def rec(k, start_positions):
        if k == len(groups):
            yield []
            return
        lo = start_positions if k and letters[k] == letters[k - 1] else 0
        for pos in range(lo, len(groups[k])):
            for rest in rec(k + 1, pos):
                yield [groups[k][pos]] + rest
    yield from rec(0, 0)

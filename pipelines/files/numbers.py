"""Decimal text to float64 in compiled code, rounded exactly as Python's
``float()`` rounds (to nearest, ties to even).

A token is ``[+-]? digits [. digits] [(e|E) [+-] digits]`` (".5" and "5."
too). Its value w · 10^q (w: the significant digits as an integer) is found
by one of two exact methods:

- Clinger's fast path (W. D. Clinger, "How to read floating point numbers
  accurately", PLDI 1990): w ≤ 2^53 and |q| ≤ 22, so w and 10^|q| are exact
  doubles and one IEEE multiplication or division rounds correctly;
- the Eisel–Lemire algorithm (D. Lemire, "Number parsing at a gigabyte per
  second", Software: Practice and Experience 51(8), 2021, §5–§6): w times a
  128-bit truncation of 5^q, then the rounding read off the top bits.

What neither settles is reported, never guessed: more than 19 significant
digits, results that would be subnormal, zero after rounding or infinite, and
the rare product too close to call. The callers then hand the token to
Python's ``float()`` (the readers, :mod:`pipelines.files.datafiles` and
:mod:`pipelines.files.vw_text`, parse that line in Python), so the compiled
path and the slow path cannot disagree on a value.
"""

from __future__ import annotations

import math

import numpy as np

from learners.jit import njit

OK, NOT_A_NUMBER, UNDECIDED = 0, 1, 2
"""parse_decimal's status: a value; not in the syntax above; in the syntax
but left to Python's float()."""

_Q_MIN, _Q_MAX = -342, 308
_U = np.uint64


def _powers_of_five() -> tuple[np.ndarray, np.ndarray]:
    """5^q for q in [-342, 308] as 128-bit numbers (high, low words) with the
    top bit set: truncated for q ≥ 0, rounded up for q < 0 (Lemire 2021, §5)."""
    values = []
    for q in range(_Q_MIN, 0):
        power5 = 5 ** -q
        z = power5.bit_length()  # smallest z with 2^z >= 5^-q (5^-q is never a power of 2)
        c = 2 ** (z + 127) // power5 + 1 if q >= -27 else 2 ** (2 * z + 128) // power5 + 1
        values.append(c >> max(0, c.bit_length() - 128))
    for q in range(0, _Q_MAX + 1):
        power5 = 5 ** q
        shift = power5.bit_length() - 128
        values.append(power5 << -shift if shift < 0 else power5 >> shift)
    mask = (1 << 64) - 1
    return (np.array([v >> 64 for v in values], dtype=np.uint64),
            np.array([v & mask for v in values], dtype=np.uint64))


POW5_HI, POW5_LO = _powers_of_five()
_POW10 = np.array([10.0 ** k for k in range(23)])  # exact doubles


@njit(cache=True, inline="always")
def _mul_64x64(a, b):
    """The 128-bit product of two uint64 as (high, low)."""
    m, s = _U(0xFFFFFFFF), _U(32)
    a_lo, a_hi, b_lo, b_hi = a & m, a >> s, b & m, b >> s
    p0, p1, p2, p3 = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (p0 >> s) + (p1 & m) + (p2 & m)
    return p3 + (p1 >> s) + (p2 >> s) + (mid >> s), (p0 & m) | (mid << s)


@njit(cache=True, inline="always")
def _leading_zeros(w):
    n = 0
    for shift in (32, 16, 8, 4, 2, 1):
        if w >> _U(64 - shift) == _U(0):
            n += shift
            w = w << _U(shift)
    return n


@njit(cache=True)
def eisel_lemire(w, q, pow5_hi, pow5_lo):
    """(True, w·10^q as a double) for 0 < w < 2^64 and q in [-342, 308], or
    (False, 0.0) when the result is not a normal double or cannot be decided."""
    lz = _leading_zeros(w)
    w = w << _U(lz)
    i = q - _Q_MIN
    hi, lo = _mul_64x64(w, pow5_hi[i])
    if hi & _U(0x1FF) == _U(0x1FF):  # the low bits may carry into the ones kept: refine
        hi2, _ = _mul_64x64(w, pow5_lo[i])
        low = lo + hi2
        if low < lo:
            hi += _U(1)
        lo = low
        if lo == _U(0xFFFFFFFFFFFFFFFF) and (q < -27 or q > 55):
            return False, 0.0
    upper = np.int64(hi >> _U(63))
    shift = _U(upper + 9)
    mantissa = hi >> shift
    power2 = ((217706 * q) >> 16) + 63 + upper - lz + 1023
    if power2 <= 0:
        return False, 0.0  # subnormal or zero: Python's float() decides
    if lo <= _U(1) and -4 <= q <= 23 and mantissa & _U(3) == _U(1) and (mantissa << shift) == hi:
        mantissa &= ~_U(1)  # exactly halfway: round to even, down
    mantissa = (mantissa + (mantissa & _U(1))) >> _U(1)
    if mantissa >= _U(1 << 53):
        mantissa = _U(1 << 52)
        power2 += 1
    if power2 >= 2047:
        return False, 0.0  # overflow: Python's float() gives inf
    return True, math.ldexp(np.float64(mantissa), power2 - 1075)


@njit(cache=True, inline="always")
def _digits(buf, i, n, w):
    """Read digits from i: (w extended by them, wrapping past 19 digits; end)."""
    while i < n:
        d = buf[i] - 48
        if d < 0 or d > 9:
            break
        w = w * _U(10) + _U(d)
        i += 1
    return w, i


@njit(cache=True, inline="always")
def _skip_zeros(buf, i, n):
    while i < n and buf[i] == 48:
        i += 1
    return i


@njit(cache=True, inline="always")
def scan_decimal(buf, i, n, pow5_hi, pow5_lo):
    """(status, value, end) of the longest number at buf[i:n]; the caller
    checks what follows ``end`` (a number ends at a delimiter)."""
    negative = False
    if i < n and (buf[i] == 43 or buf[i] == 45):  # + -
        negative = buf[i] == 45
        i += 1
    start = i
    i = _skip_zeros(buf, i, n)
    first = i
    w, i = _digits(buf, i, n, _U(0))
    digits, seen, q = i - first, i > start, 0
    if i < n and buf[i] == 46:  # .
        i += 1
        fraction = i
        if digits == 0:
            i = _skip_zeros(buf, i, n)
        significant = i
        w, i = _digits(buf, i, n, w)
        digits += i - significant
        q = fraction - i
        seen = seen or i > fraction
    if not seen:
        return NOT_A_NUMBER, 0.0, i
    if i < n and (buf[i] == 101 or buf[i] == 69):  # e E
        j = i + 1
        exp_negative = False
        if j < n and (buf[j] == 43 or buf[j] == 45):
            exp_negative = buf[j] == 45
            j += 1
        e = 0
        exp_start = j
        while j < n and 48 <= buf[j] <= 57:
            if e < 100000:
                e = e * 10 + (buf[j] - 48)
            j += 1
        if j == exp_start:
            return NOT_A_NUMBER, 0.0, j  # "1e", "1e+": not a number
        q += -e if exp_negative else e
        i = j
    if digits > 19:
        return UNDECIDED, 0.0, i
    if digits == 0:
        return OK, -0.0 if negative else 0.0, i
    if w <= _U(1 << 53) and -22 <= q <= 22:
        value = np.float64(w) * _POW10[q] if q >= 0 else np.float64(w) / _POW10[-q]
    elif _Q_MIN <= q <= _Q_MAX:
        ok, value = eisel_lemire(w, q, pow5_hi, pow5_lo)
        if not ok:
            return UNDECIDED, 0.0, i
    else:
        return UNDECIDED, 0.0, i
    return OK, -value if negative else value, i


@njit(cache=True)
def parse_decimal(buf, start, end, pow5_hi, pow5_lo):
    """(status, value) of exactly the token buf[start:end]."""
    status, value, stop = scan_decimal(buf, start, end, pow5_hi, pow5_lo)
    if stop != end:
        return NOT_A_NUMBER, 0.0
    return status, value

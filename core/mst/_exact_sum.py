"""The exact total weight of a spanning forest: the exact sum of float32 or
float64 weights rounded once to float64, whatever their order (the CPU
backend's, the tiled path's and the CUDA backend's check)."""

import numba
import numpy as np
from numba import njit, prange

from ..errors import InvalidInputError


def _parallel_min_cells():
    """``_cpu._PARALLEL_MIN_CELLS`` (read when called: tests lower it)."""
    from . import _cpu
    return _cpu._PARALLEL_MIN_CELLS


# The exact total weight.
#
# The total is the exact sum of the weights rounded once to float64, so it
# does not depend on the order of the summands: a tiled run sums per tile
# (in threads, without the globally sorted edge list) and still gives the
# in-memory run's total to the last bit.  Parts of a sum: per binary
# exponent of the summands, the sum of their signed integer significands
# (float64: the high and low 26 bits apart), then the counts of NaN, +inf,
# -inf, -0.0 and of all summands.  Parts of several arrays add up with +;
# an int64 part cannot overflow below 2**36 summands.

_SUM_SPECIALS = 5


def sum_parts_size(dtype):
    """Length of the parts of an exact sum of ``dtype`` numbers."""
    if np.dtype(dtype) == np.float32:
        return 256 + _SUM_SPECIALS
    if np.dtype(dtype) == np.float64:
        return 2 * 2048 + _SUM_SPECIALS
    raise InvalidInputError(
        f"exact sums take float32 or float64 numbers, got {np.dtype(dtype)}")


@njit(cache=True, nogil=True)
def _add_sum_parts32(bits, parts):
    special = parts.size - 5
    for i in range(bits.size):
        b = np.int64(bits[i])
        exponent = (b >> 23) & 0xFF
        fraction = b & 0x7FFFFF
        negative = (b >> 31) & 1
        if exponent == 0xFF:
            if fraction != 0:
                parts[special] += 1
            elif negative:
                parts[special + 2] += 1
            else:
                parts[special + 1] += 1
            continue
        if exponent == 0:  # zero or subnormal: the scale of exponent 1
            if fraction == 0 and negative:
                parts[special + 3] += 1
            exponent = 1
        else:
            fraction |= np.int64(1) << 23
        parts[exponent] += -fraction if negative else fraction
    parts[special + 4] += bits.size


@njit(cache=True, nogil=True)
def _add_sum_parts64(bits, parts):
    special = parts.size - 5
    for i in range(bits.size):
        b = bits[i]
        exponent = (b >> 52) & 0x7FF
        fraction = b & 0xFFFFFFFFFFFFF
        negative = b < 0
        if exponent == 0x7FF:
            if fraction != 0:
                parts[special] += 1
            elif negative:
                parts[special + 2] += 1
            else:
                parts[special + 1] += 1
            continue
        if exponent == 0:
            if fraction == 0 and negative:
                parts[special + 3] += 1
            exponent = 1
        else:
            fraction |= np.int64(1) << 52
        high = fraction >> 26
        low = fraction & 0x3FFFFFF
        if negative:
            high = -high
            low = -low
        parts[2 * exponent] += high
        parts[2 * exponent + 1] += low
    parts[special + 4] += bits.size


def sum_parts(weights, parts=None):
    """Add float32 or float64 ``weights`` to the parts of an exact sum
    (new int64 parts when ``parts`` is None); returns the parts."""
    weights = np.ascontiguousarray(weights).reshape(-1)
    if parts is None:
        parts = np.zeros(sum_parts_size(weights.dtype), dtype=np.int64)
    elif parts.size != sum_parts_size(weights.dtype):
        raise InvalidInputError(
            f"sum parts of {parts.size} entries do not belong to "
            f"{weights.dtype} numbers")
    bits = weights.view(np.uint32 if weights.dtype == np.float32
                        else np.int64)
    n_chunks = max(1, min(numba.get_num_threads(),
                          bits.size // _parallel_min_cells()))
    if n_chunks == 1:
        _add_sum_parts(bits, parts)
    else:
        # integer parts add up exactly: chunks in parallel, then their sum
        chunk_parts = np.zeros((n_chunks, parts.size), dtype=np.int64)
        _chunked_sum_parts(bits, chunk_parts)
        parts += chunk_parts.sum(axis=0)
    return parts


@njit(cache=True, nogil=True)
def _add_sum_parts(bits, parts):
    if bits.itemsize == 4:
        _add_sum_parts32(bits, parts)
    else:
        _add_sum_parts64(bits, parts)


@njit(cache=True, nogil=True, parallel=True)
def _chunked_sum_parts(bits, chunk_parts):
    n_chunks = chunk_parts.shape[0]
    n = bits.size
    for t in prange(n_chunks):
        _add_sum_parts(bits[n * t // n_chunks:n * (t + 1) // n_chunks],
                       chunk_parts[t])


def total_from_parts(parts):
    """The exact sum that ``parts`` describe, rounded once to float64
    (round half to even; NaN and infinities as float addition gives
    them; -0.0 only when every summand is -0.0)."""
    parts = np.asarray(parts, dtype=np.int64)
    nan, plus_inf, minus_inf, minus_zero, count = (
        int(v) for v in parts[-_SUM_SPECIALS:])
    if nan or (plus_inf and minus_inf):
        return float("nan")
    if plus_inf:
        return float("inf")
    if minus_inf:
        return float("-inf")
    if count and minus_zero == count:
        return -0.0
    numerator = 0
    if parts.size == sum_parts_size(np.float32):
        # a float32 with exponent field e is its significand * 2**(e - 150)
        for exponent in np.flatnonzero(parts[:256]):
            numerator += int(parts[exponent]) << (int(exponent) - 1)
        scale = 149
    else:
        pairs = parts[:-_SUM_SPECIALS].reshape(2048, 2)
        for exponent in np.flatnonzero(pairs.any(axis=1)):
            significand = (int(pairs[exponent, 0]) << 26) \
                + int(pairs[exponent, 1])
            numerator += significand << (int(exponent) - 1)
        scale = 1074
    try:
        # int / int is correctly rounded in Python, whatever the sizes
        return numerator / (1 << scale)
    except OverflowError:
        return float("inf") if numerator > 0 else float("-inf")


def exact_total(weights):
    """The exact sum of float32 or float64 ``weights``, rounded once to
    float64: the same whatever the order of the summands."""
    return total_from_parts(sum_parts(weights))

"""LSD radix sort of a minimum spanning forest's tree edges by (weight,
edge id), on all cores (the CPU backend's last step when the edge list is
asked for).  Weights become order-preserving unsigned keys; when the key
span and the edge ids fit in 64 bits together one packed key is sorted,
else ids then weights (stable passes)."""

import numba
import numpy as np
from numba import njit, prange

# Widest digit of the LSD radix sort of the tree edges: 2**11 counters per
# chunk stay in the L1 cache.
_MAX_DIGIT_BITS = 11


def _parallel_min_cells():
    """``_cpu._PARALLEL_MIN_CELLS`` (read when called: tests lower it)."""
    from . import _cpu
    return _cpu._PARALLEL_MIN_CELLS


_SIGN32 = 0x80000000
_MAGNITUDE32 = 0x7FFFFFFF
_INF32 = 0x7F800000
_SIGN64 = np.uint64(1 << 63)
_MAGNITUDE64 = np.uint64((1 << 63) - 1)
_INF64 = np.uint64(0x7FF0000000000000)


@njit(inline="always")
def _sort_key32(bits):
    """float32 bit pattern -> unsigned key in the weight order.

    Negative numbers have their bits inverted, the others their sign bit
    set, which orders keys as floats.  -0 becomes +0 (they compare equal)
    and every NaN the largest key (NaN sorts last).
    """
    b = np.int64(bits) & 0xFFFFFFFF
    magnitude = b & _MAGNITUDE32
    if magnitude == 0:
        return np.int64(_SIGN32)
    if magnitude > _INF32:
        return np.int64(0xFFFFFFFF)
    if b & _SIGN32:
        return ~b & 0xFFFFFFFF
    return b | _SIGN32


@njit(inline="always")
def _weight_bits32(key):
    """Inverse of :func:`_sort_key32`."""
    if key & _SIGN32:
        return key ^ _SIGN32
    return ~key & 0xFFFFFFFF


@njit(inline="always")
def _sort_key64(bits):
    """float64 bit pattern -> unsigned key in the weight order (see
    :func:`_sort_key32`)."""
    b = np.uint64(bits)
    magnitude = b & _MAGNITUDE64
    if magnitude == np.uint64(0):
        return _SIGN64
    if magnitude > _INF64:
        return ~np.uint64(0)
    if b & _SIGN64:
        return ~b
    return b | _SIGN64


@njit(inline="always")
def _weight_bits64(key):
    if key & _SIGN64:
        return key ^ _SIGN64
    return ~key


@njit(inline="always")
def _sort_key(weight_bits, i):
    """Sort key of weight i, from the weights' bit patterns."""
    if weight_bits.itemsize == 4:
        return np.uint64(_sort_key32(weight_bits[i]))
    return _sort_key64(weight_bits[i])


@njit(inline="always")
def _set_weight_bits(weight_bits, i, key):
    """Inverse of :func:`_sort_key`."""
    if weight_bits.itemsize == 4:
        weight_bits[i] = _weight_bits32(np.int64(key))
    else:
        weight_bits[i] = _weight_bits64(key)


@njit(cache=True, nogil=True, parallel=True)
def _weight_key_range(weight_bits):
    """Smallest and largest sort key of the weights."""
    low = ~np.uint64(0)
    high = np.uint64(0)
    for i in prange(weight_bits.size):
        key = _sort_key(weight_bits, i)
        low = min(low, key)
        high = max(high, key)
    return low, high


@njit(cache=True, nogil=True, parallel=True)
def _weight_keys(weight_bits, key_offset, keys):
    """keys = sort key of each weight - key_offset."""
    for i in prange(weight_bits.size):
        keys[i] = _sort_key(weight_bits, i) - np.uint64(key_offset)


@njit(cache=True, nogil=True, parallel=True)
def _weight_bits_from_keys(keys, key_offset, weight_bits):
    """Inverse of :func:`_weight_keys`."""
    for i in prange(keys.size):
        _set_weight_bits(weight_bits, i, keys[i] + np.uint64(key_offset))


@njit(cache=True, nogil=True, parallel=True)
def _pack_keys(weight_bits, key_offset, edge_id, id_bits, keys):
    """keys = ((weight key - offset) << id_bits) | edge id."""
    for i in prange(weight_bits.size):
        keys[i] = ((_sort_key(weight_bits, i) - np.uint64(key_offset))
                   << np.uint64(id_bits)) | np.uint64(edge_id[i])


@njit(cache=True, nogil=True, parallel=True)
def _unpack_keys(keys, key_offset, id_bits, edge_id, weight_bits):
    """Inverse of :func:`_pack_keys`."""
    id_mask = (np.uint64(1) << np.uint64(id_bits)) - np.uint64(1)
    for i in prange(keys.size):
        k = keys[i]
        edge_id[i] = np.int64(k & id_mask)
        _set_weight_bits(weight_bits, i,
                         (k >> np.uint64(id_bits)) + np.uint64(key_offset))


@njit(cache=True, nogil=True, parallel=True)
def _radix_pass(keys, carried, keys_out, carried_out, shift, digit_bits,
                n_chunks):
    """One stable counting-sort pass of ``keys`` on the ``digit_bits`` bits
    at ``shift``, moving ``carried`` (may be empty) along.

    The keys are cut into ``n_chunks`` contiguous chunks that count and
    scatter in parallel; chunk t writes each digit's run after the runs of
    chunks < t, which keeps the pass stable.  Returns False (and writes
    nothing) when every key has the same digit.
    """
    n = keys.size
    radix = 1 << digit_bits
    mask = np.uint64(radix - 1)
    ushift = np.uint64(shift)
    counts = np.zeros((n_chunks, radix), dtype=np.int64)
    for t in prange(n_chunks):
        for i in range(n * t // n_chunks, n * (t + 1) // n_chunks):
            counts[t, np.int64((keys[i] >> ushift) & mask)] += 1
    running = 0
    for d in range(radix):
        digit_total = 0
        for t in range(n_chunks):
            digit_total += counts[t, d]
        if digit_total == n:
            return False
        for t in range(n_chunks):
            count = counts[t, d]
            counts[t, d] = running
            running += count
    move_carried = carried.size > 0
    for t in prange(n_chunks):
        for i in range(n * t // n_chunks, n * (t + 1) // n_chunks):
            d = np.int64((keys[i] >> ushift) & mask)
            j = counts[t, d]
            counts[t, d] = j + 1
            keys_out[j] = keys[i]
            if move_carried:
                carried_out[j] = carried[i]
    return True


def _radix_sort(keys, carried, n_bits, progress=None, keys_out=None):
    """Stable LSD radix sort of uint64 ``keys`` (values below 2**n_bits),
    moving ``carried`` (may be empty) along; returns the sorted (keys,
    carried), which may be the input arrays or new ones.  ``progress``,
    if given, hears the fraction of passes done after each pass;
    ``keys_out``, if given, is the second key buffer."""
    n_chunks = max(1, min(numba.get_num_threads(),
                          keys.size // _parallel_min_cells()))
    n_passes = max(1, -(-n_bits // _MAX_DIGIT_BITS))
    digit_bits = -(-n_bits // n_passes)
    if keys_out is None:
        keys_out = np.empty_like(keys)
    carried_out = np.empty_like(carried)
    for shift in range(0, n_bits, digit_bits):
        if _radix_pass(keys, carried, keys_out, carried_out, shift,
                       min(digit_bits, n_bits - shift), n_chunks):
            keys, keys_out = keys_out, keys
            carried, carried_out = carried_out, carried
        if progress is not None:
            progress(min(1.0, (shift + digit_bits) / n_bits))
    return keys, carried


def _sort_tree_edges(edge_id, weight, n_cells, progress=None, scratch=None):
    """Sort tree edges by (weight, edge id) = (weight, low, high).

    Radix sort on the weights' order-preserving bit keys.  When the span of
    the weight keys and the edge ids fit in 64 bits together (float32
    weights always do below 2**30 cells), one packed key is sorted;
    otherwise the edges are sorted by id, then stably by weight.  Returns
    sorted (edge_id, weight), reusing the input arrays' memory.
    ``progress`` (a Progress, optional) hears of each radix pass;
    ``scratch`` (optional, uint64, twice the edges) holds the packed keys.
    """
    if edge_id.size == 0:
        return edge_id, weight
    from ._cpu import _threads_for
    with _threads_for(edge_id.size):
        return _radix_sort_tree_edges(edge_id, weight, n_cells, progress,
                                      scratch)


def _radix_sort_tree_edges(edge_id, weight, n_cells, progress, scratch):
    bits_dtype = np.uint32 if weight.dtype.itemsize == 4 else np.uint64
    weight_bits = weight.view(bits_dtype)
    low_key, high_key = _weight_key_range(weight_bits)
    low_key = np.uint64(low_key)
    id_bits = int(4 * n_cells - 1).bit_length()
    key_bits = int(high_key - low_key).bit_length()
    k = edge_id.size
    if scratch is None:
        scratch = np.empty(2 * k, dtype=np.uint64)
    keys = scratch[:k]
    if id_bits + key_bits <= 64:
        _pack_keys(weight_bits, low_key, edge_id, id_bits, keys)
        keys, _ = _radix_sort(keys, keys[:0], id_bits + key_bits, progress,
                              scratch[k:2 * k])
        _unpack_keys(keys, low_key, id_bits, edge_id, weight_bits)
    else:
        _weight_keys(weight_bits, low_key, keys)
        ids, keys = _radix_sort(
            edge_id.view(np.uint64), keys, id_bits,
            None if progress is None else progress.span(0.0, 0.5))
        keys, ids = _radix_sort(
            keys, ids, key_bits,
            None if progress is None else progress.span(0.5, 1.0))
        edge_id[:] = ids.view(np.int64)
        _weight_bits_from_keys(keys, low_key, weight_bits)
    return edge_id, weight

"""CUDA outputs of the minimum spanning forest, computed on the device.

What the in-memory CUDA run returns besides the edge list, without sending
the forest back to the CPU:

Parent directions (Euler tour).  Each tree is rooted at its lowest-index
cell (the CPU walks it depth first from there; the parent of a cell is the
same whatever the walk, since a tree has one path between two cells).
1. Tree masks: bit k of a cell says the tree edge toward neighbour k
   (``PARENT_OFFSETS`` order) exists.
2. Roots: every cell's Borůvka component root (the forest's trees) takes
   the least cell index of its tree (an ``atomic.min`` tried only when it
   would lower the value).
3. The directed tree edges form one Euler circuit per tree: after
   arriving at u from slot j, the tour leaves u by the next slot of u's
   mask after j in cyclic order (Tarjan & Vishkin, An efficient parallel
   biconnectivity algorithm, SIAM J. Comput. 1985).  The circuits are cut
   into segments at sample cells (each valid cell with probability
   ``2**-SAMPLE_BITS`` by a hash of its index, plus every root: a segment
   starts at the cell's first slot), one thread walks each segment to the
   next sample, and a walk longer than ``MAX_SEGMENT`` edges starts a new
   segment where it is, so no thread walks far.
4. The segments' successors form one list per tree, cut before the root's
   segment; pointer jumping (Wyllie) gives every segment the number of
   tour edges from its start to the end of its tree's tour.
5. A second walk gives every directed edge its distance to the tour's end;
   each cell keeps the largest over the edges that arrive at it (an
   ``atomic.max`` of distance * 8 + the slot back): the first arrival, which
   in a depth-first tour from the root is the one from the parent.
6. Degrees toward the parent (``PARENT_DEGREES``), 0 at roots, NaN on
   invalid cells, written as the float32 raster the CPU backend returns.

The work is linear in the cells (each directed edge is walked twice); the
walks read one mask byte per step, near in the raster, from many threads.

Exact total.  The weights are recovered from the tree edges' sort keys (as
the edge list's decode does), split into per-exponent integer significand
sums in shared memory, then added into one int64 array of parts per block:
the parts of :func:`gridgraph.core.mst._cpu.sum_parts`, so the total,
rounded once on the host, is the CPU's to the last bit.
"""

import numpy as np
from numba import cuda

from .._common import index_dtype
from .._cuda_common import (FLAT_THREADS, SIMULATOR, block_reserve,
                            blocks_for, ceil_log2, device_scalar,
                            find_halving, find_root)
from . import PARENT_DEGREES, PARENT_OFFSETS

# A valid cell starts a tour segment with probability 2**-SAMPLE_BITS;
# a walk of MAX_SEGMENT edges starts a new one.  The simulator gets short
# segments so that small test rasters cross every kind of seam.
SAMPLE_BITS = 2 if SIMULATOR else 5
MAX_SEGMENT = 6 if SIMULATOR else 2048
INVALID_CODE = 9
ROOT_CODE = 8
_OPPOSITE = np.array([2, 3, 0, 1, 6, 7, 4, 5], dtype=np.int64)
# Exact sums: float32 parts (256 exponents + 5 counts), float64 parts
# (2 x 2048 + 5).
_SPECIALS = 5
PARTS32 = 256 + _SPECIALS
PARTS64 = 2 * 2048 + _SPECIALS
SUM_THREADS = 32 if SIMULATOR else 256
SUM_BLOCKS = 4 if SIMULATOR else 1024


# --------------------------------------------------------------------------
# Parent directions.

@cuda.jit(cache=True)
def _fill(array, n, value):
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        array[i] = value


@cuda.jit(cache=True)
def _flag_tree_edges(keys, ids, k, packed, flags):
    """flags[edge id] = 1 for every tree edge (edge id = low * 4 + rank)."""
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if i < k:
        edge_id = keys[i] & 0xFFFFFFFF if packed else ids[i]
        flags[edge_id] = 1


@cuda.jit(cache=True)
def _tree_masks(flags, rows, cols, masks):
    """Bit k: the tree edge toward neighbour k (E N W S NE NW SW SE).

    An edge of rank 0 (right), 1 (down-left), 2 (down), 3 (down-right)
    from its low end is slot 0, 6, 3, 7 there and 2, 4, 1, 5 at its high
    end."""
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v >= rows * cols:
        return
    r = v // cols
    c = v - r * cols
    m = 0
    base = v * 4
    if flags[base]:
        m |= 1
    if flags[base + 1]:
        m |= 1 << 6
    if flags[base + 2]:
        m |= 1 << 3
    if flags[base + 3]:
        m |= 1 << 7
    if c > 0 and flags[(v - 1) * 4]:
        m |= 1 << 2
    if r > 0:
        up = v - cols
        if flags[up * 4 + 2]:
            m |= 1 << 1
        if c + 1 < cols and flags[(up + 1) * 4 + 1]:
            m |= 1 << 4
        if c > 0 and flags[(up - 1) * 4 + 3]:
            m |= 1 << 5
    masks[v] = m


@cuda.jit(cache=True)
def _least_cells(parent, valid, n, least):
    """least[root] = the lowest cell index of each tree."""
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v < n and valid[v]:
        r = find_halving(parent, v)
        if v < least[r]:
            cuda.atomic.min(least, r, v)


@cuda.jit(device=True, cache=True)
def _first_slot(m):
    for s in range(8):
        if (m >> s) & 1:
            return s
    return -1


@cuda.jit(device=True, cache=True)
def _next_slot(m, j):
    """The next set slot of mask m after slot j, cyclically (j itself
    when it is the only one)."""
    for step in range(1, 9):
        s = (j + step) & 7
        if (m >> s) & 1:
            return s
    return j


@cuda.jit(device=True, cache=True)
def _sampled(v, sample_bits):
    h = (v * 2654435761) & 0xFFFFFFFF
    return (h >> (32 - sample_bits)) == 0


@cuda.jit(cache=True)
def _start_segments(parent, least, valid, masks, n, sample_bits, codes,
                    seg_of_cell, seg_counter, root_counter):
    """Roots get code ROOT_CODE, invalid cells INVALID_CODE; sample cells
    and roots with tree edges get a segment number (counters: segments,
    roots)."""
    scratch = cuda.shared.array(2, np.int64)
    scratch_roots = cuda.shared.array(2, np.int64)
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    starts = 0
    is_root = 0
    if v < n:
        if valid[v]:
            r = find_root(parent, v)
            if least[r] == v:
                is_root = 1
                codes[v] = ROOT_CODE
            else:
                codes[v] = 0
            if masks[v] != 0 and (is_root == 1 or _sampled(v, sample_bits)):
                starts = 1
        else:
            codes[v] = INVALID_CODE
        seg_of_cell[v] = -1
    block_reserve(is_root, root_counter, scratch_roots)
    slot = block_reserve(starts, seg_counter, scratch)
    if starts:
        seg_of_cell[v] = slot


@cuda.jit(cache=True)
def _segment_starts(seg_of_cell, codes, masks, n, seg_start, seg_root):
    """A segment starts at its cell's first slot; roots' segments start
    their tree's tour."""
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v < n:
        s = seg_of_cell[v]
        if s >= 0:
            seg_start[s] = v * 8 + _first_slot(masks[v])
            seg_root[s] = 1 if codes[v] == ROOT_CODE else 0


@cuda.jit(cache=True)
def _walk_segments(masks, seg_of_cell, steps, opposite, max_segment,
                   n_static, seg_start, seg_next, seg_length, n_seg):
    """Walk each sampled segment to the next sample's first edge; split
    walks longer than ``max_segment`` into new segments."""
    s = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if s >= n_static:
        return
    e = seg_start[s]
    v = e >> 3
    k = e & 7
    current = s
    count = np.int64(0)
    while True:
        count += 1
        u = v + steps[k]
        back = opposite[k]
        m = masks[u]
        k = _next_slot(m, back)
        if seg_of_cell[u] >= 0 and k == _first_slot(m):
            seg_next[current] = seg_of_cell[u]
            seg_length[current] = count
            return
        if count == max_segment:
            new = cuda.atomic.add(n_seg, 0, 1)
            seg_next[current] = new
            seg_length[current] = count
            seg_start[new] = u * 8 + k
            current = new
            count = 0
        v = u


@cuda.jit(cache=True)
def _cut_before_roots(seg_next, seg_root, seg_length, m, succ, remaining):
    s = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if s < m:
        following = seg_next[s]
        succ[s] = -1 if seg_root[following] else following
        remaining[s] = seg_length[s]


@cuda.jit(cache=True)
def _jump_segments(succ, remaining, m, succ_out, remaining_out):
    """One round of pointer jumping: remaining[s] = tour edges from the
    start of segment s to the end of its tree's tour, once converged."""
    s = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if s < m:
        following = succ[s]
        if following >= 0:
            remaining_out[s] = remaining[s] + remaining[following]
            succ_out[s] = succ[following]
        else:
            remaining_out[s] = remaining[s]
            succ_out[s] = following


@cuda.jit(cache=True)
def _first_arrivals(masks, steps, opposite, seg_start, seg_length, remaining,
                    m, arrival):
    """arrival[u] = max over the tour edges into u of (edges left to the
    tour's end) * 8 + the slot back: the largest is the first arrival."""
    s = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if s >= m:
        return
    e = seg_start[s]
    v = e >> 3
    k = e & 7
    left = remaining[s]
    for i in range(seg_length[s]):
        u = v + steps[k]
        back = opposite[k]
        key = (left - i) * 8 + back
        if key > arrival[u]:
            cuda.atomic.max(arrival, u, key)
        k = _next_slot(masks[u], back)
        v = u


@cuda.jit(cache=True)
def _degrees(codes, arrival, n, degrees, direction):
    v = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    if v < n:
        code = codes[v]
        if code == INVALID_CODE:
            direction[v] = np.nan
        elif code == ROOT_CODE:
            direction[v] = 0.0
        else:
            direction[v] = degrees[arrival[v] & 7]


def parent_direction_device(parent, valid, rows, cols, keys, ids, k, packed,
                            timer=None):
    """Parent directions of the forest whose ``k`` tree edges are listed by
    their sort keys (``keys``, and ``ids`` unless ``packed``), with
    ``parent`` the Borůvka components (any root per tree).

    Returns (float32 device array of rows * cols degrees, number of trees).
    """
    n = rows * cols
    grid = blocks_for(n, FLAT_THREADS)
    flags = cuda.device_array(max(4 * n, 1), dtype=np.uint8)
    _fill[blocks_for(4 * n, FLAT_THREADS), FLAT_THREADS](flags, 4 * n, 0)
    if k > 0:
        _flag_tree_edges[blocks_for(k, FLAT_THREADS), FLAT_THREADS](
            keys, ids if ids is not None else keys, k, packed, flags)
    masks = cuda.device_array(n, dtype=np.uint8)
    _tree_masks[grid, FLAT_THREADS](flags, rows, cols, masks)
    del flags
    least = cuda.device_array(n, dtype=np.int64)
    _fill[grid, FLAT_THREADS](least, n, n)
    _least_cells[grid, FLAT_THREADS](parent, valid, n, least)
    if timer is not None:
        timer.mark("direction: masks and roots")

    codes = cuda.device_array(n, dtype=np.uint8)
    seg_of_cell = cuda.device_array(n, dtype=index_dtype(n))
    n_seg = cuda.to_device(np.zeros(1, dtype=np.int64))
    n_roots = cuda.to_device(np.zeros(1, dtype=np.int64))
    _start_segments[grid, FLAT_THREADS](
        parent, least, valid, masks, n, SAMPLE_BITS, codes, seg_of_cell,
        n_seg, n_roots)
    del least
    n_static = int(device_scalar(n_seg, 0))
    trees = int(device_scalar(n_roots, 0))
    # the samples and roots, plus one per MAX_SEGMENT tour edges (two per
    # tree edge)
    capacity = n_static + 2 * k // MAX_SEGMENT + 1
    seg_start = cuda.device_array(capacity, dtype=np.int64)
    seg_root = cuda.device_array(capacity, dtype=np.uint8)
    _fill[blocks_for(capacity, FLAT_THREADS), FLAT_THREADS](seg_root,
                                                            capacity, 0)
    _segment_starts[grid, FLAT_THREADS](seg_of_cell, codes, masks, n,
                                        seg_start, seg_root)
    steps = cuda.to_device(PARENT_OFFSETS[:, 0] * cols + PARENT_OFFSETS[:, 1])
    opposite = cuda.to_device(_OPPOSITE)
    seg_next = cuda.device_array(capacity, dtype=np.int64)
    seg_length = cuda.device_array(capacity, dtype=np.int64)
    if n_static:
        _walk_segments[blocks_for(n_static, FLAT_THREADS), FLAT_THREADS](
            masks, seg_of_cell, steps, opposite, MAX_SEGMENT, n_static,
            seg_start, seg_next, seg_length, n_seg)
    del seg_of_cell
    m = int(device_scalar(n_seg, 0))
    if timer is not None:
        timer.mark("direction: tour segments")
    arrival = cuda.device_array(n, dtype=np.int64)
    _fill[grid, FLAT_THREADS](arrival, n, 0)
    if m:
        seg_grid = blocks_for(m, FLAT_THREADS)
        succ = cuda.device_array(m, dtype=np.int64)
        remaining = cuda.device_array(m, dtype=np.int64)
        succ_b = cuda.device_array(m, dtype=np.int64)
        remaining_b = cuda.device_array(m, dtype=np.int64)
        _cut_before_roots[seg_grid, FLAT_THREADS](
            seg_next, seg_root, seg_length, m, succ, remaining)
        for _ in range(ceil_log2(m) + 1):
            _jump_segments[seg_grid, FLAT_THREADS](succ, remaining, m, succ_b,
                                                   remaining_b)
            succ, succ_b = succ_b, succ
            remaining, remaining_b = remaining_b, remaining
        del succ, succ_b, remaining_b, seg_next, seg_root
        if timer is not None:
            timer.mark("direction: segment ranks")
        _first_arrivals[seg_grid, FLAT_THREADS](
            masks, steps, opposite, seg_start, seg_length, remaining, m,
            arrival)
        del remaining
    del masks, seg_start, seg_length
    direction = cuda.device_array(n, dtype=np.float32)
    _degrees[grid, FLAT_THREADS](codes, arrival, n,
                                 cuda.to_device(PARENT_DEGREES), direction)
    if timer is not None:
        timer.mark("direction: first arrivals")
    return direction, trees


# --------------------------------------------------------------------------
# Exact total.

@cuda.jit(device=True, cache=True)
def _weight_bits(key, packed, weight64):
    """The weight's bit pattern from a tree edge's sort key."""
    wkey = key >> 32 if packed else key
    if weight64:
        if wkey < 0:
            wkey ^= 0x7FFFFFFFFFFFFFFF
        return wkey
    if wkey < 0:
        wkey ^= 0x7FFFFFFF
    return wkey & 0xFFFFFFFF


@cuda.jit(cache=True)
def _sum_parts32(keys, k, packed, parts):
    local = cuda.shared.array(PARTS32, np.int64)
    t = cuda.threadIdx.x
    for j in range(t, PARTS32, cuda.blockDim.x):
        local[j] = 0
    cuda.syncthreads()
    special = PARTS32 - _SPECIALS
    stride = np.int64(cuda.gridDim.x) * cuda.blockDim.x
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + t
    while i < k:
        b = _weight_bits(keys[i], packed, False)
        exponent = (b >> 23) & 0xFF
        fraction = b & 0x7FFFFF
        negative = (b >> 31) & 1
        if exponent == 0xFF:
            if fraction != 0:
                cuda.atomic.add(local, special, 1)
            elif negative:
                cuda.atomic.add(local, special + 2, 1)
            else:
                cuda.atomic.add(local, special + 1, 1)
        else:
            if exponent == 0:
                if fraction == 0 and negative:
                    cuda.atomic.add(local, special + 3, 1)
                exponent = 1
            else:
                fraction |= np.int64(1) << 23
            cuda.atomic.add(local, exponent,
                            -fraction if negative else fraction)
        i += stride
    cuda.syncthreads()
    for j in range(t, PARTS32, cuda.blockDim.x):
        if local[j] != 0:
            cuda.atomic.add(parts, j, local[j])


@cuda.jit(cache=True)
def _sum_parts64(keys, k, packed, parts):
    local = cuda.shared.array(PARTS64, np.int64)
    t = cuda.threadIdx.x
    for j in range(t, PARTS64, cuda.blockDim.x):
        local[j] = 0
    cuda.syncthreads()
    special = PARTS64 - _SPECIALS
    stride = np.int64(cuda.gridDim.x) * cuda.blockDim.x
    i = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + t
    while i < k:
        b = _weight_bits(keys[i], packed, True)
        exponent = (b >> 52) & 0x7FF
        fraction = b & 0xFFFFFFFFFFFFF
        negative = b < 0
        if exponent == 0x7FF:
            if fraction != 0:
                cuda.atomic.add(local, special, 1)
            elif negative:
                cuda.atomic.add(local, special + 2, 1)
            else:
                cuda.atomic.add(local, special + 1, 1)
        else:
            if exponent == 0:
                if fraction == 0 and negative:
                    cuda.atomic.add(local, special + 3, 1)
                exponent = 1
            else:
                fraction |= np.int64(1) << 52
            high = fraction >> 26
            low = fraction & 0x3FFFFFF
            if negative:
                high = -high
                low = -low
            cuda.atomic.add(local, 2 * exponent, high)
            cuda.atomic.add(local, 2 * exponent + 1, low)
        i += stride
    cuda.syncthreads()
    for j in range(t, PARTS64, cuda.blockDim.x):
        if local[j] != 0:
            cuda.atomic.add(parts, j, local[j])


def exact_total_device(keys, k, packed, weight64):
    """Exact sum of the ``k`` tree weights whose sort keys are ``keys``
    (weight key in the high 32 bits when ``packed``), rounded once."""
    from ._cpu import total_from_parts
    size = PARTS64 if weight64 else PARTS32
    parts = cuda.to_device(np.zeros(size, dtype=np.int64))
    if k > 0:
        kernel = _sum_parts64 if weight64 else _sum_parts32
        blocks = min(SUM_BLOCKS, blocks_for(k, SUM_THREADS))
        kernel[blocks, SUM_THREADS](keys, k, packed, parts)
    host = parts.copy_to_host()
    host[-1] = k
    return total_from_parts(host)

"""Edge keys, forest compression and a tile's forest as a bitmask per cell.

Edge keys: ``edge_id = low * 4 + rank`` (rank 0 right, 1 down-left, 2 down,
3 down-right), as in the in-memory kernel; (weight, edge id) orders as
(weight, low, high), NaN weights last.  Compression (Haverkort's
Observations 3 and 4): dead ends dropped, degree-2 paths contracted to their
heaviest edge.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from ..._unionfind import find_root as _find
from .._cpu import _edge_weight, _lighter


class Graph(NamedTuple):
    """A forest as edge lists: ends ``a`` and ``b`` (global cells), weights
    ``w`` and keys ``e`` (the key of an original edge: for a contracted
    path, of its heaviest edge)."""

    a: np.ndarray
    b: np.ndarray
    w: np.ndarray
    e: np.ndarray


def empty_graph(weight_dtype):
    return Graph(np.empty(0, np.int64), np.empty(0, np.int64),
                 np.empty(0, weight_dtype), np.empty(0, np.int64))

# --------------------------------------------------------------------------
# edge keys and compression


@njit(cache=True, nogil=True, inline="always")
def _heavier(w1, e1, w2, e2):
    return _lighter(w2, e2, w1, e1)


@njit(cache=True, nogil=True)
def _compress(n_vertices, end_a, end_b, weight, edge_id, boundary):
    """Drop dead ends and contract degree-2 paths of a forest.

    Vertices are 0..n_vertices-1; ``boundary`` marks those that must stay.
    Returns (a, b, weight, edge_id) of the compressed forest: one edge per
    maximal path between kept vertices (boundary, or degree other than 2
    once dead ends are gone), keyed by the path's heaviest edge.
    """
    n_edges = end_a.size
    degree = np.zeros(n_vertices, dtype=np.int64)
    for e in range(n_edges):
        degree[end_a[e]] += 1
        degree[end_b[e]] += 1
    start = np.zeros(n_vertices + 1, dtype=np.int64)
    for v in range(n_vertices):
        start[v + 1] = start[v] + degree[v]
    fill = start[:-1].copy()
    incident = np.empty(2 * n_edges, dtype=np.int64)
    for e in range(n_edges):
        incident[fill[end_a[e]]] = e
        fill[end_a[e]] += 1
        incident[fill[end_b[e]]] = e
        fill[end_b[e]] += 1
    gone = np.zeros(n_edges, dtype=np.bool_)
    # Observation 3: strip dead ends, leaf by leaf
    stack = np.empty(n_vertices, dtype=np.int64)
    top = 0
    for v in range(n_vertices):
        if degree[v] == 1 and not boundary[v]:
            stack[top] = v
            top += 1
    while top > 0:
        top -= 1
        v = stack[top]
        if degree[v] != 1:
            continue
        for k in range(start[v], start[v + 1]):
            e = incident[k]
            if not gone[e]:
                gone[e] = True
                degree[v] = 0
                u = end_b[e] if end_a[e] == v else end_a[e]
                degree[u] -= 1
                if degree[u] == 1 and not boundary[u]:
                    stack[top] = u
                    top += 1
                break
    # Observation 4: contract paths through non-boundary degree-2 vertices
    out_a = np.empty(n_edges, dtype=np.int64)
    out_b = np.empty(n_edges, dtype=np.int64)
    out_w = np.empty(n_edges, dtype=weight.dtype)
    out_e = np.empty(n_edges, dtype=np.int64)
    walked = np.zeros(n_edges, dtype=np.bool_)
    count = 0
    for s in range(n_vertices):
        if degree[s] == 0 or (degree[s] == 2 and not boundary[s]):
            continue
        for k in range(start[s], start[s + 1]):
            e = incident[k]
            if gone[e] or walked[e]:
                continue
            walked[e] = True
            heavy_w = weight[e]
            heavy_e = edge_id[e]
            here = end_b[e] if end_a[e] == s else end_a[e]
            while degree[here] == 2 and not boundary[here]:
                for j in range(start[here], start[here + 1]):
                    f = incident[j]
                    if not gone[f] and not walked[f]:
                        break
                walked[f] = True
                if _heavier(weight[f], edge_id[f], heavy_w, heavy_e):
                    heavy_w = weight[f]
                    heavy_e = edge_id[f]
                here = end_b[f] if end_a[f] == here else end_a[f]
            out_a[count] = s
            out_b[count] = here
            out_w[count] = heavy_w
            out_e[count] = heavy_e
            count += 1
    return out_a[:count], out_b[:count], out_w[:count], out_e[:count]


@njit(cache=True, nogil=True)
def _kruskal(n_vertices, end_a, end_b, order):
    """Kruskal over edges taken in ``order``; True for the forest's edges."""
    parent = np.arange(n_vertices)
    kept = np.zeros(end_a.size, dtype=np.bool_)
    for k in range(order.size):
        e = order[k]
        ra = _find(parent, end_a[e])
        rb = _find(parent, end_b[e])
        if ra != rb:
            parent[ra] = rb
            kept[e] = True
    return kept


@njit(cache=True, nogil=True)
def _weights(a, b, weight_index, half):
    out = np.empty(a.size, dtype=a.dtype)
    for i in range(a.size):
        out[i] = _edge_weight(a[i], b[i], weight_index, half)
    return out


def _boundary_of(cells, raster_cols, row0, row1, col0, col1, shape):
    """Cells of a block [row0, row1) x [col0, col1) with a neighbour outside
    the block (inside the raster)."""
    rows = cells // raster_cols
    cols = cells % raster_cols
    return (((rows == row0) & (row0 > 0)) | ((rows == row1 - 1) & (row1 < shape[0]))
            | ((cols == col0) & (col0 > 0)) | ((cols == col1 - 1) & (col1 < shape[1])))


# --------------------------------------------------------------------------
# a tile's forest as a bitmask per cell
#
# Bit k < 4 of a cell: the edge of rank k whose low end is this cell (to the
# right, down-left, down, down-right); bit k + 4: the edge of rank k whose
# high end is this cell.  Walking a forest on the grid then touches a byte
# per cell instead of an adjacency list.

_BIT_DROW = np.array([0, 1, 1, 1, 0, -1, -1, -1], dtype=np.int64)
_BIT_DCOL = np.array([1, -1, 0, 1, -1, 1, 0, -1], dtype=np.int64)


@njit(cache=True, nogil=True)
def _forest_mask(local_id, rows, cols):
    """The bitmask of the edges with these local ids (low * 4 + rank);
    :func:`_compress_tile` takes it (both are the tests' one-thread
    reference for :func:`compress_tile_bands`)."""
    mask = np.zeros(rows * cols, dtype=np.uint8)
    for k in range(local_id.size):
        low = np.int64(local_id[k]) >> 2
        rank = np.int64(local_id[k]) & 3
        high = low + _BIT_DROW[rank] * cols + _BIT_DCOL[rank]
        mask[low] |= np.uint8(1 << rank)
        mask[high] |= np.uint8(1 << (rank + 4))
    return mask


@njit(cache=True, nogil=True, inline="always")
def _popcount(byte):
    byte = np.int64(byte)
    count = 0
    while byte:
        byte &= byte - 1
        count += 1
    return count


@njit(cache=True, nogil=True, inline="always")
def _lowest_bit(byte):
    byte = np.int64(byte)
    bit = 0
    while not (byte >> bit) & 1:
        bit += 1
    return bit


@njit(cache=True, nogil=True, inline="always")
def _on_boundary(r, c, rows, cols, row0, col0, raster_rows, raster_cols):
    """A tile cell with a neighbour in another tile."""
    return ((r == 0 and row0 > 0) or (c == 0 and col0 > 0)
            or (r == rows - 1 and row0 + rows < raster_rows)
            or (c == cols - 1 and col0 + cols < raster_cols))


@njit(cache=True, nogil=True)
def _compress_tile(mask, values, rows, cols, row0, col0, raster_rows,
                   raster_cols, weight_index, half):
    """:func:`_compress` for a tile's forest given as a bitmask (consumed).

    Edge keys are recomputed from the cell values with the kernel's weight
    function.  Returns (a, b, weight, edge_id) in global cells.
    """
    n = rows * cols
    # Observation 3: strip dead ends, following each chain of leaves
    for start in range(n):
        v = start
        while True:
            bits = np.int64(mask[v])
            if bits == 0 or (bits & (bits - 1)) != 0:
                break
            r = v // cols
            c = v - r * cols
            if _on_boundary(r, c, rows, cols, row0, col0, raster_rows,
                            raster_cols):
                break
            bit = _lowest_bit(bits)
            u = v + _BIT_DROW[bit] * cols + _BIT_DCOL[bit]
            mask[v] = 0
            mask[u] &= np.uint8(~(1 << (bit ^ 4)) & 0xFF)
            v = u
    # Observation 4: contract paths through non-boundary degree-2 cells
    keep = np.zeros(n, dtype=np.bool_)
    count = 0
    for v in range(n):
        bits = np.int64(mask[v])
        if bits == 0:
            continue
        r = v // cols
        c = v - r * cols
        if _popcount(bits) != 2 or _on_boundary(
                r, c, rows, cols, row0, col0, raster_rows, raster_cols):
            keep[v] = True
            count += _popcount(bits)
    out_a = np.empty(count, dtype=np.int64)
    out_b = np.empty(count, dtype=np.int64)
    out_w = np.empty(count, dtype=values.dtype)
    out_e = np.empty(count, dtype=np.int64)
    emitted = 0
    for s in range(n):
        if not keep[s]:
            continue
        while mask[s]:
            bit = _lowest_bit(mask[s])
            heavy_w = values[0]
            heavy_e = np.int64(-1)
            here = s
            while True:
                there = here + _BIT_DROW[bit] * cols + _BIT_DCOL[bit]
                mask[here] &= np.uint8(~(1 << bit) & 0xFF)
                mask[there] &= np.uint8(~(1 << (bit ^ 4)) & 0xFF)
                low = here if bit < 4 else there
                high = there if bit < 4 else here
                lr = low // cols
                global_low = (row0 + lr) * raster_cols + col0 + low - lr * cols
                e = global_low * 4 + (bit & 3)
                w = _edge_weight(values[low], values[high], weight_index, half)
                if heavy_e < 0 or _heavier(w, e, heavy_w, heavy_e):
                    heavy_w = w
                    heavy_e = e
                here = there
                if keep[here]:
                    break
                bit = _lowest_bit(mask[here])
            sr = s // cols
            hr = here // cols
            out_a[emitted] = (row0 + sr) * raster_cols + col0 + s - sr * cols
            out_b[emitted] = (row0 + hr) * raster_cols + col0 + here - hr * cols
            out_w[emitted] = heavy_w
            out_e[emitted] = heavy_e
            emitted += 1
    return out_a[:emitted], out_b[:emitted], out_w[:emitted], out_e[:emitted]


@njit(cache=True, nogil=True, parallel=True)
def _low_bits_from_ids(local_id, n):
    """The low-end bits of the edges with these distinct local ids (low *
    4 + rank).  Two edges may share a low end, so each rank first gets a
    byte plane of its own (distinct edges write distinct bytes), then the
    planes are folded into one byte per cell."""
    planes = np.zeros((4, n), dtype=np.uint8)
    for k in prange(local_id.size):
        e = np.int64(local_id[k])
        planes[e & 3, e >> 2] = 1
    low_bits = np.empty(n, dtype=np.uint8)
    for v in prange(n):
        low_bits[v] = planes[0, v] | (planes[1, v] << 1) \
            | (planes[2, v] << 2) | (planes[3, v] << 3)
    return low_bits


@njit(cache=True, nogil=True, parallel=True)
def _local_ids(edges, cols):
    """``low * 4 + rank`` of (low, high) pairs in a tile's numbering."""
    out = np.empty(edges.shape[0], dtype=np.int32)
    for k in prange(edges.shape[0]):
        low = edges[k, 0]
        step = edges[k, 1] - low
        if step == 1 and low % cols != cols - 1:
            rank = 0  # for cols == 2 a down-left step is +1 too
        elif step == cols - 1:
            rank = 1
        elif step == cols:
            rank = 2
        else:
            rank = 3
        out[k] = low * 4 + rank
    return out


# --------------------------------------------------------------------------
# compression on all cores
#
# The forest is rooted at each tree's lowest cell (parallel band walk,
# ``_forest_cpu.tile_forest_codes``).  What survives Observation 3 is the
# union of the tree paths between boundary cells: mark the path from every
# boundary cell (with an edge) toward its root, then unmark, from each
# root down, the chain above the first boundary cell or branching.  Each
# surviving path through non-boundary cells of degree 2 then runs from a
# kept cell up the parent pointers to the next kept cell, except where it
# passes a chain top of degree 2 that is not kept: there two half paths
# meet, and are joined afterwards.

# An edge from a cell toward its parent along direction code k (E N W S
# NE NW SW SE): whether the cell is its low end, and the edge's rank.
_HERE_IS_LOW = np.array([1, 0, 0, 1, 0, 0, 1, 1], dtype=np.int64)
_RANK_OF_CODE = np.array([0, 2, 0, 2, 1, 3, 1, 3], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _has_edge_on_boundary(r, c, rows, cols, row0, col0, raster_rows,
                          raster_cols, masks, v):
    return masks[v] != 0 and _on_boundary(r, c, rows, cols, row0, col0,
                                          raster_rows, raster_cols)


@njit(cache=True, nogil=True, parallel=True)
def _mark_boundary_paths(code, masks, steps, root_code, rows, cols, row0,
                         col0, raster_rows, raster_cols, marked):
    """marked[v] = 1 on every path from a boundary cell to its root.  Walks
    stop at a marked cell (another walk covers the rest): idempotent
    writes, so threads may race."""
    for r in prange(rows):
        edge_row = r == 0 or r == rows - 1
        for c in range(cols):
            if not edge_row and c != 0 and c != cols - 1:
                continue
            v = np.int64(r) * cols + c
            if not _has_edge_on_boundary(r, c, rows, cols, row0, col0,
                                         raster_rows, raster_cols, masks, v):
                continue
            x = v
            while marked[x] == 0:
                marked[x] = 1
                k = np.int64(code[x])
                if k == root_code:
                    break
                x += steps[k]


@njit(cache=True, nogil=True, inline="always")
def _marked_children(x, code, masks, steps, opposite, marked):
    """(count, last) of the marked children of x."""
    count = 0
    child = np.int64(-1)
    bits = np.int64(masks[x])
    for k in range(8):
        if bits & (1 << k):
            u = x + steps[k]
            if marked[u] != 0 and np.int64(code[u]) == opposite[k]:
                count += 1
                child = u
    return count, child


@njit(cache=True, nogil=True, parallel=True)
def _trim_tops(code, masks, steps, opposite, root_code, rows, cols, row0,
               col0, raster_rows, raster_cols, marked):
    """From each marked root down, unmark the chain above the first
    boundary cell or branching; that cell becomes its tree's top
    (marked 2).  Trees are disjoint: no two walks meet."""
    for r in prange(rows):
        for c in range(cols):
            v = np.int64(r) * cols + c
            if marked[v] == 0 or np.int64(code[v]) != root_code:
                continue
            x = v
            while True:
                xr = x // cols
                if _on_boundary(xr, x - xr * cols, rows, cols, row0, col0,
                                raster_rows, raster_cols):
                    break
                count, child = _marked_children(x, code, masks, steps,
                                                opposite, marked)
                if count != 1:
                    break
                marked[x] = 0
                x = child
            marked[x] = 2


@njit(cache=True, nogil=True, parallel=True)
def _kept_cells(code, masks, steps, opposite, rows, cols, row0, col0,
                raster_rows, raster_cols, marked, kept, row_counts):
    """kept[v]: a surviving cell that is on the boundary or not of degree
    2; row_counts[r + 1]: the kept cells of row r below a top (each
    starts one path)."""
    for r in prange(rows):
        count = 0
        for c in range(cols):
            v = np.int64(r) * cols + c
            kept[v] = 0
            if marked[v] == 0:
                continue
            degree, _ = _marked_children(v, code, masks, steps, opposite,
                                         marked)
            if marked[v] == 1:
                degree += 1
            if degree > 0 and (degree != 2 or _on_boundary(
                    r, c, rows, cols, row0, col0, raster_rows, raster_cols)):
                kept[v] = 1
                if marked[v] == 1:
                    count += 1
        row_counts[r + 1] = count


@njit(cache=True, nogil=True, inline="always")
def _global_cell(x, cols, row0, col0, raster_cols):
    xr = x // cols
    return (row0 + xr) * raster_cols + col0 + x - xr * cols


@njit(cache=True, nogil=True, parallel=True)
def _contract_paths(code, steps, values, rows, cols, row0, col0, raster_cols,
                    weight_index, half, marked, kept, row_offsets, out_a,
                    out_b, out_w, out_e, out_open):
    """From every kept cell below a top, the path up to the next kept cell
    (or to a top that is not kept: ``out_open``), keyed by its heaviest
    edge; row r's paths from ``row_offsets[r]`` on."""
    for r in prange(rows):
        j = row_offsets[r]
        for c in range(cols):
            s = np.int64(r) * cols + c
            if kept[s] == 0 or marked[s] != 1:
                continue
            here = s
            heavy_w = values[0]
            heavy_e = np.int64(-1)
            while True:
                k = np.int64(code[here])
                there = here + steps[k]
                low = here if _HERE_IS_LOW[k] else there
                high = there if _HERE_IS_LOW[k] else here
                e = _global_cell(low, cols, row0, col0, raster_cols) * 4 \
                    + _RANK_OF_CODE[k]
                w = _edge_weight(values[low], values[high], weight_index,
                                 half)
                if heavy_e < 0 or _heavier(w, e, heavy_w, heavy_e):
                    heavy_w = w
                    heavy_e = e
                here = there
                if kept[here] != 0 or marked[here] == 2:
                    break
            out_a[j] = _global_cell(s, cols, row0, col0, raster_cols)
            out_b[j] = _global_cell(here, cols, row0, col0, raster_cols)
            out_w[j] = heavy_w
            out_e[j] = heavy_e
            out_open[j] = kept[here] == 0
            j += 1


def compress_tile_bands(low_bits, valid_flat, values, rows, cols, row0, col0,
                        raster_rows, raster_cols, weight_index, half):
    """:func:`_compress_tile` on all cores, from the forest's low-end bits
    (bits 4-7 ignored) and the tile's valid cells: the same edges, ends
    and keys (in another order, ends of a path possibly swapped)."""
    from .._forest_cpu import OPPOSITE, ROOT, tile_forest_codes
    n = rows * cols
    code, masks, steps = tile_forest_codes(low_bits, valid_flat, rows, cols)
    marked = np.zeros(n, dtype=np.uint8)
    _mark_boundary_paths(code, masks, steps, ROOT, rows, cols, row0, col0,
                         raster_rows, raster_cols, marked)
    _trim_tops(code, masks, steps, OPPOSITE, ROOT, rows, cols, row0, col0,
               raster_rows, raster_cols, marked)
    kept = np.empty(n, dtype=np.uint8)
    row_offsets = np.zeros(rows + 1, dtype=np.int64)
    _kept_cells(code, masks, steps, OPPOSITE, rows, cols, row0, col0,
                raster_rows, raster_cols, marked, kept, row_offsets)
    del masks
    np.cumsum(row_offsets, out=row_offsets)
    count = int(row_offsets[-1])
    out_a = np.empty(count, dtype=np.int64)
    out_b = np.empty(count, dtype=np.int64)
    out_w = np.empty(count, dtype=values.dtype)
    out_e = np.empty(count, dtype=np.int64)
    out_open = np.empty(count, dtype=np.bool_)
    _contract_paths(code, steps, values, rows, cols, row0, col0, raster_cols,
                    weight_index, half, marked, kept, row_offsets, out_a,
                    out_b, out_w, out_e, out_open)
    if not out_open.any():
        return out_a, out_b, out_w, out_e
    # two half paths meet at each top that is not kept: join them
    halves = np.flatnonzero(out_open)
    halves = halves[np.argsort(out_b[halves], kind="stable")]
    first, second = halves[0::2], halves[1::2]
    heavier = np.array([_heavier(out_w[i], out_e[i], out_w[k], out_e[k])
                        for i, k in zip(first, second)], dtype=bool)
    join_w = np.where(heavier, out_w[first], out_w[second])
    join_e = np.where(heavier, out_e[first], out_e[second])
    closed = ~out_open
    return (np.concatenate([out_a[closed], out_a[first]]),
            np.concatenate([out_b[closed], out_a[second]]),
            np.concatenate([out_w[closed], join_w]).astype(values.dtype),
            np.concatenate([out_e[closed], join_e]))
